//! One WebSocket connection as numbered channels: a writer task draining a bounded queue, a reader task routing each channel to a sink.

use std::collections::HashMap;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;
use tokio_util::sync::{CancellationToken, PollSender};

use super::frame::{self, Frame};

/// Largest data payload per message.
pub const MAX_FRAME: usize = 32 << 10;
/// Messages queued for the socket before writers wait (the only buffer towards the client).
const QUEUE: usize = 32;
/// How long a close waits for the peer's close reply.
const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Where the data of one incoming channel goes.
pub type Route = Box<dyn AsyncWrite + Send + Unpin>;

/// A running channel multiplexer over one WebSocket.
pub struct Mux {
    tx: mpsc::Sender<Message>,
    base64: bool,
    gone: CancellationToken,
    reader: Option<tokio::task::JoinHandle<()>>,
    writer: Option<tokio::task::JoinHandle<()>>,
}

impl Drop for Mux {
    /// A mux dropped before `close`/`finish` (its owner gave up) ends the connection.
    fn drop(&mut self) {
        for t in [self.reader.take(), self.writer.take()]
            .into_iter()
            .flatten()
        {
            t.abort();
        }
    }
}

impl Mux {
    /// Starts the tasks; data arriving on a channel in `routes` is written there (a slow route
    /// holds the reader, hence the client: backpressure). A route is shut down on the v5 close
    /// signal (`v5`) or when the connection ends.
    pub fn start<S>(
        ws: WebSocketStream<S>,
        routes: HashMap<u8, Route>,
        base64: bool,
        v5: bool,
    ) -> Mux
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (mut sink, mut stream) = ws.split();
        let (tx, mut rx) = mpsc::channel::<Message>(QUEUE);
        let gone = CancellationToken::new();
        let writer_gone = gone.clone();
        let writer = tokio::spawn(async move {
            'outer: while let Some(first) = rx.recv().await {
                let mut next = Some(first);
                while let Some(m) = next.take() {
                    let close = matches!(m, Message::Close(_));
                    if sink.feed(m).await.is_err() {
                        break 'outer;
                    }
                    if close {
                        let _ = sink.flush().await;
                        break 'outer;
                    }
                    next = rx.try_recv().ok();
                }
                if sink.flush().await.is_err() {
                    break;
                }
            }
            writer_gone.cancel();
        });
        let reader_gone = gone.clone();
        let reader = tokio::spawn(async move {
            let mut routes = routes;
            while let Some(Ok(msg)) = stream.next().await {
                if matches!(msg, Message::Close(_)) {
                    break;
                }
                match frame::decode(msg, base64, v5) {
                    Some(Frame::Data(ch, data)) => {
                        if data.is_empty() {
                            continue;
                        }
                        if let Some(route) = routes.get_mut(&ch) {
                            if route.write_all(&data).await.is_err() {
                                routes.remove(&ch);
                            }
                        }
                    }
                    Some(Frame::Close(ch)) => {
                        if let Some(route) = routes.remove(&ch) {
                            end_route(route).await;
                        }
                    }
                    None => {}
                }
            }
            for (_, route) in routes {
                end_route(route).await;
            }
            reader_gone.cancel();
        });
        Mux {
            tx,
            base64,
            gone,
            reader: Some(reader),
            writer: Some(writer),
        }
    }

    /// A writer of `channel`; with `close_on_shutdown` its shutdown sends the v5 close signal.
    pub fn writer(&self, channel: u8, close_on_shutdown: bool) -> ChannelWriter {
        ChannelWriter {
            tx: PollSender::new(self.tx.clone()),
            channel,
            base64: self.base64,
            close_on_shutdown,
        }
    }

    /// Sends one message on `channel` (an empty one is the "connected" signal).
    pub async fn send(&self, channel: u8, data: &[u8]) -> std::io::Result<()> {
        self.tx
            .send(frame::encode(channel, data, self.base64))
            .await
            .map_err(|_| broken())
    }

    /// Sends the v5 close signal of `channel`.
    pub async fn send_close(&self, channel: u8) -> std::io::Result<()> {
        self.tx
            .send(frame::encode_close(channel))
            .await
            .map_err(|_| broken())
    }

    /// Resolves when the connection ended (peer closed, broke, or we closed it).
    pub fn gone(&self) -> BoxFuture<'static, ()> {
        Box::pin(self.gone.clone().cancelled_owned())
    }

    /// Sends a close frame after everything queued and waits (bounded) for the peer's reply.
    /// The frame carries status 1000 (normal closure): client-go's wsstream takes only that as
    /// the end of the streams; a close without a status (1005) fails the exec on its side.
    pub async fn close(mut self) {
        let normal = tokio_tungstenite::tungstenite::protocol::CloseFrame {
            code: tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode::Normal,
            reason: "".into(),
        };
        let _ = self.tx.send(Message::Close(Some(normal))).await;
        if let Some(writer) = self.writer.take() {
            let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
        }
        if let Some(reader) = self.reader.take() {
            if tokio::time::timeout(CLOSE_WAIT, reader).await.is_err() {
                tracing::debug!("websocket peer did not answer the close");
            }
        }
    }

    /// Waits until the peer closes the connection (client side), then ends the tasks.
    pub async fn finish(mut self) {
        self.gone.cancelled().await;
        if let Some(reader) = self.reader.take() {
            let _ = reader.await;
        }
        // Our sender goes with the mux; the writer ends once queued messages are out.
        let writer = self.writer.take();
        drop(self);
        if let Some(writer) = writer {
            let _ = tokio::time::timeout(CLOSE_WAIT, writer).await;
        }
    }
}

/// Flushes a route, then shuts it down. The flush is what waits for written data: tokio's
/// stdout (the CLI's route) queues each write to a blocking thread and its shutdown returns at
/// once, so a process that exits after a bare shutdown can lose its last output.
async fn end_route(mut route: Route) {
    let _ = route.flush().await;
    let _ = route.shutdown().await;
}

fn broken() -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::BrokenPipe, "websocket closed")
}

/// An `AsyncWrite` that frames bytes as messages of one channel; waits when the queue is full.
pub struct ChannelWriter {
    tx: PollSender<Message>,
    channel: u8,
    base64: bool,
    close_on_shutdown: bool,
}

impl AsyncWrite for ChannelWriter {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        ready!(self.tx.poll_reserve(cx)).map_err(|_| broken())?;
        let n = buf.len().min(MAX_FRAME);
        let msg = frame::encode(self.channel, &buf[..n], self.base64);
        self.tx.send_item(msg).map_err(|_| broken())?;
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if self.close_on_shutdown {
            ready!(self.tx.poll_reserve(cx)).map_err(|_| broken())?;
            let msg = frame::encode_close(self.channel);
            self.tx.send_item(msg).map_err(|_| broken())?;
            self.close_on_shutdown = false;
        }
        self.tx.close();
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
#[path = "mux_tests.rs"]
mod tests;
