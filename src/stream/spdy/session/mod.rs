//! The SPDY session task: frame reader, frame writer, stream table, pings and GOAWAY.
//!
//! Interop facts verified in moby/spdystream (connection.go, stream.go, spdy/*.go at f0be51f)
//! and k8s.io/apimachinery/pkg/util/httpstream/spdy, the code kubelet and crictl run:
//! - Frames are SPDY version 3 (the HTTP upgrade token says "SPDY/3.1"). Go's framer rejects
//!   unknown control frame types with an error that ends the connection, so we only ever send
//!   types 1,2,3,4,6,7,8,9. It also rejects a PING with id 0 or flags, a GOAWAY whose length is
//!   not 8, and RST_STREAM with status 0.
//! - Header blocks: one zlib stream per direction for the whole connection, preset dictionary,
//!   each block flushed with SYNC_FLUSH (Go: `zlib.NewWriterLevelDict(BestCompression)` +
//!   `Flush()`). Names are written lower-case; repeated values NUL-joined. Go fails the whole
//!   connection on a SYN_STREAM carrying connection/host/keep-alive/proxy-connection/
//!   transfer-encoding (SYN_REPLY: the same minus host), so `open` refuses those.
//! - Stream ids: client odd from 1, server even from 2, strictly increasing; a SYN_STREAM with
//!   a lower id is answered with RST_STREAM PROTOCOL_ERROR and otherwise ignored. PING ids
//!   follow the same parity; a ping whose parity is the peer's is echoed.
//! - SYN_REPLY is required: spdystream silently DROPS data frames on a stream that has not
//!   been replied to, and its `Stream.Write` blocks until the reply is sent. apimachinery's
//!   server replies (empty header block) as soon as its handler accepts the stream, and its
//!   client `CreateStream` waits for the SYN_REPLY (30 s timeout). So `Incoming::accept`
//!   queues SYN_REPLY before handing the stream out, and `Connection::open` waits for it.
//! - Flow control: spdystream implements NONE. It never sends WINDOW_UPDATE, ignores the ones
//!   it receives (and SETTINGS), writes each `Write` call as one DATA frame of any size up to
//!   2^24-1 regardless of windows, and gets backpressure only from TCP (its frame handlers block
//!   until the stream's reader takes the data). Honouring the 64 KiB SPDY/3.1 window would
//!   therefore stall after 64 KiB, so this side never waits for the peer's window, and it sends
//!   no WINDOW_UPDATE either, like spdystream. Sending them is not harmless: a spdystream
//!   server (containerd, CRI-O) that closes its socket while some are still unread makes its
//!   kernel answer with RST and throw away the output it had not yet sent (a 256 MiB exec from
//!   containerd lost its last ~3.9 MiB that way). Our backpressure is the same as
//!   spdystream's: a bounded per-stream receive buffer; when it is full the reader stops
//!   reading the connection (head-of-line blocking) until the application reads.
//! - DATA with FLAG_FIN (often empty, from `Stream.Close`) half-closes; RST_STREAM CANCEL from
//!   `Stream.Reset`; apimachinery's `connection.Close` resets every stream, then closes the TCP
//!   connection. `spdystream.Close` sends GOAWAY (status OK, last good = last peer stream id) and
//!   closes once no streams remain; on a received GOAWAY it stops accepting streams and does
//!   the same.

mod read;

use std::collections::{HashMap, VecDeque};
use std::future::poll_fn;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot, watch};

use self::read::read_loop;
use super::frame::{encode, goaway, Frame};
use super::header::Deflater;
use super::stream::Stream;

/// Bytes buffered per stream before the reader stops reading the connection.
pub(super) const RECV_CAP: usize = 256 * 1024;
/// Data bytes queued for the writer before `Stream::poll_write` waits.
pub(super) const OUT_CAP: usize = 256 * 1024;
/// Largest DATA frame we write (spdystream reads any size; io.Copy writes 32 KiB).
pub(super) const MAX_WRITE_CHUNK: usize = 64 * 1024;
/// Peer streams waiting for `Incoming::accept`.
const ACCEPT_BACKLOG: usize = 32;
/// How long the peer may take to hang up after our GOAWAY before we drop the connection.
const LINGER: Duration = Duration::from_secs(2);
/// How long the writer may take to flush what is queued once the peer has gone.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Locks, ignoring poison: a panicking holder cannot leave the table half-updated in a way
/// that matters more than wedging every stream would.
pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn aborted() -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, "spdy session closed")
}

/// Frames waiting for the writer.
#[derive(Default)]
pub(super) struct Outbox {
    q: VecDeque<Frame>,
    data_bytes: usize,
    ctrl: usize,
    /// No more frames are accepted (GOAWAY queued or session over); the writer drains and stops.
    pub(super) closed: bool,
    writer: Option<Waker>,
    space: Vec<Waker>,
}

impl Outbox {
    pub(super) fn push(&mut self, f: Frame) {
        if self.closed {
            return;
        }
        match &f {
            Frame::Data { data, .. } => self.data_bytes += data.len(),
            _ => self.ctrl += 1,
        }
        self.q.push_back(f);
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }

    pub(super) fn has_data_space(&mut self, cx: &mut Context<'_>) -> bool {
        if self.data_bytes < OUT_CAP {
            return true;
        }
        self.space.push(cx.waker().clone());
        false
    }
}

/// One stream's half of the table.
pub(super) struct StreamState {
    pub(super) recv: VecDeque<Vec<u8>>,
    pub(super) recv_off: usize,
    pub(super) recv_bytes: usize,
    pub(super) remote_fin: bool,
    pub(super) local_fin: bool,
    /// RST_STREAM status, sent or received.
    pub(super) reset: Option<u32>,
    pub(super) reply: Option<oneshot::Sender<io::Result<()>>>,
    pub(super) read_waker: Option<Waker>,
    pub(super) cap_waker: Option<Waker>,
}

impl StreamState {
    fn new(
        remote_fin: bool,
        local_fin: bool,
        reply: Option<oneshot::Sender<io::Result<()>>>,
    ) -> Self {
        StreamState {
            recv: VecDeque::new(),
            recv_off: 0,
            recv_bytes: 0,
            remote_fin,
            local_fin,
            reset: None,
            reply,
            read_waker: None,
            cap_waker: None,
        }
    }

    pub(super) fn wake(&mut self) {
        for w in [self.read_waker.take(), self.cap_waker.take()]
            .into_iter()
            .flatten()
        {
            w.wake();
        }
    }
}

pub(super) struct State {
    pub(super) streams: HashMap<u32, StreamState>,
    pub(super) out: Outbox,
    /// The session is over: nothing more is sent or received.
    pub(super) ended: bool,
    next_id: u32,
    last_peer_id: u32,
    next_ping: u32,
    pings: HashMap<u32, oneshot::Sender<()>>,
    goaway_received: bool,
}

/// A counted reference held by every `Connection`, `Incoming` and `Stream`: when the last one
/// is dropped the session says GOAWAY and closes, so a forgotten connection cannot linger.
pub(super) struct User(Arc<Shared>);

impl User {
    pub(super) fn new(shared: &Arc<Shared>) -> User {
        shared.users.fetch_add(1, Ordering::SeqCst);
        User(shared.clone())
    }
}

impl Clone for User {
    fn clone(&self) -> User {
        User::new(&self.0)
    }
}

impl Drop for User {
    fn drop(&mut self) {
        if self.0.users.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.start_goaway();
        }
    }
}

impl std::ops::Deref for User {
    type Target = Arc<Shared>;
    fn deref(&self) -> &Arc<Shared> {
        &self.0
    }
}

/// What the session task, the `Connection` handles and the streams share.
pub(super) struct Shared {
    pub(super) state: Mutex<State>,
    users: AtomicUsize,
    server: bool,
    closed: watch::Sender<bool>,
}

impl Shared {
    pub(super) fn new(server: bool) -> Arc<Shared> {
        Arc::new(Shared {
            state: Mutex::new(State {
                streams: HashMap::new(),
                out: Outbox::default(),
                ended: false,
                next_id: if server { 2 } else { 1 },
                last_peer_id: 0,
                next_ping: if server { 2 } else { 1 },
                pings: HashMap::new(),
                goaway_received: false,
            }),
            server,
            users: AtomicUsize::new(0),
            closed: watch::channel(false).0,
        })
    }

    /// Runs the session over `io` in a spawned task; returns the channel of peer streams.
    pub(super) fn spawn<T>(self: &Arc<Self>, io: T) -> mpsc::Receiver<Stream>
    where
        T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
    {
        let (tx, rx) = mpsc::channel(ACCEPT_BACKLOG);
        let shared = self.clone();
        tokio::spawn(async move {
            let (rd, wr) = tokio::io::split(io);
            let reader = read_loop(rd, shared.clone(), tx);
            let writer = write_loop(wr, shared.clone());
            tokio::pin!(reader, writer);
            tokio::select! {
                r = &mut reader => {
                    if let Err(e) = &r {
                        tracing::debug!(error = %e, "spdy: session read ended");
                        if e.kind() == io::ErrorKind::InvalidData {
                            let mut st = lock(&shared.state);
                            let last_good = st.last_peer_id;
                            st.out.push(Frame::GoAway { last_good, status: goaway::PROTOCOL_ERROR });
                        }
                    }
                    shared.close_outbox();
                    if let Ok(Err(e)) = tokio::time::timeout(DRAIN_TIMEOUT, &mut writer).await {
                        tracing::debug!(error = %e, "spdy: session write ended");
                    }
                }
                w = &mut writer => {
                    match w {
                        // GOAWAY sent and our side shut down: keep reading a little so the
                        // peer's last frames are not answered with a TCP reset.
                        Ok(()) => {
                            let _ = tokio::time::timeout(LINGER, &mut reader).await;
                        }
                        Err(e) => tracing::debug!(error = %e, "spdy: session write ended"),
                    }
                }
            }
            shared.finish();
        });
        rx
    }

    fn close_outbox(&self) {
        let mut st = lock(&self.state);
        st.out.closed = true;
        if let Some(w) = st.out.writer.take() {
            w.wake();
        }
    }

    /// Marks the session over and wakes everyone waiting on it.
    fn finish(&self) {
        let mut st = lock(&self.state);
        st.ended = true;
        st.out.closed = true;
        st.out.q.clear();
        for w in st.out.space.drain(..) {
            w.wake();
        }
        for s in st.streams.values_mut() {
            if let Some(r) = s.reply.take() {
                let _ = r.send(Err(aborted()));
            }
            s.wake();
        }
        st.pings.clear();
        drop(st);
        self.closed.send_replace(true);
    }

    pub(super) async fn closed(&self) {
        let mut rx = self.closed.subscribe();
        let _ = rx.wait_for(|ended| *ended).await;
    }

    /// SYN_STREAM, then waits for SYN_REPLY.
    pub(super) async fn open(self: &Arc<Self>, headers: super::Headers) -> io::Result<Stream> {
        const FORBIDDEN: [&str; 5] = [
            "connection",
            "host",
            "keep-alive",
            "proxy-connection",
            "transfer-encoding",
        ];
        if let Some((n, _)) = headers
            .iter()
            .find(|(n, _)| FORBIDDEN.iter().any(|f| n.eq_ignore_ascii_case(f)))
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("spdy: header {n:?} is not allowed on a stream"),
            ));
        }
        let (tx, rx) = oneshot::channel();
        let stream = {
            let mut st = lock(&self.state);
            if st.ended || st.out.closed || st.goaway_received {
                return Err(aborted());
            }
            let id = st.next_id;
            if id > 0x7fff_ffff {
                return Err(io::Error::other("spdy: stream ids exhausted"));
            }
            st.next_id += 2;
            st.streams
                .insert(id, StreamState::new(false, false, Some(tx)));
            st.out.push(Frame::SynStream {
                stream_id: id,
                assoc_id: 0,
                priority: 0,
                flags: 0,
                headers: headers.clone(),
            });
            Stream::new(self, id, headers)
        };
        // Dropping `stream` on error (or when this future is dropped) resets and forgets it.
        rx.await.map_err(|_| aborted())??;
        Ok(stream)
    }

    /// Queues the SYN_REPLY for an accepted peer stream.
    pub(super) fn reply(&self, id: u32) {
        let mut st = lock(&self.state);
        let State { streams, out, .. } = &mut *st;
        if streams.get(&id).is_some_and(|s| s.reset.is_none()) {
            out.push(Frame::SynReply {
                stream_id: id,
                flags: 0,
                headers: Vec::new(),
            });
        }
    }

    pub(super) async fn goaway(&self) {
        self.start_goaway();
        self.closed().await;
    }

    /// Queues GOAWAY (status OK) after everything already queued and refuses anything more;
    /// the writer then drains, shuts the connection down and the session ends.
    fn start_goaway(&self) {
        let mut st = lock(&self.state);
        if !st.out.closed {
            let last_good = st.last_peer_id;
            st.out.push(Frame::GoAway {
                last_good,
                status: goaway::OK,
            });
            st.out.closed = true;
        }
    }

    pub(super) async fn ping(&self) -> io::Result<Duration> {
        let (tx, rx) = oneshot::channel();
        {
            let mut st = lock(&self.state);
            if st.ended || st.out.closed {
                return Err(aborted());
            }
            let id = st.next_ping;
            st.next_ping = if id > 0x7fff_fffd {
                id - 0x7fff_fffc
            } else {
                id + 2
            };
            st.pings.insert(id, tx);
            st.out.push(Frame::Ping { id });
        }
        let start = tokio::time::Instant::now();
        rx.await.map_err(|_| aborted())?;
        Ok(start.elapsed())
    }

    /// Takes everything queued for the writer; `None` once closed and drained.
    fn poll_batch(&self, cx: &mut Context<'_>) -> Poll<Option<Vec<Frame>>> {
        let mut st = lock(&self.state);
        let out = &mut st.out;
        if out.q.is_empty() {
            if out.closed {
                return Poll::Ready(None);
            }
            out.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let batch: Vec<Frame> = out.q.drain(..).collect();
        out.data_bytes = 0;
        out.ctrl = 0;
        for w in out.space.drain(..) {
            w.wake();
        }
        Poll::Ready(Some(batch))
    }
}

async fn write_loop<W: AsyncWrite + Unpin>(mut wr: W, shared: Arc<Shared>) -> io::Result<()> {
    let mut deflater = Deflater::new()?;
    let mut buf = Vec::with_capacity(OUT_CAP + 1024);
    while let Some(batch) = poll_fn(|cx| shared.poll_batch(cx)).await {
        buf.clear();
        for f in &batch {
            encode(f, &mut deflater, &mut buf)?;
        }
        drop(batch);
        wr.write_all(&buf).await?;
        wr.flush().await?;
    }
    wr.shutdown().await
}
