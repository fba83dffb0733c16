//! The attach socket's wire format, shared by the monitor and the daemon.
//!
//! `<bundle>/attach.sock` is a unix SOCK_SEQPACKET socket: each message is one chunk whose
//! first byte says what it is. Monitor → client: [`READY`] once accepted, then container
//! output tagged with its stream ([`OUT_STDOUT`], [`OUT_STDERR`]), and [`OUT_LOG_REOPENED`]
//! answering a reopen; the socket closes when the container's output ended (it exited) or
//! when the client could not keep up. Client → monitor: [`IN_STDIN`] bytes for the
//! container's stdin, [`IN_STDIN_EOF`] (this client's stdin ended), [`IN_RESIZE`] with the
//! terminal's width and height (u16 little-endian each), [`IN_REOPEN_LOG`] (CRI
//! ReopenContainerLog). Unknown messages are ignored.

/// The socket's name inside the bundle.
pub const SOCKET_NAME: &str = "attach.sock";
/// The monitor accepted the client: every output chunk from now on reaches it. Followed by
/// the monitor's [`PROTOCOL_VERSION`] (monitors before version 1 send the tag alone).
pub const OUT_READY: u8 = 0;
/// What this monitor understands: 1 adds [`IN_REOPEN_LOG`].
pub const PROTOCOL_VERSION: u8 = 1;
/// The first message to an accepted client.
pub const READY: [u8; 2] = [OUT_READY, PROTOCOL_VERSION];
/// Output from the container's stdout (or its terminal).
pub const OUT_STDOUT: u8 = 1;
/// Output from the container's stderr.
pub const OUT_STDERR: u8 = 2;
/// The log file was reopened (no payload), or why not (the error's text).
pub const OUT_LOG_REOPENED: u8 = 3;
/// Bytes for the container's stdin.
pub const IN_STDIN: u8 = 0x10;
/// The client's stdin ended.
pub const IN_STDIN_EOF: u8 = 0x11;
/// A terminal resize: width, height (u16 LE).
pub const IN_RESIZE: u8 = 0x12;
/// Reopen the log file at its path (no payload); answered with [`OUT_LOG_REOPENED`].
pub const IN_REOPEN_LOG: u8 = 0x13;
/// The most stdin payload a client puts in one message.
pub const MAX_STDIN_CHUNK: usize = 8 * 1024;

/// A message from an attach client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMessage<'a> {
    /// Bytes for the container's stdin.
    Stdin(&'a [u8]),
    /// The client's stdin ended.
    StdinEof,
    /// The client's terminal size.
    Resize {
        /// Columns.
        width: u16,
        /// Rows.
        height: u16,
    },
    /// Reopen the log file (the kubelet renamed it away).
    ReopenLog,
}

/// Decodes a client message; `None` for anything unknown or malformed.
pub fn parse_client(msg: &[u8]) -> Option<ClientMessage<'_>> {
    let (&tag, rest) = msg.split_first()?;
    match (tag, rest) {
        (IN_STDIN, data) => Some(ClientMessage::Stdin(data)),
        (IN_STDIN_EOF, []) => Some(ClientMessage::StdinEof),
        (IN_RESIZE, [w0, w1, h0, h1]) => Some(ClientMessage::Resize {
            width: u16::from_le_bytes([*w0, *w1]),
            height: u16::from_le_bytes([*h0, *h1]),
        }),
        (IN_REOPEN_LOG, []) => Some(ClientMessage::ReopenLog),
        _ => None,
    }
}

/// Encodes a resize message.
pub fn resize_message(width: u16, height: u16) -> [u8; 5] {
    let [w0, w1] = width.to_le_bytes();
    let [h0, h1] = height.to_le_bytes();
    [IN_RESIZE, w0, w1, h0, h1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_messages_round_trip_and_garbage_is_refused() {
        assert_eq!(
            parse_client(&[IN_STDIN, b'h', b'i']),
            Some(ClientMessage::Stdin(b"hi"))
        );
        assert_eq!(parse_client(&[IN_STDIN]), Some(ClientMessage::Stdin(b"")));
        assert_eq!(parse_client(&[IN_STDIN_EOF]), Some(ClientMessage::StdinEof));
        assert_eq!(
            parse_client(&[IN_REOPEN_LOG]),
            Some(ClientMessage::ReopenLog)
        );
        assert_eq!(parse_client(&[IN_REOPEN_LOG, 1]), None);
        assert_eq!(
            parse_client(&resize_message(300, 70)),
            Some(ClientMessage::Resize {
                width: 300,
                height: 70
            })
        );
        assert_eq!(parse_client(&[]), None);
        assert_eq!(parse_client(&[IN_STDIN_EOF, 0]), None);
        assert_eq!(parse_client(&[IN_RESIZE, 1, 2, 3]), None);
        assert_eq!(parse_client(&[OUT_STDOUT, b'x']), None);
    }
}
