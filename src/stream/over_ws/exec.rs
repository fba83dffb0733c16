//! Server side of remotecommand over WebSocket (the kubelet's websocket.go semantics): exec and attach.

use std::collections::HashMap;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;

use super::frame::{ERROR, RESIZE, STDERR, STDIN, STDOUT};
use super::mux::{Mux, Route};
use crate::error::Result;
use crate::runtime::{Session, StreamRequest};
use crate::stream::negotiate::{Version, WsProtocol};
use crate::stream::pump::{self, Wires};
use crate::stream::resize;
use crate::stream::status::{self, Outcome};

/// Bytes of client stdin buffered before the client is held back.
const STDIN_BUF: usize = 64 << 10;

/// Serves one exec (`exec` true) or attach on `ws`: the channels `req` asks for, the session
/// from `start`, then the outcome on the error channel and a close.
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    proto: WsProtocol,
    req: StreamRequest,
    start: BoxFuture<'static, Result<Session>>,
    exec: bool,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut routes: HashMap<u8, Route> = HashMap::new();
    let stdin = req.stdin.then(|| {
        let (r, w) = tokio::io::duplex(STDIN_BUF);
        routes.insert(STDIN, Box::new(w));
        r
    });
    let resizes = req.tty.then(|| {
        let (r, w) = tokio::io::duplex(4096);
        routes.insert(RESIZE, Box::new(w));
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(resize::read_stream(r, tx));
        rx
    });
    let mux = Mux::start(ws, routes, proto.base64, proto.version == Version::V5);
    // The kubelet's "connected" signal: an empty message on the lowest writable channel.
    let first = if req.stdout {
        STDOUT
    } else if req.stderr {
        STDERR
    } else {
        ERROR
    };
    let _ = mux.send(first, &[]).await;
    let outcome = match start.await {
        Err(e) => Outcome::Failed(e.to_string()),
        Ok(session) => {
            let wires = Wires {
                stdin: stdin.map(|r| Box::pin(r) as pump::ClientReader),
                stdout: req
                    .stdout
                    .then(|| Box::pin(mux.writer(STDOUT, false)) as pump::ClientWriter),
                stderr: (req.stderr && !req.tty)
                    .then(|| Box::pin(mux.writer(STDERR, false)) as pump::ClientWriter),
                resize: resizes,
                gone: mux.gone(),
            };
            match pump::run(session, wires).await {
                Ok(end) if exec => Outcome::of_exec(&end),
                Ok(_) => Outcome::Success,
                Err(e) => Outcome::Failed(e.to_string()),
            }
        }
    };
    let payload = if proto.version.json_status() {
        status::v4_payload(&outcome)
    } else {
        status::v1_payload(&outcome)
    };
    if !payload.is_empty() {
        let _ = mux.send(ERROR, &payload).await;
    }
    mux.close().await;
}
