//! A throttling TCP proxy on 127.0.0.1: slows registry → client bytes so a pull can be interrupted.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Forwards connections to `target`, passing at most `bytes_per_sec` towards the client.
pub struct SlowProxy {
    port: u16,
    stop: Arc<AtomicBool>,
    /// Bytes passed towards the client so far.
    pub sent: Arc<AtomicU64>,
}

fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    rate: Option<u64>,
    sent: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
        if let Some(rate) = rate {
            sent.fetch_add(n as u64, Ordering::Relaxed);
            std::thread::sleep(Duration::from_micros(n as u64 * 1_000_000 / rate));
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

impl SlowProxy {
    /// Starts the proxy.
    pub fn start(target: String, bytes_per_sec: u64) -> anyhow::Result<SlowProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicU64::new(0));
        let (s, c) = (stop.clone(), sent.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let Ok(upstream) = TcpStream::connect(&target) else {
                    continue;
                };
                let (c1, u1) = match (client.try_clone(), upstream.try_clone()) {
                    (Ok(a), Ok(b)) => (a, b),
                    _ => continue,
                };
                let (s1, s2, c2) = (s.clone(), s.clone(), c.clone());
                std::thread::spawn(move || pump(c1, u1, None, Arc::default(), s1));
                std::thread::spawn(move || pump(upstream, client, Some(bytes_per_sec), c2, s2));
            }
        });
        Ok(SlowProxy { port, stop, sent })
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for SlowProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}
