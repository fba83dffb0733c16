//! SPDY/3 frame codec: the 8-byte frame head, every control frame type, DATA frames.
//!
//! Layouts (all integers big-endian), as written by moby/spdystream's `spdy` package:
//! - control: `1 | version:15 | type:16 | flags:8 | length:24 | payload`
//! - data:    `0 | stream-id:31 | flags:8 | length:24 | payload`
//! - SYN_STREAM: stream-id:32, assoc-id:32, priority<<5:8, slot:8, header block (length = 10 + block)
//! - SYN_REPLY / HEADERS: stream-id:32, header block (length = 4 + block)
//! - RST_STREAM: stream-id:32, status:32 (length 8) · PING: id:32 (length 4)
//! - SETTINGS: count:32, then count × (flags:8 | id:24, value:32) (length 4 + 8n)
//! - GOAWAY: last-good-stream-id:32, status:32 (length 8) · WINDOW_UPDATE: stream-id:32, delta:32
//!
//! Go's reader rejects unknown control types, so we never send any others; we skip them.

use super::header::{Deflater, HeaderError, Inflater};
use super::Headers;

/// The only protocol version spoken (spdystream writes 3; "SPDY/3.1" is the upgrade token).
pub(super) const VERSION: u16 = 3;
/// FLAG_FIN on DATA and on SYN_STREAM / SYN_REPLY / HEADERS.
pub(super) const FLAG_FIN: u8 = 0x01;
/// FLAG_UNIDIRECTIONAL on SYN_STREAM: the receiver may not send on the stream.
pub(super) const FLAG_UNIDIRECTIONAL: u8 = 0x02;
/// Length of every frame head.
pub(super) const HEAD_LEN: usize = 8;
/// Largest control frame payload we accept (compressed header blocks of a few headers are
/// tens of bytes; this only bounds what a hostile peer can make us buffer).
pub(super) const MAX_CONTROL_LEN: usize = 64 * 1024;
/// Largest DATA payload the 24-bit length can express.
pub(super) const MAX_DATA_LEN: usize = (1 << 24) - 1;

pub(super) const TYPE_SYN_STREAM: u16 = 1;
pub(super) const TYPE_SYN_REPLY: u16 = 2;
pub(super) const TYPE_RST_STREAM: u16 = 3;
pub(super) const TYPE_SETTINGS: u16 = 4;
pub(super) const TYPE_PING: u16 = 6;
pub(super) const TYPE_GOAWAY: u16 = 7;
pub(super) const TYPE_HEADERS: u16 = 8;
pub(super) const TYPE_WINDOW_UPDATE: u16 = 9;

/// RST_STREAM status codes (SPDY/3 section 2.6.3).
pub(super) mod rst {
    pub const PROTOCOL_ERROR: u32 = 1;
    pub const REFUSED_STREAM: u32 = 3;
    pub const CANCEL: u32 = 5;
}

/// GOAWAY status codes (SPDY/3 section 2.6.6).
pub(super) mod goaway {
    pub const OK: u32 = 0;
    pub const PROTOCOL_ERROR: u32 = 1;
}

/// Why bytes from the peer could not be decoded. Any of these ends the session.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum FrameError {
    #[error("unsupported SPDY version {0}")]
    Version(u16),
    #[error("control frame type {kind} is {len} bytes, more than the {max} allowed")]
    TooLarge { kind: u16, len: usize, max: usize },
    #[error("control frame type {kind} has invalid length {len}")]
    Length { kind: u16, len: usize },
    #[error("frame type {0} with stream id 0")]
    ZeroStreamId(u16),
    #[error("{0} frame with invalid content")]
    Invalid(&'static str),
    #[error("header block: {0}")]
    Header(#[from] HeaderError),
}

/// A SETTINGS entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Setting {
    pub flags: u8,
    pub id: u32,
    pub value: u32,
}

/// One decoded frame. Stream ids are 31-bit; header blocks are decompressed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Frame {
    SynStream {
        stream_id: u32,
        assoc_id: u32,
        priority: u8,
        flags: u8,
        headers: Headers,
    },
    SynReply {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    RstStream {
        stream_id: u32,
        status: u32,
    },
    Settings {
        flags: u8,
        entries: Vec<Setting>,
    },
    Ping {
        id: u32,
    },
    GoAway {
        last_good: u32,
        status: u32,
    },
    Headers {
        stream_id: u32,
        flags: u8,
        headers: Headers,
    },
    WindowUpdate {
        stream_id: u32,
        delta: u32,
    },
    Data {
        stream_id: u32,
        flags: u8,
        data: Vec<u8>,
    },
}

/// The 8-byte head, decoded before the payload is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Head {
    Control {
        kind: u16,
        flags: u8,
        len: usize,
    },
    Data {
        stream_id: u32,
        flags: u8,
        len: usize,
    },
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Decodes a frame head and checks what can be checked before reading the payload.
pub(super) fn parse_head(b: &[u8; HEAD_LEN]) -> Result<Head, FrameError> {
    let first = be32(b, 0);
    let second = be32(b, 4);
    let flags = (second >> 24) as u8;
    let len = (second & 0x00ff_ffff) as usize;
    if first & 0x8000_0000 == 0 {
        let stream_id = first & 0x7fff_ffff;
        if stream_id == 0 {
            return Err(FrameError::ZeroStreamId(0));
        }
        return Ok(Head::Data {
            stream_id,
            flags,
            len,
        });
    }
    let version = ((first >> 16) & 0x7fff) as u16;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let kind = (first & 0xffff) as u16;
    if len > MAX_CONTROL_LEN {
        return Err(FrameError::TooLarge {
            kind,
            len,
            max: MAX_CONTROL_LEN,
        });
    }
    Ok(Head::Control { kind, flags, len })
}

/// Decodes a control frame payload. `Ok(None)` for frame types we do not know (ignored, as
/// the SPDY/3 spec asks). Header blocks go through `inflater`, which must see every block
/// of the connection in order.
pub(super) fn parse_control(
    kind: u16,
    flags: u8,
    p: &[u8],
    inflater: &mut Inflater,
) -> Result<Option<Frame>, FrameError> {
    let need = |min: usize, exact: bool| -> Result<(), FrameError> {
        if p.len() < min || (exact && p.len() != min) {
            return Err(FrameError::Length { kind, len: p.len() });
        }
        Ok(())
    };
    let stream = |id: u32| -> Result<u32, FrameError> {
        let id = id & 0x7fff_ffff;
        if id == 0 {
            return Err(FrameError::ZeroStreamId(kind));
        }
        Ok(id)
    };
    let frame = match kind {
        TYPE_SYN_STREAM => {
            need(10, false)?;
            let headers = inflater.decompress(&p[10..])?;
            Frame::SynStream {
                stream_id: stream(be32(p, 0))?,
                assoc_id: be32(p, 4) & 0x7fff_ffff,
                priority: p[8] >> 5,
                flags,
                headers,
            }
        }
        TYPE_SYN_REPLY | TYPE_HEADERS => {
            need(4, false)?;
            let headers = inflater.decompress(&p[4..])?;
            let stream_id = stream(be32(p, 0))?;
            if kind == TYPE_SYN_REPLY {
                Frame::SynReply {
                    stream_id,
                    flags,
                    headers,
                }
            } else {
                Frame::Headers {
                    stream_id,
                    flags,
                    headers,
                }
            }
        }
        TYPE_RST_STREAM => {
            need(8, true)?;
            let status = be32(p, 4);
            if status == 0 {
                return Err(FrameError::Invalid("RST_STREAM"));
            }
            Frame::RstStream {
                stream_id: stream(be32(p, 0))?,
                status,
            }
        }
        TYPE_SETTINGS => {
            need(4, false)?;
            let n = be32(p, 0) as usize;
            if n.checked_mul(8).and_then(|b| b.checked_add(4)) != Some(p.len()) {
                return Err(FrameError::Length { kind, len: p.len() });
            }
            let entries = p[4..]
                .chunks_exact(8)
                .map(|e| {
                    let fid = be32(e, 0);
                    Setting {
                        flags: (fid >> 24) as u8,
                        id: fid & 0x00ff_ffff,
                        value: be32(e, 4),
                    }
                })
                .collect();
            Frame::Settings { flags, entries }
        }
        TYPE_PING => {
            need(4, true)?;
            Frame::Ping { id: be32(p, 0) }
        }
        TYPE_GOAWAY => {
            need(8, true)?;
            Frame::GoAway {
                last_good: be32(p, 0) & 0x7fff_ffff,
                status: be32(p, 4),
            }
        }
        TYPE_WINDOW_UPDATE => {
            need(8, true)?;
            Frame::WindowUpdate {
                stream_id: be32(p, 0) & 0x7fff_ffff,
                delta: be32(p, 4) & 0x7fff_ffff,
            }
        }
        _ => return Ok(None),
    };
    Ok(Some(frame))
}

fn control_head(out: &mut Vec<u8>, kind: u16, flags: u8, len: usize) -> std::io::Result<()> {
    if len > MAX_CONTROL_LEN {
        let msg = format!("control frame type {kind} would be {len} bytes (max {MAX_CONTROL_LEN})");
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, msg));
    }
    out.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    out.extend_from_slice(&kind.to_be_bytes());
    out.extend_from_slice(&((u32::from(flags) << 24) | (len as u32 & 0x00ff_ffff)).to_be_bytes());
    Ok(())
}

/// Appends the wire form of `frame` to `out`. Header blocks go through `deflater`, which
/// must see every block of the connection in the order the frames are written.
pub(super) fn encode(
    frame: &Frame,
    deflater: &mut Deflater,
    out: &mut Vec<u8>,
) -> std::io::Result<()> {
    let u32s = |out: &mut Vec<u8>, vals: &[u32]| {
        for v in vals {
            out.extend_from_slice(&v.to_be_bytes());
        }
    };
    match frame {
        Frame::SynStream {
            stream_id,
            assoc_id,
            priority,
            flags,
            headers,
        } => {
            let block = deflater.compress(headers)?;
            control_head(out, TYPE_SYN_STREAM, *flags, 10 + block.len())?;
            u32s(out, &[*stream_id, *assoc_id]);
            out.extend_from_slice(&[(priority & 0x07) << 5, 0]);
            out.extend_from_slice(&block);
        }
        Frame::SynReply {
            stream_id,
            flags,
            headers,
        }
        | Frame::Headers {
            stream_id,
            flags,
            headers,
        } => {
            let kind = if matches!(frame, Frame::SynReply { .. }) {
                TYPE_SYN_REPLY
            } else {
                TYPE_HEADERS
            };
            let block = deflater.compress(headers)?;
            control_head(out, kind, *flags, 4 + block.len())?;
            u32s(out, &[*stream_id]);
            out.extend_from_slice(&block);
        }
        Frame::RstStream { stream_id, status } => {
            control_head(out, TYPE_RST_STREAM, 0, 8)?;
            u32s(out, &[*stream_id, *status]);
        }
        Frame::Settings { flags, entries } => {
            control_head(out, TYPE_SETTINGS, *flags, 4 + 8 * entries.len())?;
            u32s(out, &[entries.len() as u32]);
            for e in entries {
                u32s(
                    out,
                    &[(u32::from(e.flags) << 24) | (e.id & 0x00ff_ffff), e.value],
                );
            }
        }
        Frame::Ping { id } => {
            control_head(out, TYPE_PING, 0, 4)?;
            u32s(out, &[*id]);
        }
        Frame::GoAway { last_good, status } => {
            control_head(out, TYPE_GOAWAY, 0, 8)?;
            u32s(out, &[*last_good, *status]);
        }
        Frame::WindowUpdate { stream_id, delta } => {
            control_head(out, TYPE_WINDOW_UPDATE, 0, 8)?;
            u32s(out, &[*stream_id, *delta]);
        }
        Frame::Data {
            stream_id,
            flags,
            data,
        } => {
            if data.len() > MAX_DATA_LEN {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "DATA frame too large",
                ));
            }
            u32s(
                out,
                &[
                    stream_id & 0x7fff_ffff,
                    (u32::from(*flags) << 24) | data.len() as u32,
                ],
            );
            out.extend_from_slice(data);
        }
    }
    Ok(())
}

/// Decodes one complete frame from the front of `buf`: `Ok(None)` when more bytes are needed,
/// else the frame (None for an ignored unknown control type) and the bytes it used.
#[cfg(test)]
pub(super) fn decode(
    buf: &[u8],
    inflater: &mut Inflater,
) -> Result<Option<(Option<Frame>, usize)>, FrameError> {
    let Some(head) = buf.get(..HEAD_LEN) else {
        return Ok(None);
    };
    let mut h = [0u8; HEAD_LEN];
    h.copy_from_slice(head);
    let (len, frame) = match parse_head(&h)? {
        Head::Control { kind, flags, len } => {
            let Some(p) = buf.get(HEAD_LEN..HEAD_LEN + len) else {
                return Ok(None);
            };
            (len, parse_control(kind, flags, p, inflater)?)
        }
        Head::Data {
            stream_id,
            flags,
            len,
        } => {
            let Some(p) = buf.get(HEAD_LEN..HEAD_LEN + len) else {
                return Ok(None);
            };
            (
                len,
                Some(Frame::Data {
                    stream_id,
                    flags,
                    data: p.to_vec(),
                }),
            )
        }
    };
    Ok(Some((frame, HEAD_LEN + len)))
}

#[cfg(test)]
#[path = "frame_tests.rs"]
mod tests;
