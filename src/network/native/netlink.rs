//! A small synchronous netlink client: message building (nlmsghdr + attributes, nested), one
//! request with its acknowledgement, dumps, and nf_tables batches. Used from blocking threads.

use std::io;
use std::os::fd::OwnedFd;
use std::time::Duration;

use rustix::net::{AddressFamily, Protocol, RecvFlags, SendFlags, SocketFlags, SocketType};

/// `NLM_F_REQUEST`.
pub const F_REQUEST: u16 = 0x1;
/// `NLM_F_ACK`.
pub const F_ACK: u16 = 0x4;
/// `NLM_F_REPLACE` (new requests).
pub const F_REPLACE: u16 = 0x100;
/// `NLM_F_EXCL` (new requests).
pub const F_EXCL: u16 = 0x200;
/// `NLM_F_CREATE` (new requests).
pub const F_CREATE: u16 = 0x400;
/// `NLM_F_APPEND` (new requests).
pub const F_APPEND: u16 = 0x800;
/// `NLM_F_DUMP` (get requests).
pub const F_DUMP: u16 = 0x300;

const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLA_F_NESTED: u16 = 0x8000;
const HEADER: usize = 16;

/// `NFNL_MSG_BATCH_BEGIN` / `_END`.
const BATCH_BEGIN: u16 = 0x10;
const BATCH_END: u16 = 0x11;
/// `NFNL_SUBSYS_NFTABLES`.
pub const SUBSYS_NFTABLES: u16 = 10;

fn align(n: usize) -> usize {
    (n + 3) & !3
}

/// One netlink message being built: the header, a family header, attributes.
#[derive(Debug, Clone)]
pub struct Msg {
    buf: Vec<u8>,
    nests: Vec<usize>,
}

impl Msg {
    /// A message of `kind` with `flags` (`NLM_F_REQUEST` is added).
    pub fn new(kind: u16, flags: u16) -> Msg {
        let mut buf = vec![0u8; HEADER];
        buf[4..6].copy_from_slice(&kind.to_ne_bytes());
        buf[6..8].copy_from_slice(&(flags | F_REQUEST).to_ne_bytes());
        Msg {
            buf,
            nests: Vec::new(),
        }
    }

    /// An nf_tables message (`NFNL_SUBSYS_NFTABLES << 8 | kind`) for `family`.
    pub fn nft(kind: u16, flags: u16, family: u8) -> Msg {
        let mut m = Msg::new((SUBSYS_NFTABLES << 8) | kind, flags);
        m.raw(&[family, 0, 0, 0]);
        m
    }

    /// Appends a fixed header (ifinfomsg, ifaddrmsg, …), padded to 4 bytes.
    pub fn raw(&mut self, bytes: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(bytes);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    /// Appends attribute `kind` with `data`.
    pub fn attr(&mut self, kind: u16, data: &[u8]) -> &mut Self {
        let len = 4 + data.len();
        self.buf
            .extend_from_slice(&u16::try_from(len).unwrap_or(u16::MAX).to_ne_bytes());
        self.buf.extend_from_slice(&kind.to_ne_bytes());
        self.buf.extend_from_slice(data);
        self.buf.resize(align(self.buf.len()), 0);
        self
    }

    /// A NUL-terminated string attribute.
    pub fn str(&mut self, kind: u16, s: &str) -> &mut Self {
        let mut data = s.as_bytes().to_vec();
        data.push(0);
        self.attr(kind, &data)
    }

    /// A native-endian u32 attribute.
    pub fn u32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr(kind, &v.to_ne_bytes())
    }

    /// A big-endian u32 attribute (nf_tables numbers).
    pub fn be32(&mut self, kind: u16, v: u32) -> &mut Self {
        self.attr(kind, &v.to_be_bytes())
    }

    /// Opens nested attribute `kind`; close it with [`Msg::end`].
    pub fn begin(&mut self, kind: u16) -> &mut Self {
        self.nests.push(self.buf.len());
        self.buf.extend_from_slice(&[0, 0]);
        self.buf
            .extend_from_slice(&(kind | NLA_F_NESTED).to_ne_bytes());
        self
    }

    /// Closes the innermost open nest.
    pub fn end(&mut self) -> &mut Self {
        if let Some(at) = self.nests.pop() {
            let len = u16::try_from(self.buf.len() - at).unwrap_or(u16::MAX);
            self.buf[at..at + 2].copy_from_slice(&len.to_ne_bytes());
        }
        self
    }

    /// Adds flags to the header.
    fn add_flags(&mut self, flags: u16) {
        let old = u16::from_ne_bytes([self.buf[6], self.buf[7]]);
        self.buf[6..8].copy_from_slice(&(old | flags).to_ne_bytes());
    }

    /// The finished bytes with sequence number `seq`.
    fn finish(mut self, seq: u32) -> Vec<u8> {
        while !self.nests.is_empty() {
            self.end();
        }
        let len = u32::try_from(self.buf.len()).unwrap_or(u32::MAX);
        self.buf[0..4].copy_from_slice(&len.to_ne_bytes());
        self.buf[8..12].copy_from_slice(&seq.to_ne_bytes());
        self.buf
    }

    /// The bytes as they would be sent with sequence 0 (tests).
    #[cfg(test)]
    pub fn bytes(self) -> Vec<u8> {
        self.finish(0)
    }
}

/// A received message: its type and its payload (after the netlink header).
#[derive(Debug, Clone)]
pub struct Reply {
    /// nlmsg_type.
    pub kind: u16,
    /// The payload.
    pub payload: Vec<u8>,
}

/// The attributes after a fixed header of `skip` bytes: `(type without flags, data)`.
#[cfg(test)]
pub fn attrs(payload: &[u8], skip: usize) -> Vec<(u16, &[u8])> {
    let mut out = Vec::new();
    let mut at = align(skip);
    while at + 4 <= payload.len() {
        let len = usize::from(u16::from_ne_bytes([payload[at], payload[at + 1]]));
        let kind = u16::from_ne_bytes([payload[at + 2], payload[at + 3]]) & 0x3fff;
        if len < 4 || at + len > payload.len() {
            break;
        }
        out.push((kind, &payload[at + 4..at + len]));
        at += align(len);
    }
    out
}

/// A netlink socket of one protocol, in the network namespace of the thread that opened it.
pub struct Socket {
    fd: OwnedFd,
    seq: u32,
    buf: Vec<u8>,
}

/// The protocols bosun talks.
#[derive(Debug, Clone, Copy)]
pub enum Family {
    /// NETLINK_ROUTE (links, addresses, routes).
    Route,
    /// NETLINK_NETFILTER (nf_tables).
    Netfilter,
}

impl Socket {
    /// Opens a socket (close-on-exec, 5 s receive timeout so a lost reply cannot hang a thread).
    pub fn open(family: Family) -> io::Result<Socket> {
        // NETLINK_ROUTE is protocol 0: `None`.
        let proto: Option<Protocol> = match family {
            Family::Route => None,
            Family::Netfilter => Some(rustix::net::netlink::NETFILTER),
        };
        let fd = rustix::net::socket_with(
            AddressFamily::NETLINK,
            SocketType::RAW,
            SocketFlags::CLOEXEC,
            proto,
        )?;
        rustix::net::sockopt::set_socket_timeout(
            &fd,
            rustix::net::sockopt::Timeout::Recv,
            Some(Duration::from_secs(5)),
        )?;
        // Large enough for a dump of a table's rules or a batch's acknowledgements.
        let _ = rustix::net::sockopt::set_socket_recv_buffer_size(&fd, 1 << 20);
        Ok(Socket {
            fd,
            seq: std::process::id().wrapping_mul(7919),
            buf: vec![0u8; 64 << 10],
        })
    }

    fn next_seq(&mut self) -> u32 {
        self.seq = self.seq.wrapping_add(1);
        self.seq
    }

    fn send(&self, bytes: &[u8]) -> io::Result<()> {
        let n = rustix::net::send(&self.fd, bytes, SendFlags::empty())?;
        if n != bytes.len() {
            return Err(io::Error::other("netlink: short send"));
        }
        Ok(())
    }

    /// Receives one datagram and splits it into messages.
    fn recv(&mut self) -> io::Result<Vec<(u16, u32, Vec<u8>)>> {
        let (n, _) = rustix::net::recv(&self.fd, &mut self.buf[..], RecvFlags::empty())?;
        let mut out = Vec::new();
        let mut at = 0;
        let data = &self.buf[..n];
        while at + HEADER <= data.len() {
            let len =
                u32::from_ne_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]]) as usize;
            if len < HEADER || at + len > data.len() {
                break;
            }
            let kind = u16::from_ne_bytes([data[at + 4], data[at + 5]]);
            let seq =
                u32::from_ne_bytes([data[at + 8], data[at + 9], data[at + 10], data[at + 11]]);
            out.push((kind, seq, data[at + HEADER..at + len].to_vec()));
            at += align(len);
        }
        Ok(out)
    }

    /// Sends `msg` asking for an acknowledgement; the replies before it (a get's answer).
    pub fn request(&mut self, mut msg: Msg) -> io::Result<Vec<Reply>> {
        msg.add_flags(F_ACK);
        self.exchange(msg)
    }

    /// Sends a dump request; every message until `NLMSG_DONE`.
    pub fn dump(&mut self, mut msg: Msg) -> io::Result<Vec<Reply>> {
        msg.add_flags(F_DUMP);
        self.exchange(msg)
    }

    /// Sends `msg`; the replies with its sequence number until an `NLMSG_DONE` or an
    /// acknowledgement (an `NLMSG_ERROR` with errno 0; any other errno is the error).
    fn exchange(&mut self, msg: Msg) -> io::Result<Vec<Reply>> {
        let seq = self.next_seq();
        self.send(&msg.finish(seq))?;
        let mut replies = Vec::new();
        loop {
            for (kind, s, payload) in self.recv()? {
                if s != seq {
                    continue;
                }
                match kind {
                    NLMSG_DONE => return Ok(replies),
                    NLMSG_ERROR => match errno(&payload) {
                        0 => return Ok(replies),
                        e => return Err(io::Error::from_raw_os_error(e)),
                    },
                    _ => replies.push(Reply { kind, payload }),
                }
            }
        }
    }

    /// Sends `msgs` as one nf_tables transaction (all or nothing). On failure: the index of
    /// the first message the kernel refused and its error.
    pub fn batch(&mut self, msgs: Vec<Msg>) -> Result<(), (usize, io::Error)> {
        if msgs.is_empty() {
            return Ok(());
        }
        let mut bytes = Vec::new();
        let begin_seq = self.next_seq();
        let mut begin = Msg::new(BATCH_BEGIN, 0);
        begin.raw(&[0, 0, 0, SUBSYS_NFTABLES as u8]);
        bytes.extend(begin.finish(begin_seq));
        let first = begin_seq.wrapping_add(1);
        let count = msgs.len();
        for m in msgs {
            let mut m = m;
            m.add_flags(F_ACK);
            let seq = self.next_seq();
            bytes.extend(m.finish(seq));
        }
        let mut end = Msg::new(BATCH_END, 0);
        end.raw(&[0, 0, 0, SUBSYS_NFTABLES as u8]);
        let end_seq = self.next_seq();
        bytes.extend(end.finish(end_seq));
        self.send(&bytes).map_err(|e| (0, e))?;
        let mut acked = 0usize;
        let mut failure: Option<(usize, io::Error)> = None;
        while acked < count {
            let got = match self.recv() {
                Ok(g) => g,
                Err(e) => return Err(failure.unwrap_or((acked, e))),
            };
            for (kind, s, payload) in got {
                let index = s.wrapping_sub(first) as usize;
                if kind != NLMSG_ERROR || index >= count {
                    continue;
                }
                acked += 1;
                let e = errno(&payload);
                if e != 0 && failure.as_ref().is_none_or(|(i, _)| index < *i) {
                    failure = Some((index, io::Error::from_raw_os_error(e)));
                }
            }
            if failure.is_some() && acked < count {
                // The kernel acknowledges every message of a failed batch too, but a refused
                // message is all we need: do not wait for the rest.
                break;
            }
        }
        match failure {
            Some(f) => Err(f),
            None => Ok(()),
        }
    }
}

/// The (positive) errno of an `NLMSG_ERROR` payload; 0 for an acknowledgement.
fn errno(payload: &[u8]) -> i32 {
    payload
        .get(..4)
        .map(|b| -i32::from_ne_bytes([b[0], b[1], b[2], b[3]]))
        .unwrap_or(libc::EIO)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_nest_and_pad() {
        let mut m = Msg::new(16, F_CREATE);
        m.raw(&[1, 2, 3]).str(3, "ab").begin(18).u32(1, 7).end();
        let b = m.bytes();
        // header 16 + raw 4 + str (4+3 → 8) + nest (4 + u32 attr 8) = 40
        assert_eq!(b.len(), 40);
        assert_eq!(u32::from_ne_bytes([b[0], b[1], b[2], b[3]]), 40);
        assert_eq!(
            u16::from_ne_bytes([b[6], b[7]]),
            F_REQUEST | F_CREATE,
            "flags"
        );
        let parsed = attrs(&b[16..], 4);
        assert_eq!(parsed.len(), 2);
        assert_eq!(parsed[0], (3, &b"ab\0"[..]));
        assert_eq!(parsed[1].0, 18, "nested flag masked off");
        assert_eq!(attrs(parsed[1].1, 0), vec![(1, &7u32.to_ne_bytes()[..])]);
    }

    #[test]
    fn errno_of_an_ack_and_an_error() {
        assert_eq!(errno(&0i32.to_ne_bytes()), 0);
        assert_eq!(errno(&(-libc::ENOENT).to_ne_bytes()), libc::ENOENT);
        assert_eq!(errno(&[]), libc::EIO);
    }
}
