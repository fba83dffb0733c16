//! Protocol-neutral session pump: wires a runtime [`Session`] to the client's streams until it ends.

use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::runtime::{Session, SessionEnd, TerminalSize};

/// Bytes from the client (its stdin).
pub type ClientReader = Pin<Box<dyn AsyncRead + Send>>;
/// Bytes to the client (stdout, stderr).
pub type ClientWriter = Pin<Box<dyn AsyncWrite + Send>>;

/// Copy buffer for output streams: large enough for throughput, small enough per session.
const COPY_BUF: usize = 64 << 10;

/// The client's side of a session, as a transport presents it.
pub struct Wires {
    pub stdin: Option<ClientReader>,
    pub stdout: Option<ClientWriter>,
    pub stderr: Option<ClientWriter>,
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
    /// Resolves when the client has gone away (connection closed or broken).
    pub gone: BoxFuture<'static, ()>,
}

/// Runs `session` against `wires`: stdin copied in (EOF propagated), stdout/stderr copied out
/// (each shut down at its end), resizes forwarded. Returns how the session ended; an error when
/// the client went away or a copy failed, in which case the session is dropped (an exec'd
/// process is killed, an attach detaches).
pub async fn run(session: Session, wires: Wires) -> Result<SessionEnd> {
    let Session {
        stdin,
        stdout,
        stderr,
        resize,
        done,
    } = session;
    let Wires {
        stdin: client_stdin,
        stdout: client_stdout,
        stderr: client_stderr,
        resize: client_resize,
        gone,
    } = wires;
    let stdin_task = match (client_stdin, stdin) {
        (Some(mut from), Some(mut to)) => Some(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut from, &mut to).await;
            let _ = to.shutdown().await;
        })),
        (None, Some(mut to)) => {
            let _ = to.shutdown().await;
            None
        }
        _ => None,
    };
    let resize_task = match (client_resize, resize) {
        (Some(mut from), Some(to)) => Some(tokio::spawn(async move {
            while let Some(size) = from.recv().await {
                if to.send(size).is_err() {
                    break;
                }
            }
        })),
        _ => None,
    };
    let work = async {
        let (o, e) = tokio::join!(
            copy_out(stdout, client_stdout),
            copy_out(stderr, client_stderr)
        );
        o.map_err(|e| e.context("stdout"))?;
        e.map_err(|e| e.context("stderr"))?;
        done.await
    };
    let end = tokio::select! {
        end = work => end,
        () = gone => Err(Error::unavailable("the streaming client went away")),
    };
    for t in [stdin_task, resize_task].into_iter().flatten() {
        t.abort();
    }
    end
}

/// Copies `from` to `to` and shuts `to` down; output nobody asked to see is drained so the
/// process never blocks on it.
async fn copy_out(
    from: Option<crate::runtime::session::Reader>,
    to: Option<ClientWriter>,
) -> Result<()> {
    match (from, to) {
        (Some(from), Some(mut to)) => {
            let mut from = BufReader::with_capacity(COPY_BUF, from);
            tokio::io::copy_buf(&mut from, &mut to).await?;
            to.shutdown().await?;
        }
        (Some(mut from), None) => {
            tokio::io::copy(&mut from, &mut tokio::io::sink()).await?;
        }
        (None, Some(mut to)) => to.shutdown().await?,
        (None, None) => {}
    }
    Ok(())
}
