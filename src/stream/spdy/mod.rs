//! SPDY/3.1 sessions (client and server) carrying Kubernetes remotecommand and portforward.
//!
//! Interoperates with moby/spdystream as used by k8s.io/apimachinery's httpstream/spdy, i.e.
//! with kubelet, kubectl and crictl. See session.rs for the interop facts this relies on.

mod dictionary;
mod frame;
mod header;
#[cfg(test)]
mod kubectl_tests;
mod session;
mod stream;
#[cfg(test)]
mod tests;

use std::io;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

pub use header::HeaderError;
pub use stream::Stream;

/// Stream headers as on the wire: lower-case names, one entry per value.
pub type Headers = Vec<(String, String)>;

/// The token of the HTTP upgrade (`Upgrade: SPDY/3.1`).
pub const UPGRADE_PROTOCOL: &str = "SPDY/3.1";

/// A running SPDY session: a cheap handle (Clone) to the task that owns the connection.
///
/// # The HTTP upgrade that precedes it (apimachinery httpstream + httpstream/spdy)
/// The client (kubectl, crictl, kubelet's proxy) sends a request (`POST` for exec/attach,
/// `POST`/`GET` for port-forward) with
/// `Connection: Upgrade`, `Upgrade: SPDY/3.1` and one `X-Stream-Protocol-Version` header per
/// subprotocol it speaks, most preferred first (exec/attach: `v5.channel.k8s.io`,
/// `v4.channel.k8s.io`, `v3.channel.k8s.io`, `v2.channel.k8s.io`, `channel.k8s.io`;
/// port-forward: `portforward.k8s.io`). The server:
/// 1. negotiates (`httpstream.Handshake`): no `X-Stream-Protocol-Version` at all means the
///    legacy protocol (`channel.k8s.io` / `portforward.k8s.io`) and no header in the answer;
///    otherwise the first client-offered version the server supports wins and is echoed in the
///    response header `X-Stream-Protocol-Version`; if none matches, answer `403 Forbidden` with
///    `X-Accepted-Stream-Protocol-Versions: <server's list, comma-separated>` and stop;
/// 2. checks the upgrade (`httpstream.IsUpgradeRequest`: `Connection` contains "upgrade" and
///    `Upgrade` equals "SPDY/3.1", both case-insensitive), else `400 Bad Request`
///    ("unable to upgrade: missing upgrade headers in request");
/// 3. answers `101 Switching Protocols` with `Connection: Upgrade`, `Upgrade: SPDY/3.1` (and
///    the negotiated `X-Stream-Protocol-Version`), then runs `Connection::server` on the raw
///    upgraded connection. The client checks the 101 status, `Connection`/`Upgrade` and the
///    echoed version (`v4`+ requires it), then starts its SPDY client.
///
/// With hyper: `hyper::upgrade::on(&mut req)` after returning the 101 response, and
/// `hyper_util::rt::TokioIo` to turn the `Upgraded` into tokio AsyncRead + AsyncWrite.
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
