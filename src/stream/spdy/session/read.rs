//! The session's reading side: frame heads, DATA into the bounded stream buffers, control frames applied.

use std::future::poll_fn;
use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use super::{lock, Shared, StreamState, RECV_CAP};
use crate::stream::spdy::frame::{
    self, parse_control, parse_head, rst, Frame, FrameError, Head, HEAD_LEN,
};
use crate::stream::spdy::header::Inflater;
use crate::stream::spdy::stream::Stream;

/// Payload read from the connection per step while receiving a DATA frame.
const READ_CHUNK: usize = 64 * 1024;
/// Control frames the reader may queue (PING echoes, RSTs) before it waits for the writer.
const CTRL_CAP: usize = 256;

impl Shared {
    /// Queues a frame the reader generated, waiting while too many control frames are queued
    /// (a peer that floods PINGs without reading must not grow our queue without bound).
    async fn push_from_reader(&self, f: Frame) {
        let mut f = Some(f);
        poll_fn(|cx| {
            let mut st = lock(&self.state);
            if st.out.ctrl >= CTRL_CAP && !st.out.closed {
                st.out.space.push(cx.waker().clone());
                return Poll::Pending;
            }
            if let Some(f) = f.take() {
                st.out.push(f);
            }
            Poll::Ready(())
        })
        .await
    }

    /// Whether data for `id` is wanted; waits while the stream's buffer is full.
    fn poll_recv_space(&self, id: u32, cx: &mut Context<'_>) -> Poll<bool> {
        let mut st = lock(&self.state);
        match st.streams.get_mut(&id) {
            Some(s) if s.reset.is_none() && !s.remote_fin => {
                if s.recv_bytes < RECV_CAP {
                    Poll::Ready(true)
                } else {
                    s.cap_waker = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
            _ => Poll::Ready(false),
        }
    }

    fn deliver(&self, id: u32, data: Vec<u8>, wanted: bool, fin: bool) {
        let mut st = lock(&self.state);
        // Data for a stream that is gone, reset or already finished is dropped.
        if let Some(s) = st.streams.get_mut(&id) {
            if wanted && s.reset.is_none() && !s.remote_fin {
                if !data.is_empty() {
                    s.recv_bytes += data.len();
                    s.recv.push_back(data);
                }
                s.remote_fin |= fin;
                s.wake();
            }
        }
    }

    /// Applies one control frame from the peer.
    async fn on_control(
        &self,
        f: Frame,
        incoming: &mut Option<mpsc::Sender<Stream>>,
        me: &Arc<Shared>,
    ) {
        let is_reply = matches!(f, Frame::SynReply { .. });
        match f {
            Frame::SynStream {
                stream_id,
                flags,
                headers,
                ..
            } => {
                let refuse = {
                    let mut st = lock(&self.state);
                    let peer_parity = if self.server { 1 } else { 0 };
                    if stream_id % 2 != peer_parity || stream_id <= st.last_peer_id {
                        Some(rst::PROTOCOL_ERROR)
                    } else {
                        st.last_peer_id = stream_id;
                        if incoming.is_none() || st.out.closed || st.goaway_received {
                            Some(rst::REFUSED_STREAM)
                        } else {
                            let remote_fin = flags & frame::FLAG_FIN != 0;
                            let local_fin = flags & frame::FLAG_UNIDIRECTIONAL != 0;
                            st.streams
                                .insert(stream_id, StreamState::new(remote_fin, local_fin, None));
                            None
                        }
                    }
                };
                if let Some(status) = refuse {
                    self.push_from_reader(Frame::RstStream { stream_id, status })
                        .await;
                    return;
                }
                let stream = Stream::new(me, stream_id, headers);
                if let Some(tx) = incoming.as_ref() {
                    if let Err(mpsc::error::SendError(stream)) = tx.send(stream).await {
                        *incoming = None;
                        stream.reset_with(rst::REFUSED_STREAM);
                    }
                }
            }
            Frame::SynReply {
                stream_id, flags, ..
            }
            | Frame::Headers {
                stream_id, flags, ..
            } => {
                let mut st = lock(&self.state);
                if let Some(s) = st.streams.get_mut(&stream_id) {
                    // Only SYN_REPLY completes `open` (spdystream ignores HEADERS before it).
                    if is_reply {
                        if let Some(r) = s.reply.take() {
                            let _ = r.send(Ok(()));
                        }
                    }
                    if flags & frame::FLAG_FIN != 0 {
                        s.remote_fin = true;
                        s.wake();
                    }
                }
            }
            Frame::RstStream { stream_id, status } => {
                let mut st = lock(&self.state);
                if let Some(s) = st.streams.get_mut(&stream_id) {
                    s.reset = Some(status);
                    if let Some(r) = s.reply.take() {
                        let msg = format!(
                            "spdy: stream {stream_id} refused by peer (RST_STREAM status {status})"
                        );
                        let _ = r.send(Err(io::Error::new(io::ErrorKind::ConnectionRefused, msg)));
                    }
                    s.wake();
                    for w in st.out.space.drain(..) {
                        w.wake();
                    }
                }
            }
            Frame::Ping { id } => {
                let ours = if self.server { 0 } else { 1 };
                if id % 2 == ours {
                    if let Some(tx) = lock(&self.state).pings.remove(&id) {
                        let _ = tx.send(());
                    }
                } else {
                    self.push_from_reader(Frame::Ping { id }).await;
                }
            }
            Frame::GoAway { last_good, .. } => {
                *incoming = None;
                let mut st = lock(&self.state);
                st.goaway_received = true;
                let mine = if self.server { 0 } else { 1 };
                for (id, s) in st.streams.iter_mut() {
                    if id % 2 == mine && *id > last_good {
                        if let Some(r) = s.reply.take() {
                            let _ = r.send(Err(io::Error::new(
                                io::ErrorKind::ConnectionRefused,
                                "spdy: peer sent GOAWAY",
                            )));
                        }
                    }
                }
            }
            // No flow control to apply (see the top of session/mod.rs); nothing to configure.
            Frame::Settings { .. } | Frame::WindowUpdate { .. } => {}
            Frame::Data { .. } => {}
        }
    }
}

fn protocol(e: FrameError) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("spdy: {e}"))
}

/// Reads one frame head; `None` on a clean end of stream between frames.
async fn read_head<R: AsyncRead + Unpin>(rd: &mut R) -> io::Result<Option<[u8; HEAD_LEN]>> {
    let mut head = [0u8; HEAD_LEN];
    let mut got = 0;
    while got < HEAD_LEN {
        let n = rd.read(&mut head[got..]).await?;
        if n == 0 {
            if got == 0 {
                return Ok(None);
            }
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        got += n;
    }
    Ok(Some(head))
}

pub(super) async fn read_loop<R: AsyncRead + Unpin>(
    mut rd: R,
    shared: Arc<Shared>,
    tx: mpsc::Sender<Stream>,
) -> io::Result<()> {
    let mut inflater = Inflater::default();
    let mut incoming = Some(tx);
    while let Some(head) = read_head(&mut rd).await? {
        match parse_head(&head).map_err(protocol)? {
            Head::Control { kind, flags, len } => {
                let mut p = vec![0u8; len];
                rd.read_exact(&mut p).await?;
                if let Some(f) = parse_control(kind, flags, &p, &mut inflater).map_err(protocol)? {
                    shared.on_control(f, &mut incoming, &shared).await;
                }
            }
            Head::Data {
                stream_id,
                flags,
                len,
            } => {
                let fin = flags & frame::FLAG_FIN != 0;
                if len == 0 {
                    shared.deliver(stream_id, Vec::new(), true, fin);
                }
                let mut left = len;
                while left > 0 {
                    let wanted = poll_fn(|cx| shared.poll_recv_space(stream_id, cx)).await;
                    let n = left.min(READ_CHUNK);
                    let mut chunk = vec![0u8; n];
                    rd.read_exact(&mut chunk).await?;
                    left -= n;
                    shared.deliver(stream_id, chunk, wanted, fin && left == 0);
                }
            }
        }
    }
    Ok(())
}
