//! An HTTP-aware proxy on 127.0.0.1 that injects registry faults (resets, short bodies, 429/503/404, slowness, corrupt bytes, bad ranges) and records every request.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What the proxy does to one request.
#[derive(Debug, Clone)]
pub enum Fault {
    /// Sends the head and this many body bytes, then resets the connection (RST).
    ResetAfter(u64),
    /// Sends the head (with the full Content-Length) and all but this many body bytes, then
    /// closes the connection.
    ShortBy(u64),
    /// Answers with this status, these headers and a distribution error body, without asking
    /// the registry.
    Answer(u16, Vec<(String, String)>),
    /// Passes the answer at this many bytes per second.
    Slow(u64),
    /// Flips the bits of the body byte at this offset.
    Corrupt(u64),
    /// Drops the request's `Range` header, as a registry without range support would ignore it
    /// (the answer is a 200 with the whole blob).
    IgnoreRange,
    /// Answers a ranged request with 206 and the bytes it asked for, but a `Content-Range`
    /// that starts 1000 bytes earlier than asked.
    WrongRange,
    /// Answers a ranged request with 206 and the `Content-Range` it asked for, but with the
    /// blob's bytes from offset 0 (only the digest can tell).
    LyingRange,
}

/// A fault for requests whose path contains `path`, for the next `times` of them.
#[derive(Debug, Clone)]
struct Rule {
    path: String,
    fault: Fault,
    times: usize,
}

/// One request the proxy saw and how its answer went.
#[derive(Debug, Clone)]
pub struct Seen {
    /// Request path (with query).
    pub path: String,
    /// The request's `Range` header.
    pub range: Option<String>,
    /// The status answered.
    pub status: u16,
    /// Body bytes written towards the client.
    pub sent: u64,
    /// When the request arrived.
    pub at: Instant,
    /// When the answer ended: written whole, cut by the fault, or the client went away.
    pub ended: Option<Instant>,
    /// Whether the client closed the connection before the answer was written whole.
    pub client_left: bool,
}

#[derive(Default)]
struct Shared {
    rules: Mutex<Vec<Rule>>,
    seen: Mutex<Vec<Seen>>,
    stop: AtomicBool,
}

/// Forwards each request to `target` over a fresh connection, applying the first rule whose
/// path matches; one request per client connection (`Connection: close`).
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
}

impl FaultProxy {
    /// Starts the proxy in front of `target` (`127.0.0.1:PORT`).
    pub fn start(target: String) -> anyhow::Result<FaultProxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        let shared = Arc::new(Shared::default());
        let s = shared.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(client) = conn else { continue };
                let (s, target) = (s.clone(), target.clone());
                std::thread::spawn(move || serve(client, &target, &s));
            }
        });
        Ok(FaultProxy { port, shared })
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Applies `fault` to the next `times` requests whose path contains `path` (`usize::MAX`:
    /// all of them). Rules are tried in the order they were added.
    pub fn fault(&self, path: &str, fault: Fault, times: usize) {
        if let Ok(mut r) = self.shared.rules.lock() {
            r.push(Rule {
                path: path.to_string(),
                fault,
                times,
            });
        }
    }

    /// Drops every rule: from now on requests pass untouched.
    pub fn clear(&self) {
        if let Ok(mut r) = self.shared.rules.lock() {
            r.clear();
        }
    }

    /// Every request so far, oldest first.
    pub fn seen(&self) -> Vec<Seen> {
        self.shared
            .seen
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default()
    }

    /// The requests whose path contains `path`.
    pub fn seen_for(&self, path: &str) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.path.contains(path))
            .collect()
    }

    /// Body bytes sent for requests whose path contains `path`.
    pub fn sent_for(&self, path: &str) -> u64 {
        self.seen_for(path).iter().map(|s| s.sent).sum()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// A parsed HTTP message head: the first line and the headers in order.
struct Head {
    first: String,
    headers: Vec<(String, String)>,
}

impl Head {
    fn get(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    fn without(mut self, names: &[&str]) -> Self {
        self.headers
            .retain(|(k, _)| !names.iter().any(|n| k.eq_ignore_ascii_case(n)));
        self
    }
    fn with(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }
    fn bytes(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.first);
        for (k, v) in &self.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        out.into_bytes()
    }
}

/// Reads up to the end of a message head; the head and whatever followed it.
fn read_head(s: &mut TcpStream) -> Option<(Head, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let end = loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf[0] == 0x16 {
            // A TLS ClientHello (a loopback registry is tried over HTTPS first): answer as Go's
            // net/http does, so the client falls back to plain HTTP.
            let _ = s.write_all(b"HTTP/1.0 400 Bad Request\r\n\r\n");
            return None;
        }
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i;
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let first = lines.next().unwrap_or_default().to_string();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    Some((Head { first, headers }, buf[end + 4..].to_vec()))
}

/// Decodes a chunked body (trailers ignored).
fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(i) = raw.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&raw[..i])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        raw = &raw[i + 2..];
        if size == 0 || raw.len() < size {
            break;
        }
        out.extend_from_slice(&raw[..size]);
        raw = raw.get(size + 2..).unwrap_or_default();
    }
    out
}

/// Asks the registry: the answer's head and whole body.
fn upstream(target: &str, req: &Head) -> Option<(Head, Vec<u8>)> {
    let mut up = TcpStream::connect(target).ok()?;
    let req = Head {
        first: req.first.clone(),
        headers: req.headers.clone(),
    }
    .without(&["host", "connection"])
    .with("Host", target)
    .with("Connection", "close");
    up.write_all(&req.bytes()).ok()?;
    let (head, mut body) = read_head(&mut up)?;
    up.read_to_end(&mut body).ok()?;
    if head
        .get("transfer-encoding")
        .is_some_and(|t| t.eq_ignore_ascii_case("chunked"))
    {
        body = dechunk(&body);
    }
    let head = head.without(&["transfer-encoding", "connection", "content-length"]);
    Some((head, body))
}

fn status_of(head: &Head) -> u16 {
    head.first
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        206 => "Partial Content",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

/// The requested start of `Range: bytes=N-`.
fn range_start(range: Option<&str>) -> Option<u64> {
    range?
        .strip_prefix("bytes=")?
        .split('-')
        .next()?
        .parse()
        .ok()
}

fn serve(mut client: TcpStream, target: &str, shared: &Shared) {
    let Some((req, _)) = read_head(&mut client) else {
        return;
    };
    let path = req.first.split(' ').nth(1).unwrap_or_default().to_string();
    let range = req.get("range").map(str::to_string);
    let fault = shared.rules.lock().ok().and_then(|mut rules| {
        let r = rules
            .iter_mut()
            .find(|r| r.times > 0 && path.contains(&r.path))?;
        r.times = r.times.saturating_sub(1);
        Some(r.fault.clone())
    });
    let index = {
        let Ok(mut seen) = shared.seen.lock() else {
            return;
        };
        seen.push(Seen {
            path,
            range: range.clone(),
            status: 0,
            sent: 0,
            at: Instant::now(),
            ended: None,
            client_left: false,
        });
        seen.len() - 1
    };
    let record = |status: u16, sent: u64, client_left: bool| {
        if let Ok(mut seen) = shared.seen.lock() {
            let s = &mut seen[index];
            (s.status, s.sent, s.client_left) = (status, sent, client_left);
            s.ended = Some(Instant::now());
        }
    };

    let (head, body) = match &fault {
        Some(Fault::Answer(status, headers)) => {
            let mut head = Head {
                first: format!("HTTP/1.1 {status} {}", reason(*status)),
                headers: headers.clone(),
            };
            head = head.with("Content-Type", "application/json");
            let code = if *status == 404 {
                "BLOB_UNKNOWN"
            } else {
                "UNAVAILABLE"
            };
            let body =
                format!(r#"{{"errors":[{{"code":"{code}","message":"injected by the test"}}]}}"#);
            (head, body.into_bytes())
        }
        _ => match upstream(target, &req.without(&["range"])) {
            Some(a) => a,
            None => return,
        },
    };
    // The registry is always asked for the whole blob; ranges are cut here, so each fault
    // knows the whole body.
    let status = status_of(&head);
    let total = body.len() as u64;
    let start = range_start(range.as_deref())
        .filter(|_| status == 200 && !matches!(fault, Some(Fault::IgnoreRange)));
    let (status, head, mut body) = match (start, &fault) {
        (Some(s), Some(Fault::LyingRange)) => {
            let cr = format!("bytes {s}-{}/{total}", total.saturating_sub(1));
            let mut b = body;
            b.truncate((total - s.min(total)) as usize);
            (206, head.with("Content-Range", &cr), b)
        }
        (Some(s), Some(Fault::WrongRange)) => {
            let cr = format!(
                "bytes {}-{}/{total}",
                s.saturating_sub(1000),
                total.saturating_sub(1)
            );
            (
                206,
                head.with("Content-Range", &cr),
                body[s.min(total) as usize..].to_vec(),
            )
        }
        (Some(s), _) if s < total => {
            let cr = format!("bytes {s}-{}/{total}", total - 1);
            (
                206,
                head.with("Content-Range", &cr),
                body[s as usize..].to_vec(),
            )
        }
        _ => (status, head, body),
    };
    let head = Head {
        first: format!("HTTP/1.1 {status} {}", reason(status)),
        headers: head.headers,
    }
    .with("Content-Length", &body.len().to_string())
    .with("Connection", "close");
    if let Some(Fault::Corrupt(at)) = fault {
        if let Some(b) = body.get_mut(at as usize) {
            *b ^= 0xff;
        }
    }
    let (limit, rate) = match fault {
        Some(Fault::ResetAfter(n)) => (n.min(body.len() as u64), None),
        Some(Fault::ShortBy(n)) => ((body.len() as u64).saturating_sub(n), None),
        Some(Fault::Slow(rate)) => (body.len() as u64, Some(rate)),
        _ => (body.len() as u64, None),
    };
    if client.write_all(&head.bytes()).is_err() {
        record(status, 0, true);
        return;
    }
    let mut sent = 0u64;
    let step = 16 << 10;
    while sent < limit {
        if shared.stop.load(Ordering::Relaxed) {
            break;
        }
        let n = (limit - sent).min(step);
        let piece = &body[sent as usize..(sent + n) as usize];
        if client.write_all(piece).is_err() {
            record(status, sent, true);
            return;
        }
        sent += n;
        if let Ok(mut seen) = shared.seen.lock() {
            seen[index].sent = sent;
        }
        if let Some(rate) = rate {
            std::thread::sleep(Duration::from_micros(n * 1_000_000 / rate.max(1)));
        }
    }
    if let Some(Fault::ResetAfter(_)) = fault {
        let _ = client.flush();
        // SO_LINGER 0: closing sends RST instead of FIN.
        let _ = rustix::net::sockopt::set_socket_linger(&client, Some(Duration::ZERO));
        record(status, sent, false);
        drop(client);
        return;
    }
    let _ = client.shutdown(Shutdown::Write);
    // Wait for the client to close its side, so `ended` is when it really took the answer.
    let _ = client.set_read_timeout(Some(Duration::from_secs(30)));
    let mut sink = [0u8; 512];
    let client_left = client.read(&mut sink).is_err();
    record(status, sent, client_left && sent < body.len() as u64);
    body.clear();
}
