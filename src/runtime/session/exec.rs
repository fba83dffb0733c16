//! Streaming exec: a `runc exec` in a running container wired to a [`Session`].

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use tokio::sync::mpsc;

use super::streams::{self, Drain, TerminalReader, TerminalWriter};
use super::{Session, SessionEnd, StreamRequest, TerminalSize};
use crate::error::{Error, Result};
use crate::oci::runc::{ExecKiller, ExecStdio};
use crate::runtime::service::Runtime;

/// How long output may still flow without progress once the process ended (a descendant that
/// outlived it may hold the streams open forever; a client may have stopped reading).
const DRAIN_IDLE: Duration = Duration::from_secs(2);

/// Aborts a helper task when the session (its `done`) goes away.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Runtime {
    /// Starts `cmd` in the running container `id` with the container's process settings and
    /// the streams `req` asks for (see [`Session`]). Dropping the session before `done`
    /// resolves kills the process; so does the container's exit.
    pub async fn exec(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        req: StreamRequest,
    ) -> Result<Session> {
        let (id, process) = self.exec_process(id, cmd).await?;
        let stdio = ExecStdio {
            tty: req.tty,
            stdin: req.stdin,
            stdout: req.stdout && !req.tty,
            stderr: req.stderr && !req.tty,
        };
        let mut proc = self
            .runc(&id)
            .exec_stream(&id, &process, stdio, None)
            .await?;
        let killer = proc.killer();
        let io_err = |what: &str, e: std::io::Error| {
            Error::internal(format!("container {id}: exec: {what}: {e}"))
        };
        let drain = Drain::default();
        let mut session = Session {
            stdin: None,
            stdout: None,
            stderr: None,
            resize: None,
            done: futures::future::pending().boxed(),
        };
        let mut helpers = Vec::new();
        if let Some(master) = proc.terminal.take() {
            let resize_fd = master
                .try_clone()
                .map_err(|e| io_err("duplicate terminal", e))?;
            let master = streams::master(master).map_err(|e| io_err("terminal", e))?;
            if req.stdin {
                session.stdin = Some(Box::pin(TerminalWriter::new(master.clone())));
            }
            let output = drain.track(TerminalReader(master));
            if req.stdout {
                session.stdout = Some(Box::pin(output));
            } else {
                // Nobody reads the terminal: discard its output, or the process would block.
                helpers.push(AbortOnDrop(tokio::spawn(discard(output))));
            }
            let (tx, rx) = mpsc::unbounded_channel();
            session.resize = Some(tx);
            helpers.push(AbortOnDrop(tokio::spawn(resize(
                resize_fd,
                killer.clone(),
                rx,
            ))));
        } else {
            if let Some(fd) = proc.stdin.take() {
                let w = streams::pipe_writer(fd).map_err(|e| io_err("stdin", e))?;
                session.stdin = Some(Box::pin(w));
            }
            if let Some(fd) = proc.stdout.take() {
                let r = streams::pipe_reader(fd).map_err(|e| io_err("stdout", e))?;
                session.stdout = Some(Box::pin(drain.track(r)));
            }
            if let Some(fd) = proc.stderr.take() {
                let r = streams::pipe_reader(fd).map_err(|e| io_err("stderr", e))?;
                session.stderr = Some(Box::pin(drain.track(r)));
            }
        }
        // DESIGN rule 10: an exec'd process does not outlive its container.
        let handle = self.handle(&id);
        let on_exit = killer.clone();
        helpers.push(AbortOnDrop(tokio::spawn(async move {
            handle.exited().await;
            on_exit.kill();
        })));
        tracing::debug!(container = %id, tty = req.tty, "exec started");
        session.done = async move {
            let code = proc.wait().await;
            drain.settled(DRAIN_IDLE).await;
            drop(helpers);
            drop(proc);
            code.map(SessionEnd::Exited)
        }
        .boxed();
        Ok(session)
    }
}

/// Reads and drops a terminal's output nobody asked for.
async fn discard(mut output: impl tokio::io::AsyncRead + Unpin) {
    let _ = tokio::io::copy(&mut output, &mut tokio::io::sink()).await;
}

/// Applies the session's terminal resizes: the size on our pty, then SIGWINCH to runc, which
/// copies it to the container's terminal.
async fn resize(
    master: std::os::fd::OwnedFd,
    runc: ExecKiller,
    mut sizes: mpsc::UnboundedReceiver<TerminalSize>,
) {
    while let Some(size) = sizes.recv().await {
        if let Err(e) = crate::oci::runc::exec_stream::set_size(&master, size.width, size.height) {
            tracing::debug!("exec resize: {e}");
            continue;
        }
        runc.winch();
    }
}
