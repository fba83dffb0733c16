//! SPDY/3.1 sessions (client and server) carrying Kubernetes remotecommand and portforward.
//!
//! Interoperates with moby/spdystream as used by k8s.io/apimachinery's httpstream/spdy, i.e.
//! with kubelet, kubectl and crictl. See session/mod.rs for the interop facts this relies on;
//! integration/kubectl.rs drives bosun's whole streaming server with the real Go client.
//!
//! ```rust,ignore
//! // Server side, after answering 101 (see `Connection` for the handshake):
//! let (conn, mut incoming) = Connection::server(TokioIo::new(upgraded));
//! while let Some(stream) = incoming.accept().await {   // SYN_REPLY already queued
//!     match stream.header("streamtype") { Some("stdin") => …, Some("error") => …, _ => … }
//! }
//! // …write the exit status on the error stream, `shutdown()` it, then:
//! conn.goaway().await;                                   // flushes, GOAWAY, closes
//! ```
//!
//! Backpressure: each stream buffers at most 256 KiB received; when an application leaves a
//! stream unread the session stops reading the connection (as spdystream does), so every
//! accepted stream should be read (or dropped, which discards its data) concurrently.

mod dictionary;
mod frame;
mod header;
mod session;
mod stream;
#[cfg(test)]
mod tests;

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

pub use stream::Stream;

/// Stream headers as on the wire: lower-case names, one entry per value.
pub type Headers = Vec<(String, String)>;

/// The token of the HTTP upgrade (`Upgrade: SPDY/3.1`).
pub const UPGRADE_PROTOCOL: &str = "SPDY/3.1";

/// A running SPDY session: a cheap handle (Clone) to the task that owns the connection.
/// When the last handle (`Connection`, `Incoming` or `Stream`) is dropped the session sends
/// GOAWAY and closes the connection.
///
/// # The HTTP/1.1 upgrade that precedes it (what the streaming server must do)
/// Verified against apimachinery `httpstream.Handshake` / `spdy.responseUpgrader` and against
/// kubectl 1.32 (integration/kubectl.rs). The client (kubectl, crictl; client-go's SPDY round
/// tripper) sends `POST <url>` with an empty body and:
/// - `Connection: Upgrade`, `Upgrade: SPDY/3.1`;
/// - one `X-Stream-Protocol-Version` header per subprotocol, most preferred first (values may
///   also be comma-separated). Seen from kubectl 1.32 exec/attach: `v5.channel.k8s.io`,
///   `v4.channel.k8s.io`, `v3.channel.k8s.io`, `v2.channel.k8s.io`, `channel.k8s.io`;
///   port-forward: `portforward.k8s.io`.
///
/// The server then:
/// 1. negotiates: the FIRST client-offered version that the server supports wins and is echoed
///    as the response header `X-Stream-Protocol-Version: <chosen>`. No version header at all →
///    `400 Bad Request`; no match → `403 Forbidden` with one
///    `X-Accepted-Stream-Protocol-Versions: <v>` header per server version. (Over SPDY, v5
///    behaves as v4; offering v4 as the best is what kubelet does in practice.)
/// 2. checks the upgrade: `Connection` contains "upgrade" and `Upgrade` contains "spdy/3.1"
///    (case-insensitive), else `400 Bad Request` ("unable to upgrade: missing upgrade headers").
/// 3. answers `101 Switching Protocols` with `Connection: Upgrade`, `Upgrade: SPDY/3.1` and
///    the negotiated `X-Stream-Protocol-Version`, then runs [`Connection::server`] on the raw
///    upgraded byte stream (including any bytes already buffered after the request head).
///    The client requires status 101, `Connection` containing "upgrade", `Upgrade` containing
///    "spdy/3.1"; for exec/attach it falls back to v1 semantics when the version echo is absent.
///
/// With hyper: return the 101 response, then `hyper::upgrade::on(req).await` and wrap the
/// `Upgraded` in `hyper_util::rt::TokioIo` to get tokio `AsyncRead + AsyncWrite`.
///
/// After the upgrade the client opens the streams (exec: `streamtype` = error, stdin, stdout,
/// stderr, resize as requested; port-forward: `streamtype` = error then data, with `port` and
/// `requestid`) and waits up to 30 s for each SYN_REPLY, which [`Incoming::accept`] sends.
/// [`Connection::open`] has no timeout of its own: wrap it in `tokio::time::timeout`.
#[derive(Clone)]
pub struct Connection {
    shared: session::User,
}

/// The streams the peer opens, in order.
pub struct Incoming {
    rx: mpsc::Receiver<Stream>,
    shared: session::User,
}

impl Connection {
    /// Runs a server session over `io` (an upgraded HTTP connection): returns the handle and
    /// the peer's new streams. The session runs in a spawned tokio task (call from within a
    /// runtime) until the connection ends.
    pub fn server<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
        io: T,
    ) -> (Connection, Incoming) {
        Self::start(io, true)
    }

    /// Like [`Connection::server`], for the client end (odd stream ids).
    pub fn client<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
        io: T,
    ) -> (Connection, Incoming) {
        Self::start(io, false)
    }

    fn start<T: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
        io: T,
        server: bool,
    ) -> (Connection, Incoming) {
        let shared = session::Shared::new(server);
        let rx = shared.spawn(io);
        let connection = Connection {
            shared: session::User::new(&shared),
        };
        let incoming = Incoming {
            rx,
            shared: session::User::new(&shared),
        };
        (connection, incoming)
    }

    /// SYN_STREAM with `headers`; resolves when the peer's SYN_REPLY arrives (errors on
    /// RST_STREAM, GOAWAY or the end of the session).
    pub async fn open(&self, headers: Headers) -> io::Result<Stream> {
        self.shared.open(headers).await
    }

    /// Sends GOAWAY (status OK) after what is already queued, then closes the connection.
    /// Streams still open see their reads fail and their writes refused.
    pub async fn goaway(&self) {
        self.shared.goaway().await
    }

    /// Resolves when the session has ended (peer closed, protocol error, write error, goaway).
    pub async fn closed(&self) {
        self.shared.closed().await
    }

    /// Sends a PING and waits for the echo: the round-trip time.
    pub async fn ping(&self) -> io::Result<Duration> {
        self.shared.ping().await
    }
}

impl Incoming {
    /// The next stream the peer opened, after queueing its SYN_REPLY (as apimachinery's server
    /// does on accepting a stream). `None` once the session ended or the peer sent GOAWAY.
    pub async fn accept(&mut self) -> Option<Stream> {
        let stream = self.rx.recv().await?;
        self.shared.reply(stream.id());
        Some(stream)
    }
}
