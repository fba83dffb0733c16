//! Accepts grpc-core clients' `:authority` on the CRI socket: rewrites an invalid one to
//! `localhost` in the HTTP/2 request headers before h2 reads them.
//!
//! grpc-core clients (Python grpcio, C++, Ruby) send the socket path percent-encoded as
//! `:authority` (`run%2Fbosun%2Fbosun.sock`). The `http` crate refuses `%` in a host, and h2
//! resets every such stream (PROTOCOL_ERROR) while decoding the headers, before hyper, tonic
//! or any tower layer sees the request; h2 has no setting for it (hyperium/h2#487 is open).
//! containerd (grpc-go) accepts any authority. So the connection's inbound bytes pass through
//! [`AuthorityFix`]: it decodes the first request's header block (HPACK) and, when its
//! authority is one h2 takes (every kubelet and grpc-go request), steps aside for good, the
//! bytes untouched. Otherwise it re-encodes every header block of the connection with its own
//! HPACK encoder (whose table h2's decoder then mirrors), `:authority` set to `localhost`
//! where it is invalid. Other frames, and everything the server writes, pass as they are.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use loona_hpack::{Decoder, Encoder};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The client connection preface (RFC 9113 §3.4).
const PREFACE: usize = 24;
/// Frame header length.
const FRAME_HEADER: usize = 9;
const HEADERS: u8 = 0x1;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;
/// The largest frame payload every HTTP/2 peer accepts (SETTINGS_MAX_FRAME_SIZE's default).
const MAX_FRAME: usize = 16 << 10;
/// The largest header block gathered (h2's own limit on a header list is far lower).
const MAX_BLOCK: usize = 1 << 20;
/// What an invalid authority becomes (what grpc-go sends on unix sockets).
const LOCALHOST: &[u8] = b"localhost";

/// Where the connection is.
enum Mode {
    /// Before the first request's headers: frames are parsed, a decoder follows the client.
    Sniffing(Box<Decoder<'static>>),
    /// The client's authority is fine: bytes go to h2 untouched, nothing is parsed.
    Passthrough,
    /// Every header block is decoded and re-encoded.
    Rewrite(Box<Decoder<'static>>, Box<Encoder<'static>>),
}

/// A server-side connection whose request headers get a valid `:authority`; see the module.
pub struct AuthorityFix<S> {
    inner: S,
    mode: Mode,
    /// Bytes read from the client, not yet handled.
    raw: BytesMut,
    /// Bytes ready for h2.
    out: BytesMut,
    /// Preface bytes still to pass.
    preface: usize,
    /// The frames of a header block being gathered (HEADERS, then CONTINUATIONs).
    block: Vec<BytesMut>,
    eof: bool,
}

impl<S> AuthorityFix<S> {
    /// Wraps an accepted connection.
    pub fn new(inner: S) -> Self {
        AuthorityFix {
            inner,
            mode: Mode::Sniffing(Box::default()),
            raw: BytesMut::new(),
            out: BytesMut::new(),
            preface: PREFACE,
            block: Vec::new(),
            eof: false,
        }
    }

    /// The wrapped connection.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// Moves what can be handled from `raw` to `out`.
    fn process(&mut self) -> io::Result<()> {
        let n = self.preface.min(self.raw.len());
        self.out.extend_from_slice(&self.raw.split_to(n));
        self.preface -= n;
        while !matches!(self.mode, Mode::Passthrough) && self.raw.len() >= FRAME_HEADER {
            let len = usize::from(self.raw[0]) << 16
                | usize::from(self.raw[1]) << 8
                | usize::from(self.raw[2]);
            if self.raw.len() < FRAME_HEADER + len {
                break;
            }
            let frame = self.raw.split_to(FRAME_HEADER + len);
            let (kind, flags) = (frame[3], frame[4]);
            let gathering = !self.block.is_empty();
            if kind == HEADERS || (gathering && kind == CONTINUATION) {
                self.block.push(frame);
                let size: usize = self.block.iter().map(BytesMut::len).sum();
                if size > MAX_BLOCK {
                    return Err(io::Error::other("HTTP/2 header block over 1 MiB"));
                }
                if flags & END_HEADERS != 0 {
                    self.header_block()?;
                }
            } else {
                // Not a header block, or a CONTINUATION out of place: h2 judges it.
                self.flush_block();
                self.out.extend_from_slice(&frame);
            }
        }
        if matches!(self.mode, Mode::Passthrough) {
            self.flush_block();
            self.out.extend_from_slice(&self.raw.split());
        }
        Ok(())
    }

    /// Passes gathered frames on as they came.
    fn flush_block(&mut self) {
        for f in self.block.drain(..) {
            self.out.extend_from_slice(&f);
        }
    }

    /// A complete header block: sniffed, or re-encoded.
    fn header_block(&mut self) -> io::Result<()> {
        let frames = std::mem::take(&mut self.block);
        let sniffing = matches!(self.mode, Mode::Sniffing(_));
        let parts = fragment(&frames);
        let decoder = match (&mut self.mode, &parts) {
            (Mode::Sniffing(d) | Mode::Rewrite(d, _), Some(_)) => d,
            // Malformed padding (h2 reports it), or nothing to rewrite.
            _ => return self.pass(frames),
        };
        let Some((fragment, first_flags, priority)) = parts else {
            return self.pass(frames);
        };
        let headers = match decoder.decode(&fragment) {
            Ok(h) => h,
            Err(e) if sniffing => {
                // Not HPACK we understand: h2 gets the bytes and reports the error itself.
                tracing::debug!("HTTP/2 header block not decoded ({e:?}): passed through");
                self.mode = Mode::Passthrough;
                return self.pass(frames);
            }
            Err(e) => return Err(io::Error::other(format!("HPACK: {e:?}"))),
        };
        let invalid = |v: &[u8]| http::uri::Authority::try_from(v).is_err();
        if sniffing {
            let old = std::mem::replace(&mut self.mode, Mode::Passthrough);
            match old {
                Mode::Sniffing(d)
                    if headers
                        .iter()
                        .any(|(n, v)| n == b":authority" && invalid(v)) =>
                {
                    tracing::debug!(
                        "client sends an invalid :authority: its requests get localhost"
                    );
                    self.mode = Mode::Rewrite(d, Box::default());
                }
                _ => return self.pass(frames),
            }
        }
        let Mode::Rewrite(_, encoder) = &mut self.mode else {
            return self.pass(frames);
        };
        let fixed = headers.iter().map(|(n, v)| {
            let v = if n == b":authority" && invalid(v) {
                LOCALHOST
            } else {
                v
            };
            (&n[..], v)
        });
        let block = encoder.encode(fixed);
        let stream = &frames[0][5..9];
        write_block(
            &mut self.out,
            stream,
            first_flags,
            priority.as_deref(),
            &block,
        );
        Ok(())
    }

    /// Passes `frames` on as they came.
    fn pass(&mut self, frames: Vec<BytesMut>) -> io::Result<()> {
        self.block = frames;
        self.flush_block();
        Ok(())
    }
}

/// The header block fragment of gathered frames, the first frame's flags and its priority
/// fields; `None` when the padding does not fit.
fn fragment(frames: &[BytesMut]) -> Option<(Vec<u8>, u8, Option<Vec<u8>>)> {
    let first = frames.first()?;
    let flags = first[4];
    let mut payload = &first[FRAME_HEADER..];
    let mut pad = 0;
    if flags & PADDED != 0 {
        pad = usize::from(*payload.first()?);
        payload = &payload[1..];
    }
    let mut priority = None;
    if flags & PRIORITY != 0 {
        priority = Some(payload.get(..5)?.to_vec());
        payload = &payload[5..];
    }
    let mut out = payload.get(..payload.len().checked_sub(pad)?)?.to_vec();
    for f in &frames[1..] {
        out.extend_from_slice(&f[FRAME_HEADER..]);
    }
    Some((out, flags, priority))
}

/// Writes `block` as a HEADERS frame (and CONTINUATIONs) on `stream`, keeping END_STREAM and
/// the priority fields of the original.
fn write_block(
    out: &mut BytesMut,
    stream: &[u8],
    flags: u8,
    priority: Option<&[u8]>,
    block: &[u8],
) {
    let mut rest = block;
    let mut first = true;
    loop {
        let room = MAX_FRAME
            - if first {
                priority.map_or(0, <[u8]>::len)
            } else {
                0
            };
        let take = rest.len().min(room);
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        let (kind, mut f) = if first {
            let f = (flags & END_STREAM) | if priority.is_some() { PRIORITY } else { 0 };
            (HEADERS, f)
        } else {
            (CONTINUATION, 0)
        };
        if rest.is_empty() {
            f |= END_HEADERS;
        }
        let pri = if first {
            priority.unwrap_or_default()
        } else {
            &[]
        };
        let len = pri.len() + chunk.len();
        out.extend_from_slice(&[(len >> 16) as u8, (len >> 8) as u8, len as u8, kind, f]);
        out.extend_from_slice(stream);
        out.extend_from_slice(pri);
        out.extend_from_slice(chunk);
        first = false;
        if rest.is_empty() {
            return;
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for AuthorityFix<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let me = &mut *self;
        loop {
            if !me.out.is_empty() {
                let n = me.out.len().min(buf.remaining());
                buf.put_slice(&me.out[..n]);
                me.out.advance(n);
                return Poll::Ready(Ok(()));
            }
            if matches!(me.mode, Mode::Passthrough) && me.raw.is_empty() && me.block.is_empty() {
                return Pin::new(&mut me.inner).poll_read(cx, buf);
            }
            if me.eof {
                // What could not be parsed goes to h2 as it is: it reports the truncation.
                me.flush_block();
                me.out.extend_from_slice(&me.raw.split());
                if me.out.is_empty() {
                    return Poll::Ready(Ok(()));
                }
                continue;
            }
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut me.inner).poll_read(cx, &mut rb) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) if rb.filled().is_empty() => me.eof = true,
                Poll::Ready(Ok(())) => {
                    me.raw.extend_from_slice(rb.filled());
                    me.process()?;
                }
            }
        }
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for AuthorityFix<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl<S: tonic::transport::server::Connected> tonic::transport::server::Connected
    for AuthorityFix<S>
{
    type ConnectInfo = S::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
#[path = "authority_tests.rs"]
mod tests;
