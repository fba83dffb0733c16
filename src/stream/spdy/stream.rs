//! One SPDY stream as AsyncRead + AsyncWrite over the session's bounded buffers.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{rst, Frame, FLAG_FIN};
use super::session::{aborted, lock, Shared, State, User, MAX_WRITE_CHUNK};
use super::Headers;

/// A SPDY stream. Reading yields the peer's DATA and EOF after its FIN (an error after a
/// RST_STREAM or when the session ends first); writing sends DATA; `poll_shutdown` sends an
/// empty DATA frame with FLAG_FIN (half-close). Dropping a stream that was neither shut down
/// nor reset resets it (RST_STREAM CANCEL); data arriving for a dropped stream is discarded.
pub struct Stream {
    shared: User,
    id: u32,
    headers: Headers,
}

impl std::fmt::Debug for Stream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stream")
            .field("id", &self.id)
            .field("headers", &self.headers)
            .finish()
    }
}

impl Stream {
    pub(super) fn new(shared: &Arc<Shared>, id: u32, headers: Headers) -> Stream {
        Stream {
            shared: User::new(shared),
            id,
            headers,
        }
    }

    /// The stream id (odd: opened by the client, even: by the server).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The SYN_STREAM headers (names lower-case).
    pub fn headers(&self) -> &Headers {
        &self.headers
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Aborts the stream in both directions: RST_STREAM CANCEL.
    pub fn reset(&self) {
        self.reset_with(rst::CANCEL);
    }

    pub(super) fn reset_with(&self, status: u32) {
        let mut st = lock(&self.shared.state);
        let State { streams, out, .. } = &mut *st;
        if let Some(s) = streams.get_mut(&self.id) {
            if s.reset.is_none() {
                s.reset = Some(status);
                out.push(Frame::RstStream {
                    stream_id: self.id,
                    status,
                });
                s.wake();
            }
        }
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        let mut st = lock(&self.shared.state);
        let Some(mut s) = st.streams.remove(&self.id) else {
            return;
        };
        if !s.local_fin && s.reset.is_none() {
            st.out.push(Frame::RstStream {
                stream_id: self.id,
                status: rst::CANCEL,
            });
        }
        // Wake a reader waiting for room.
        s.wake();
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let id = self.id;
        let mut st = lock(&self.shared.state);
        let ended = st.ended;
        let Some(s) = st.streams.get_mut(&id) else {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "spdy: stream is gone",
            )));
        };
        if let Some(front) = s.recv.front() {
            let avail = &front[s.recv_off..];
            let n = avail.len().min(buf.remaining());
            buf.put_slice(&avail[..n]);
            s.recv_off += n;
            if s.recv_off == front.len() {
                s.recv.pop_front();
                s.recv_off = 0;
            }
            s.recv_bytes -= n;
            if let Some(w) = s.cap_waker.take() {
                w.wake();
            }
            return Poll::Ready(Ok(()));
        }
        if s.remote_fin {
            return Poll::Ready(Ok(()));
        }
        if let Some(status) = s.reset {
            let msg = format!("spdy: stream {id} reset (RST_STREAM status {status})");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::ConnectionReset, msg)));
        }
        if ended {
            return Poll::Ready(Err(aborted()));
        }
        s.read_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        let id = self.id;
        let mut st = lock(&self.shared.state);
        let State {
            streams,
            out,
            ended,
            ..
        } = &mut *st;
        if *ended || out.closed {
            return Poll::Ready(Err(aborted()));
        }
        let Some(s) = streams.get_mut(&id) else {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "spdy: stream is gone",
            )));
        };
        if let Some(status) = s.reset {
            let msg = format!("spdy: stream {id} reset (RST_STREAM status {status})");
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, msg)));
        }
        if s.local_fin {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "spdy: write after shutdown",
            )));
        }
        if !out.has_data_space(cx) {
            return Poll::Pending;
        }
        let n = data.len().min(MAX_WRITE_CHUNK);
        out.push(Frame::Data {
            stream_id: id,
            flags: 0,
            data: data[..n].to_vec(),
        });
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let id = self.id;
        let mut st = lock(&self.shared.state);
        let State {
            streams,
            out,
            ended,
            ..
        } = &mut *st;
        let Some(s) = streams.get_mut(&id) else {
            return Poll::Ready(Ok(()));
        };
        if s.local_fin || s.reset.is_some() {
            return Poll::Ready(Ok(()));
        }
        if *ended || out.closed {
            return Poll::Ready(Err(aborted()));
        }
        s.local_fin = true;
        out.push(Frame::Data {
            stream_id: id,
            flags: FLAG_FIN,
            data: Vec::new(),
        });
        Poll::Ready(Ok(()))
    }
}
