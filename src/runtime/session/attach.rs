//! Attach: a session on a running container's stdio through its monitor's attach socket
//! (exec lives in [`super::exec`], port-forward in [`super::port_forward`]).
//!
//! The daemon is one more client of the monitor's `attach.sock` (format in
//! [`crate::monitor::attach_proto`]): a task demultiplexes the tagged output into the
//! session's readers; stdin and resizes become messages. The monitor disconnects a client
//! that cannot keep up, so a stalled session never holds the container back.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::FutureExt;
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendFlags, SocketAddrUnix, SocketFlags,
    SocketType,
};
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, DuplexStream, Interest, ReadBuf};
use tokio::sync::{mpsc, watch};

use super::{Session, SessionEnd, StreamRequest, TerminalSize};
use crate::error::{Error, ErrorKind, Result};
use crate::monitor::attach_proto::{
    resize_message, IN_STDIN, IN_STDIN_EOF, MAX_STDIN_CHUNK, OUT_READY, OUT_STDERR, OUT_STDOUT,
    SOCKET_NAME,
};
use crate::runtime::service::{require_id, Runtime};
use crate::runtime::state::paths;
use crate::runtime::state::status::ContainerState;

/// The attach socket, shared by the demultiplexer, the stdin writer and the resizer.
type Socket = Arc<AsyncFd<OwnedFd>>;

/// How much output a session buffers per stream before the demultiplexer waits (and the
/// monitor, if the session still does not read, disconnects it).
const STREAM_BUFFER: usize = 256 << 10;

/// How long the monitor may take to accept an attach (its loop never blocks for long).
const READY_WAIT: Duration = Duration::from_secs(5);

/// How long an ended attach waits for the container's exit to be recorded before it calls
/// itself detached (the monitor closes the socket right after writing the exit record).
const EXIT_WAIT: Duration = Duration::from_secs(5);

impl Runtime {
    /// Attaches to the running container `id`'s stdio through its monitor (see [`Session`]).
    /// Several attaches may run at once; ending one does not stop the container.
    pub async fn attach(self: &Arc<Self>, id: &str, req: StreamRequest) -> Result<Session> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let st = entry.status().state();
        if st != ContainerState::Running {
            return Err(Error::precondition(format!(
                "container {id}: attach: container is {st:?}"
            )));
        }
        let meta = entry.meta();
        if req.stdin && !meta.request.stdin {
            return Err(Error::precondition(format!(
                "container {id}: attach: stdin requested but the container was created without stdin"
            )));
        }
        let tty = meta.request.tty;
        let bundle = paths::bundle(&meta.state_dir);
        let fd = connect(&bundle).map_err(|e| {
            let why = match e.kind() {
                io::ErrorKind::NotFound => {
                    "its monitor has no attach socket (started by an older bosun; restart the container to attach)".to_string()
                }
                io::ErrorKind::ConnectionRefused => "its monitor is gone".to_string(),
                io::ErrorKind::WouldBlock => {
                    return Error::unavailable(format!(
                        "container {id}: attach: its monitor is busy, retry"
                    ))
                }
                _ => format!("connect to its monitor: {e}"),
            };
            let kind = if e.kind() == io::ErrorKind::Other {
                ErrorKind::Internal
            } else {
                ErrorKind::FailedPrecondition
            };
            Error::new(kind, format!("container {id}: attach: {why}"))
        })?;
        let socket: Socket = Arc::new(
            crate::sys::async_fd::register(fd)
                .map_err(|e| Error::internal(format!("container {id}: attach: {e}")))?,
        );
        // Attached only once the monitor says so: output from then on is not missed.
        match tokio::time::timeout(READY_WAIT, recv_ready(&socket)).await {
            Ok(Ok(true)) => {}
            Ok(Ok(false)) => {
                return Err(Error::precondition(format!(
                    "container {id}: attach: its monitor closed the connection (exiting, or {} attaches already)",
                    crate::monitor::attach::MAX_CLIENTS
                )))
            }
            Ok(Err(e)) => {
                return Err(Error::internal(format!("container {id}: attach: {e}")))
            }
            Err(_) => {
                return Err(Error::unavailable(format!(
                    "container {id}: attach: its monitor did not answer in {READY_WAIT:?}"
                )))
            }
        }
        let (parts_tx, mut parts_rx) = watch::channel(0usize);
        let parts = Arc::new(parts_tx);
        let mut session = Session {
            stdin: None,
            stdout: None,
            stderr: None,
            resize: None,
            done: futures::future::pending().boxed(),
        };
        let mut out_tx = None;
        let mut err_tx = None;
        if req.stdout {
            let (tx, rx) = tokio::io::duplex(STREAM_BUFFER);
            out_tx = Some(tx);
            session.stdout = Some(Box::pin(Part::new(rx, &parts)));
        }
        if req.stderr && !tty {
            let (tx, rx) = tokio::io::duplex(STREAM_BUFFER);
            err_tx = Some(tx);
            session.stderr = Some(Box::pin(Part::new(rx, &parts)));
        }
        if req.stdin {
            // An empty stdin message declares this client's stdin (stdin-once counts it).
            send_now(&socket, &[IN_STDIN])
                .map_err(|e| Error::internal(format!("container {id}: attach: {e}")))?;
            session.stdin = Some(Box::pin(Part::new(
                AttachWriter {
                    socket: socket.clone(),
                    shut: false,
                },
                &parts,
            )));
        }
        let mut helpers = Vec::new();
        if tty {
            let (tx, rx) = mpsc::unbounded_channel();
            session.resize = Some(tx);
            helpers.push(AbortOnDrop(tokio::spawn(resize(socket.clone(), rx))));
        }
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel::<()>();
        helpers.push(AbortOnDrop(tokio::spawn(demux(
            socket, out_tx, err_tx, ended_tx,
        ))));
        let handle = self.handle(&id);
        tracing::debug!(container = %id, tty, "attached");
        session.done = async move {
            let _helpers = helpers;
            let client_gone = parts_rx.wait_for(|n| *n == 0);
            tokio::select! {
                biased;
                _ = ended_rx => {}
                _ = client_gone => return Ok(SessionEnd::Detached),
            }
            // The monitor closed the socket: the container exited (its record is written
            // first), or this session fell behind and was disconnected.
            match tokio::time::timeout(EXIT_WAIT, handle.exited()).await {
                Ok(()) => Ok(SessionEnd::Exited(entry.status().exit_code)),
                Err(_) => Ok(SessionEnd::Detached),
            }
        }
        .boxed();
        Ok(session)
    }
}

/// Waits for the monitor's first message: true for [`OUT_READY`], false when it closed.
async fn recv_ready(socket: &Socket) -> io::Result<bool> {
    let mut buf = [0u8; 1];
    let n = socket
        .async_io(Interest::READABLE, |fd| {
            Ok(rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT)?.0)
        })
        .await?;
    Ok(n == 1 && buf[0] == OUT_READY)
}

/// Aborts a helper task when the session goes away.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Connects (non-blocking) to `<bundle>/attach.sock`, through `/proc/self/fd/<bundle fd>/…`
/// since a bundle path may exceed `sun_path`.
pub(in crate::runtime) fn connect(bundle: &std::path::Path) -> io::Result<OwnedFd> {
    let dir = std::fs::File::open(bundle)?;
    let via_proc = format!("/proc/self/fd/{}/{SOCKET_NAME}", dir.as_raw_fd());
    let addr = SocketAddrUnix::new(via_proc.as_str())?;
    let fd = rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
        None,
    )?;
    rustix::net::connect(&fd, &addr)?;
    Ok(fd)
}

/// Sends one message without waiting (a fresh socket always has room).
fn send_now(socket: &Socket, msg: &[u8]) -> io::Result<()> {
    rustix::net::send(
        socket.get_ref(),
        msg,
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    )?;
    Ok(())
}

/// Sends `[tag] + data` as one message, waiting for room.
async fn send(socket: &Socket, tag: u8, data: &[u8]) -> io::Result<()> {
    socket
        .async_io(Interest::WRITABLE, |fd| send_iov(fd, tag, data))
        .await
        .map(drop)
}

fn send_iov(fd: impl AsFd, tag: u8, data: &[u8]) -> io::Result<usize> {
    let tag = [tag];
    let iov = [io::IoSlice::new(&tag), io::IoSlice::new(data)];
    Ok(rustix::net::sendmsg(
        fd,
        &iov,
        &mut SendAncillaryBuffer::default(),
        SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
    )?)
}

/// Routes the monitor's tagged output into the session's streams until the socket closes;
/// `ended` fires before the streams end, so `done` sees the close before any reader's EOF.
async fn demux(
    socket: Socket,
    mut out: Option<DuplexStream>,
    mut err: Option<DuplexStream>,
    ended: tokio::sync::oneshot::Sender<()>,
) {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = socket
            .async_io(Interest::READABLE, |fd| {
                Ok(rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT)?.0)
            })
            .await;
        let n = match n {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let sink = match buf[0] {
            OUT_STDOUT => &mut out,
            OUT_STDERR => &mut err,
            _ => continue,
        };
        if let Some(w) = sink {
            if w.write_all(&buf[1..n]).await.is_err() {
                // The session dropped this stream: the rest of it is not wanted.
                *sink = None;
            }
        }
    }
    let _ = ended.send(());
    drop((out, err));
}

/// Forwards the session's terminal resizes to the monitor.
async fn resize(socket: Socket, mut sizes: mpsc::UnboundedReceiver<TerminalSize>) {
    while let Some(size) = sizes.recv().await {
        let msg = resize_message(size.width, size.height);
        if send(&socket, msg[0], &msg[1..]).await.is_err() {
            return;
        }
    }
}

/// A session stream counted until dropped (all dropped: the client detached).
struct Part<T> {
    inner: T,
    parts: Arc<watch::Sender<usize>>,
}

impl<T> Part<T> {
    fn new(inner: T, parts: &Arc<watch::Sender<usize>>) -> Self {
        parts.send_modify(|n| *n += 1);
        Part {
            inner,
            parts: parts.clone(),
        }
    }
}

impl<T> Drop for Part<T> {
    fn drop(&mut self) {
        self.parts.send_modify(|n| *n -= 1);
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Part<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Part<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The session's stdin: each write becomes stdin messages; `shutdown()` sends the end.
struct AttachWriter {
    socket: Socket,
    shut: bool,
}

impl AttachWriter {
    fn poll_send(&self, cx: &mut Context<'_>, tag: u8, data: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.socket.poll_write_ready(cx))?;
            match guard.try_io(|fd| send_iov(fd, tag, data)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for AttachWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.shut {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "stdin was closed",
            )));
        }
        let chunk = &buf[..buf.len().min(MAX_STDIN_CHUNK)];
        if chunk.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.poll_send(cx, IN_STDIN, chunk))?;
        Poll::Ready(Ok(chunk.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.shut {
            return Poll::Ready(Ok(()));
        }
        match ready!(self.poll_send(cx, IN_STDIN_EOF, &[])) {
            Ok(_) => {}
            // The monitor is gone: there is no stdin left to end.
            Err(e) if e.raw_os_error() == Some(Errno::PIPE.raw_os_error()) => {}
            Err(e) => return Poll::Ready(Err(e)),
        }
        self.shut = true;
        Poll::Ready(Ok(()))
    }
}

impl Drop for AttachWriter {
    fn drop(&mut self) {
        if !self.shut {
            // Best effort: a stdin dropped without shutdown has ended too.
            let _ = send_now(&self.socket, &[IN_STDIN_EOF]);
        }
    }
}
