//! A WebSocket as a byte stream (binary messages in, binary messages out): carries SPDY for client-go's port-forward tunnelling dialer.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::{Sink, Stream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_tungstenite::tungstenite::{Bytes, Message};
use tokio_tungstenite::WebSocketStream;

use super::mux::MAX_FRAME;

/// `AsyncRead + AsyncWrite` over a WebSocket; text and control messages are skipped.
pub struct Tunnel<S> {
    ws: WebSocketStream<S>,
    pending: Bytes,
    eof: bool,
}

impl<S> Tunnel<S> {
    /// Wraps `ws`.
    pub fn new(ws: WebSocketStream<S>) -> Self {
        Tunnel {
            ws,
            pending: Bytes::new(),
            eof: false,
        }
    }
}

fn io_err(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, e.to_string())
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for Tunnel<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        loop {
            if !self.pending.is_empty() {
                let n = self.pending.len().min(buf.remaining());
                let chunk = self.pending.split_to(n);
                buf.put_slice(&chunk);
                return Poll::Ready(Ok(()));
            }
            if self.eof {
                return Poll::Ready(Ok(()));
            }
            match ready!(Pin::new(&mut self.ws).poll_next(cx)) {
                Some(Ok(Message::Binary(b))) => self.pending = b,
                Some(Ok(Message::Close(_))) | None => self.eof = true,
                Some(Ok(_)) => {}
                Some(Err(e)) => return Poll::Ready(Err(io_err(e))),
            }
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Tunnel<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        ready!(Pin::new(&mut self.ws).poll_ready(cx)).map_err(io_err)?;
        let n = buf.len().min(MAX_FRAME);
        Pin::new(&mut self.ws)
            .start_send(Message::binary(buf[..n].to_vec()))
            .map_err(io_err)?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.ws).poll_flush(cx).map_err(io_err)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.ws).poll_close(cx).map_err(io_err)
    }
}
