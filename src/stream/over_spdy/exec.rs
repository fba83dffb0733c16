//! Server side of remotecommand v1–v4 over SPDY: the client opens one stream per role (`streamType` stdin, stdout, stderr, error, resize), the server runs the session and reports on the error stream.

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use super::{STREAM_CREATION_TIMEOUT, STREAM_TYPE};
use crate::error::Result;
use crate::runtime::{Session, StreamRequest};
use crate::stream::negotiate::Version;
use crate::stream::pump::{self, Wires};
use crate::stream::resize;
use crate::stream::spdy::{Connection, Stream};
use crate::stream::status::{self, Outcome};

/// The streams of one session, as the client opened them.
#[derive(Default)]
struct Streams {
    error: Option<Stream>,
    stdin: Option<Stream>,
    stdout: Option<Stream>,
    stderr: Option<Stream>,
    resize: Option<Stream>,
}

/// Serves one exec (`exec` true) or attach over the upgraded connection `io`.
pub async fn serve<T>(
    io: T,
    version: Version,
    req: StreamRequest,
    start: BoxFuture<'static, Result<Session>>,
    exec: bool,
) where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, mut incoming) = Connection::server(io);
    let resizes = req.tty && version.resizes();
    let expected = 1
        + usize::from(req.stdin)
        + usize::from(req.stdout)
        + usize::from(req.stderr && !req.tty)
        + usize::from(resizes);
    let mut s = Streams::default();
    let mut got = 0;
    let deadline = tokio::time::sleep(STREAM_CREATION_TIMEOUT);
    tokio::pin!(deadline);
    while got < expected {
        let stream = tokio::select! {
            s = incoming.accept() => s,
            () = &mut deadline => {
                tracing::debug!("spdy exec: timed out waiting for the client's streams");
                None
            }
        };
        let Some(stream) = stream else {
            conn.goaway().await;
            return;
        };
        let slot = match stream.header(STREAM_TYPE) {
            Some("error") => &mut s.error,
            Some("stdin") => &mut s.stdin,
            Some("stdout") => &mut s.stdout,
            Some("stderr") => &mut s.stderr,
            Some("resize") if resizes => &mut s.resize,
            other => {
                tracing::debug!(stream_type = ?other, "spdy exec: unexpected stream");
                stream.reset();
                continue;
            }
        };
        if slot.is_none() {
            got += 1;
        }
        *slot = Some(stream);
    }
    let resize_rx = s.resize.take().map(|r| {
        let (tx, rx) = mpsc::channel(4);
        tokio::spawn(resize::read_stream(r, tx));
        rx
    });
    let outcome = match start.await {
        Err(e) => Outcome::Failed(e.to_string()),
        Ok(session) => {
            let closed = conn.clone();
            let wires = Wires {
                stdin: s.stdin.take().map(|r| Box::pin(r) as pump::ClientReader),
                stdout: s.stdout.take().map(|w| Box::pin(w) as pump::ClientWriter),
                stderr: s.stderr.take().map(|w| Box::pin(w) as pump::ClientWriter),
                resize: resize_rx,
                gone: Box::pin(async move { closed.closed().await }),
            };
            match pump::run(session, wires).await {
                Ok(end) if exec => Outcome::of_exec(&end),
                Ok(_) => Outcome::Success,
                Err(e) => Outcome::Failed(e.to_string()),
            }
        }
    };
    if let Some(mut error) = s.error.take() {
        let payload = if version.json_status() {
            status::v4_payload(&outcome)
        } else {
            status::v1_payload(&outcome)
        };
        if !payload.is_empty() {
            let _ = error.write_all(&payload).await;
        }
        let _ = error.shutdown().await;
    }
    // The client closes once it has read everything; a client that lingers is cut off.
    let _ = tokio::time::timeout(super::CLOSE_WAIT, conn.closed()).await;
    conn.goaway().await;
}
