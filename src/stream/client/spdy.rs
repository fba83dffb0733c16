//! SPDY client: the HTTP/1.1 upgrade, remotecommand streams as client-go creates them, and port-forward stream pairs.

use std::sync::atomic::{AtomicU64, Ordering};

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::{split_url, ExecIo};
use crate::error::{Error, Result};
use crate::stream::negotiate::{self, Version};
use crate::stream::over_spdy::STREAM_TYPE;
use crate::stream::resize;
use crate::stream::spdy::{Connection, Stream};
use crate::stream::status::{self, Outcome};

/// What client-go's SPDY executor offers (newest first).
pub const EXEC_PROTOCOLS: [&str; 4] = [
    "v4.channel.k8s.io",
    "v3.channel.k8s.io",
    "v2.channel.k8s.io",
    "channel.k8s.io",
];

/// Largest upgrade answer header accepted.
const MAX_HEAD: usize = 16 << 10;

/// Sends the upgrade request offering `protocols` and reads the answer; returns the connection
/// (with any bytes read past the answer) and the negotiated protocol.
pub async fn upgrade(url: &str, protocols: &[&str]) -> Result<(BufReader<TcpStream>, String)> {
    let (authority, path) = split_url(url)?;
    let tcp = TcpStream::connect(authority)
        .await
        .map_err(|e| Error::unavailable(format!("connect {authority}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let mut head = format!(
        "POST {path} HTTP/1.1\r\nHost: {authority}\r\nConnection: Upgrade\r\nUpgrade: {}\r\nContent-Length: 0\r\n",
        negotiate::SPDY_UPGRADE
    );
    for p in protocols {
        head.push_str(&format!("{}: {p}\r\n", negotiate::PROTOCOL_HEADER));
    }
    head.push_str("\r\n");
    let mut io = BufReader::new(tcp);
    io.get_mut().write_all(head.as_bytes()).await?;
    let mut status_line = String::new();
    io.read_line(&mut status_line).await?;
    let mut headers = Vec::new();
    let mut total = status_line.len();
    loop {
        let mut line = String::new();
        if io.read_line(&mut line).await? == 0 {
            return Err(Error::unavailable(format!(
                "{url}: connection closed during upgrade"
            )));
        }
        total += line.len();
        if total > MAX_HEAD {
            return Err(Error::unavailable(format!(
                "{url}: upgrade answer too large"
            )));
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    let code = status_line.split_whitespace().nth(1).unwrap_or("");
    if code != "101" {
        let len = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse::<usize>().ok())
            .unwrap_or(0)
            .min(4096);
        let mut body = vec![0u8; len];
        let _ = io.read_exact(&mut body).await;
        return Err(Error::unavailable(format!(
            "{url}: upgrade refused: {} {}",
            status_line.trim(),
            String::from_utf8_lossy(&body).trim()
        )));
    }
    let proto = headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(negotiate::PROTOCOL_HEADER))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    Ok((io, proto))
}

fn typed(kind: &str) -> Vec<(String, String)> {
    vec![(STREAM_TYPE.to_string(), kind.to_string())]
}

/// Exec or attach over SPDY offering `protocols`.
pub async fn exec(url: &str, protocols: &[&str], io: ExecIo) -> Result<Outcome> {
    let (conn_io, proto) = upgrade(url, protocols).await?;
    let version = [Version::V4, Version::V3, Version::V2, Version::V1]
        .into_iter()
        .find(|v| v.name() == proto)
        .ok_or_else(|| Error::unavailable(format!("{url}: server chose protocol {proto:?}")))?;
    exec_on(conn_io, version, io).await
}

/// The exec or attach session on an upgraded connection speaking `version`.
///
/// A stream the server resets (RST_STREAM) after sending its data ends there, as in
/// client-go's spdystream: containerd 1.6 resets every stream right after writing the exit
/// status, and that status must still count.
async fn exec_on<T>(conn_io: T, version: Version, io: ExecIo) -> Result<Outcome>
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, _incoming) = Connection::client(conn_io);
    let _guard = GoawayOnDrop(conn.clone());
    let open = |kind: &'static str| {
        let conn = conn.clone();
        async move {
            conn.open(typed(kind))
                .await
                .map_err(|e| Error::unavailable(format!("open {kind} stream: {e}")))
        }
    };
    // client-go's order: error first, then stdin, stdout, stderr, resize.
    let mut error = open("error").await?;
    let stdin = match io.stdin {
        Some(r) => Some((r, open("stdin").await?)),
        None => None,
    };
    let stdout = match io.stdout {
        Some(w) => Some((open("stdout").await?, w)),
        None => None,
    };
    let stderr = match io.stderr {
        Some(w) if !io.tty => Some((open("stderr").await?, w)),
        _ => None,
    };
    let resizes = match io.resize {
        Some(rx) if io.tty && version.resizes() => Some((rx, open("resize").await?)),
        _ => None,
    };
    let _ = error.shutdown().await;
    let mut tasks = Vec::new();
    if let Some((mut from, mut to)) = stdin {
        tasks.push(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
            let _ = to.shutdown().await;
        }));
    }
    if let Some((mut rx, mut to)) = resizes {
        tasks.push(tokio::spawn(async move {
            while let Some(size) = rx.recv().await {
                if to.write_all(&resize::encode(size)).await.is_err() {
                    break;
                }
            }
        }));
    }
    let (o, e, payload) = tokio::join!(copy_stream(stdout), copy_stream(stderr), async {
        let mut v = Vec::new();
        until_reset(error.read_to_end(&mut v).await).map(|_| v)
    });
    for t in tasks {
        t.abort();
    }
    conn.goaway().await;
    o?;
    e?;
    let payload = payload.map_err(|e| Error::unavailable(format!("error stream: {e}")))?;
    Ok(status::parse(&payload, version.json_status()))
}

/// A stream reset by the peer counts as its end: everything that came before it was read.
fn until_reset<N: Default>(r: std::io::Result<N>) -> std::io::Result<N> {
    match r {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => Ok(N::default()),
        r => r,
    }
}

/// Ends the session when the exec is dropped midway (the caller gave up).
struct GoawayOnDrop(Connection);

impl Drop for GoawayOnDrop {
    fn drop(&mut self) {
        let conn = self.0.clone();
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move { conn.goaway().await });
        }
    }
}

async fn copy_stream<W: AsyncWrite + Unpin>(s: Option<(Stream, W)>) -> Result<()> {
    if let Some((mut from, mut to)) = s {
        let mut from = BufReader::with_capacity(64 << 10, &mut from);
        until_reset(tokio::io::copy_buf(&mut from, &mut to).await)?;
        to.flush().await?;
    }
    Ok(())
}

/// A port-forward connection: each forwarded local connection is a data + error stream pair.
pub struct PortForwarder {
    conn: Connection,
    next: AtomicU64,
}

impl PortForwarder {
    /// Upgrades `url` to SPDY with `portforward.k8s.io`.
    pub async fn connect(url: &str) -> Result<PortForwarder> {
        let (io, proto) = upgrade(url, &[negotiate::PORT_FORWARD_V1]).await?;
        if proto != negotiate::PORT_FORWARD_V1 {
            return Err(Error::unavailable(format!(
                "{url}: server chose protocol {proto:?}"
            )));
        }
        Ok(Self::over(io))
    }

    /// A forwarder over an already upgraded byte stream.
    pub fn over<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>(io: T) -> PortForwarder {
        let (conn, _incoming) = Connection::client(io);
        PortForwarder {
            conn,
            next: AtomicU64::new(0),
        }
    }

    /// Forwards `local` to `port` in the pod until both directions end; the server's error
    /// message, if any, is the error.
    pub async fn forward(&self, port: u16, local: TcpStream) -> Result<()> {
        let id = self.next.fetch_add(1, Ordering::Relaxed).to_string();
        let headers = |kind: &str| {
            vec![
                (STREAM_TYPE.to_string(), kind.to_string()),
                ("port".to_string(), port.to_string()),
                ("requestID".to_string(), id.clone()),
            ]
        };
        let mut error = self
            .conn
            .open(headers("error"))
            .await
            .map_err(|e| Error::unavailable(format!("port {port}: open error stream: {e}")))?;
        let _ = error.shutdown().await;
        let data = self
            .conn
            .open(headers("data"))
            .await
            .map_err(|e| Error::unavailable(format!("port {port}: open data stream: {e}")))?;
        let (mut dr, mut dw) = tokio::io::split(data);
        let (mut lr, mut lw) = local.into_split();
        let up = tokio::spawn(async move {
            let _ = tokio::io::copy(&mut lr, &mut dw).await;
            let _ = dw.shutdown().await;
        });
        let down = async {
            let r = tokio::io::copy(&mut dr, &mut lw).await;
            let _ = lw.shutdown().await;
            r
        };
        let errors = async {
            let mut v = Vec::new();
            let _ = error.read_to_end(&mut v).await;
            v
        };
        let (down, msg) = tokio::join!(down, errors);
        up.abort();
        if !msg.is_empty() {
            return Err(Error::unavailable(
                String::from_utf8_lossy(&msg).into_owned(),
            ));
        }
        down.map(|_| ()).map_err(Error::from)
    }

    /// Resolves when the connection has ended.
    pub async fn closed(&self) {
        self.conn.closed().await;
    }

    /// Ends the connection.
    pub async fn close(&self) {
        self.conn.goaway().await;
    }
}

#[cfg(test)]
#[path = "spdy_tests.rs"]
mod tests;
