//! Interactive sessions the streaming server serves: exec, attach and port-forward endpoints.

pub(super) mod attach;
mod exec;
mod port_forward;
pub mod streams;

use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::error::Result;

/// A byte source of a session (stdout, stderr).
pub type Reader = Pin<Box<dyn AsyncRead + Send>>;
/// A byte sink of a session (stdin); `shutdown()` propagates end-of-file to the process.
pub type Writer = Pin<Box<dyn AsyncWrite + Send>>;

/// A terminal size in character cells, as the remotecommand resize stream sends it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminalSize {
    pub width: u16,
    pub height: u16,
}

/// What an exec or attach wants: the streams to wire and whether the process has a terminal.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamRequest {
    pub tty: bool,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
}

/// How a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The exec'd process (or, for attach, the container) exited with this code
    /// (128+signal when signalled).
    Exited(i32),
    /// Attach only: the container is still running; the attach ended because its output
    /// streams closed or the client detached.
    Detached,
}

/// A live exec or attach: the wired streams, a resize channel (TTY only) and the end.
///
/// Dropping an exec session before `done` resolves kills the exec'd process (no orphan is
/// left behind a vanished client); dropping an attach session only detaches.
pub struct Session {
    /// Present when the request asked for stdin.
    pub stdin: Option<Writer>,
    /// Present when asked; with a TTY this carries the terminal's output.
    pub stdout: Option<Reader>,
    /// Present when asked and there is no TTY.
    pub stderr: Option<Reader>,
    /// Present with a TTY: terminal resizes for the process's console.
    pub resize: Option<mpsc::UnboundedSender<TerminalSize>>,
    /// Resolves when the session ends. For an exec, after stdout/stderr reached EOF.
    pub done: BoxFuture<'static, Result<SessionEnd>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("resize", &self.resize.is_some())
            .finish_non_exhaustive()
    }
}
