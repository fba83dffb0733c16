//! Single-use, expiring tokens for registered streaming requests (like the kubelet's request cache).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind, Result};
use crate::runtime::StreamRequest;

/// How long a URL handed out by Exec/Attach/PortForward stays valid.
pub const TOKEN_TTL: Duration = Duration::from_secs(60);
/// Most requests waiting for their client at once.
pub const MAX_PENDING: usize = 1000;

/// A request registered by a CRI RPC, waiting for its client to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pending {
    /// Exec `cmd` in a container.
    Exec {
        container_id: String,
        cmd: Vec<String>,
        req: StreamRequest,
    },
    /// Attach to a container's stdio.
    Attach {
        container_id: String,
        req: StreamRequest,
    },
    /// Forward ports of a sandbox (the ports come with the client's connection).
    PortForward { sandbox_id: String },
}

impl Pending {
    /// The URL path segment of this kind of request.
    pub fn kind(&self) -> &'static str {
        match self {
            Pending::Exec { .. } => "exec",
            Pending::Attach { .. } => "attach",
            Pending::PortForward { .. } => "portforward",
        }
    }
}

/// The token → request map; each token is consumed by its first use or lost at expiry.
#[derive(Debug)]
pub struct Cache {
    ttl: Duration,
    max: usize,
    entries: Mutex<HashMap<String, (Instant, Pending)>>,
}

impl Default for Cache {
    fn default() -> Self {
        Cache::new(TOKEN_TTL, MAX_PENDING)
    }
}

impl Cache {
    /// A cache whose tokens live `ttl`, holding at most `max` of them.
    pub fn new(ttl: Duration, max: usize) -> Self {
        Cache {
            ttl,
            max,
            entries: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Instant, Pending)>> {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers `req`, returning its token; ResourceExhausted when `max` live requests wait.
    pub fn insert(&self, req: Pending) -> Result<String> {
        let now = Instant::now();
        let token = new_token();
        let mut map = self.lock();
        if map.len() >= self.max {
            map.retain(|_, (expires, _)| *expires > now);
        }
        if map.len() >= self.max {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!(
                    "streaming: {} requests already wait for their client",
                    self.max
                ),
            ));
        }
        map.insert(token.clone(), (now + self.ttl, req));
        Ok(token)
    }

    /// Takes the request of `token` if it exists and has not expired.
    pub fn consume(&self, token: &str) -> Option<Pending> {
        let (expires, req) = self.lock().remove(token)?;
        (expires > Instant::now()).then_some(req)
    }

    /// Requests waiting (expired ones included until the next sweep).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no request waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// 128 random bits, URL-safe.
fn new_token() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pf() -> Pending {
        Pending::PortForward {
            sandbox_id: "s".into(),
        }
    }

    #[test]
    fn a_token_is_used_once() {
        let c = Cache::default();
        let t = c.insert(pf()).expect("insert");
        assert_eq!(t.len(), 32);
        assert_eq!(c.consume(&t), Some(pf()));
        assert_eq!(c.consume(&t), None);
        assert_eq!(c.consume("nope"), None);
    }

    #[test]
    fn tokens_expire_and_the_cache_is_bounded() {
        let c = Cache::new(Duration::from_millis(30), 2);
        let t = c.insert(pf()).expect("insert");
        c.insert(pf()).expect("insert");
        let e = c.insert(pf()).expect_err("full");
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted);
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.consume(&t), None, "expired");
        // Expired entries make room.
        c.insert(pf()).expect("insert after expiry");
        c.insert(pf()).expect("insert after expiry");
        assert_eq!(c.len(), 2);
    }
}
