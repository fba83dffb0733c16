//! Byte streams of interactive sessions: pipes and terminal masters as tokio readers/writers,
//! and the drain tracking that lets a session end only after its output was read.

use std::io;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::unix::pipe;
use tokio::sync::watch;

/// The terminal's end-of-file character (VEOF, `^D`), as a fresh terminal has it.
pub const VEOF: u8 = 0x04;

/// How many output streams are still open and how many reads they made (progress).
#[derive(Debug, Clone, Copy, Default)]
struct DrainState {
    open: usize,
    reads: u64,
}

/// Tracks a session's output streams until each reached end of file or was dropped.
#[derive(Debug, Clone)]
pub struct Drain {
    tx: Arc<watch::Sender<DrainState>>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            tx: Arc::new(watch::channel(DrainState::default()).0),
        }
    }
}

impl Drain {
    /// Wraps `inner` as one more tracked output stream.
    pub fn track<R: AsyncRead + Send + 'static>(&self, inner: R) -> Tracked<R> {
        self.tx.send_modify(|s| s.open += 1);
        Tracked {
            inner,
            tx: self.tx.clone(),
            open: true,
        }
    }

    /// Resolves when every tracked stream ended, or when none made progress for `idle` (a
    /// descendant of the process may hold a pipe open forever; a reader may stall).
    pub async fn settled(&self, idle: Duration) {
        let mut rx = self.tx.subscribe();
        loop {
            if rx.borrow_and_update().open == 0 {
                return;
            }
            match tokio::time::timeout(idle, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }
}

/// An output stream counted by a [`Drain`] until end of file, an error or its drop.
pub struct Tracked<R> {
    inner: R,
    tx: Arc<watch::Sender<DrainState>>,
    open: bool,
}

impl<R> Tracked<R> {
    fn close(&mut self) {
        if std::mem::take(&mut self.open) {
            self.tx.send_modify(|s| s.open -= 1);
        }
    }
}

impl<R> Drop for Tracked<R> {
    fn drop(&mut self) {
        self.close();
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for Tracked<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = ready!(Pin::new(&mut self.inner).poll_read(cx, buf));
        match &r {
            Ok(()) if buf.filled().len() > before => self.tx.send_modify(|s| s.reads += 1),
            _ => self.close(),
        }
        Poll::Ready(r)
    }
}

/// The read end of a pipe.
pub fn pipe_reader(fd: OwnedFd) -> io::Result<pipe::Receiver> {
    pipe::Receiver::from_owned_fd(fd)
}

/// The write end of a pipe; `shutdown()` closes it (the reader sees end of file).
pub fn pipe_writer(fd: OwnedFd) -> io::Result<ClosingWriter> {
    Ok(ClosingWriter(Some(pipe::Sender::from_owned_fd(fd)?)))
}

/// A pipe's write end that `shutdown()` closes.
pub struct ClosingWriter(Option<pipe::Sender>);

fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "stdin was closed")
}

impl AsyncWrite for ClosingWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.0.as_mut() {
            Some(w) => Pin::new(w).poll_write(cx, buf),
            None => Poll::Ready(Err(closed())),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.0 = None;
        Poll::Ready(Ok(()))
    }
}

/// A terminal master (non-blocking) shared by its reader and writer halves.
pub type Master = Arc<AsyncFd<OwnedFd>>;

/// Registers a non-blocking terminal master with the reactor.
pub fn master(fd: OwnedFd) -> io::Result<Master> {
    Ok(Arc::new(crate::sys::async_fd::register(fd)?))
}

/// The output of a terminal: reads the master; EIO (every slave closed) is end of file.
pub struct TerminalReader(pub Master);

impl AsyncRead for TerminalReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        loop {
            let mut guard = ready!(self.0.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard.try_io(|fd| Ok(rustix::io::read(fd.get_ref(), &mut *unfilled)?)) {
                Ok(Ok(n)) => {
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => return Poll::Ready(Ok(())),
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The input of a terminal: writes the master. `shutdown()` types the terminal's end of file
/// (`^D`, twice after an unfinished line: the first only ends that line) like a user would,
/// since a terminal cannot be half-closed.
pub struct TerminalWriter {
    master: Master,
    /// The last byte written ends a line (or nothing was written).
    at_line_start: bool,
    /// `^D`s still to write for a shutdown in progress.
    eof_left: Option<u8>,
}

impl TerminalWriter {
    /// A writer on `master`.
    pub fn new(master: Master) -> Self {
        TerminalWriter {
            master,
            at_line_start: true,
            eof_left: None,
        }
    }

    fn poll_write_raw(&self, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        loop {
            let mut guard = ready!(self.master.poll_write_ready(cx))?;
            match guard.try_io(|fd| Ok(rustix::io::write(fd.get_ref(), buf)?)) {
                Ok(r) => return Poll::Ready(r),
                Err(_would_block) => continue,
            }
        }
    }
}

impl AsyncWrite for TerminalWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        if self.eof_left.is_some() {
            return Poll::Ready(Err(closed()));
        }
        let n = ready!(self.poll_write_raw(cx, buf))?;
        if n > 0 {
            self.at_line_start = matches!(buf[n - 1], b'\n' | b'\r');
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut left = match self.eof_left {
            Some(n) => n,
            None => {
                if self.at_line_start {
                    1
                } else {
                    2
                }
            }
        };
        self.eof_left = Some(left);
        while left > 0 {
            match ready!(self.poll_write_raw(cx, &[VEOF])) {
                Ok(_) => {}
                // The process is gone: nothing is left to tell.
                Err(e) if e.raw_os_error() == Some(libc::EIO) => left = 1,
                Err(e) => return Poll::Ready(Err(e)),
            }
            left -= 1;
            self.eof_left = Some(left);
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn drain_settles_when_every_stream_ended_or_was_dropped() {
        let drain = Drain::default();
        let mut a = drain.track(&b"data"[..]);
        let b = drain.track(&b""[..]);
        let settled = drain.settled(Duration::from_secs(30));
        tokio::pin!(settled);
        assert!(
            tokio::time::timeout(Duration::from_millis(50), &mut settled)
                .await
                .is_err(),
            "two streams open"
        );
        let mut out = Vec::new();
        a.read_to_end(&mut out).await.expect("read");
        assert_eq!(out, b"data");
        drop(b);
        tokio::time::timeout(Duration::from_secs(1), settled)
            .await
            .expect("settled after EOF and drop");
    }

    #[tokio::test(start_paused = true)]
    async fn drain_gives_up_on_a_stream_that_makes_no_progress() {
        let drain = Drain::default();
        let (_keep, rx) = tokio::io::duplex(16);
        let _stuck = drain.track(rx);
        let t0 = tokio::time::Instant::now();
        drain.settled(Duration::from_secs(2)).await;
        assert_eq!(t0.elapsed(), Duration::from_secs(2));
    }

    #[tokio::test]
    async fn pipe_writer_shutdown_closes_the_pipe() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let mut w = pipe_writer(w).expect("writer");
        let mut r = pipe_reader(r).expect("reader");
        w.write_all(b"abc").await.expect("write");
        w.shutdown().await.expect("shutdown");
        let mut out = Vec::new();
        r.read_to_end(&mut out).await.expect("read to EOF");
        assert_eq!(out, b"abc");
        assert!(w.write_all(b"x").await.is_err(), "closed");
    }
}
