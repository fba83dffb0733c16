//! wsstream channel framing: a binary message is `[channel, data…]`; base64 protocols send text `"<digit><base64>"`; v5 adds `[255, channel]` to close a channel.

use base64::Engine;
use tokio_tungstenite::tungstenite::Message;

/// stdin, stdout, stderr, error and resize channel numbers of remotecommand.
pub const STDIN: u8 = 0;
pub const STDOUT: u8 = 1;
pub const STDERR: u8 = 2;
pub const ERROR: u8 = 3;
pub const RESIZE: u8 = 4;
/// v5: `[CLOSE, channel]` closes `channel` (the client's stdin EOF).
pub const CLOSE: u8 = 255;

/// A decoded message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// Data for a channel.
    Data(u8, Vec<u8>),
    /// v5 close of a channel.
    Close(u8),
}

/// Encodes `data` on `channel`.
pub fn encode(channel: u8, data: &[u8], base64: bool) -> Message {
    if base64 {
        let mut s = String::with_capacity(1 + data.len().div_ceil(3) * 4);
        s.push(char::from(b'0' + channel));
        base64::engine::general_purpose::STANDARD.encode_string(data, &mut s);
        Message::text(s)
    } else {
        let mut v = Vec::with_capacity(1 + data.len());
        v.push(channel);
        v.extend_from_slice(data);
        Message::binary(v)
    }
}

/// The v5 close signal for `channel`.
pub fn encode_close(channel: u8) -> Message {
    Message::binary(vec![CLOSE, channel])
}

/// Decodes a data message; None for control messages, empty or malformed ones. `v5` enables
/// the close signal.
pub fn decode(msg: Message, base64: bool, v5: bool) -> Option<Frame> {
    match msg {
        Message::Binary(b) if !base64 => {
            let (&ch, rest) = b.split_first()?;
            if v5 && ch == CLOSE {
                return (rest.len() == 1).then(|| Frame::Close(rest[0]));
            }
            Some(Frame::Data(ch, rest.to_vec()))
        }
        Message::Text(t) if base64 => {
            let b = t.as_bytes();
            let (&digit, rest) = b.split_first()?;
            let ch = digit.checked_sub(b'0')?;
            let data = base64::engine::general_purpose::STANDARD
                .decode(rest)
                .ok()?;
            Some(Frame::Data(ch, data))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_and_base64_round_trip() {
        for b64 in [false, true] {
            let m = encode(STDOUT, b"hello", b64);
            assert_eq!(
                decode(m, b64, true),
                Some(Frame::Data(STDOUT, b"hello".to_vec()))
            );
        }
        assert_eq!(encode(STDERR, b"hi", true), Message::text("2aGk="));
        assert_eq!(
            decode(encode_close(STDIN), false, true),
            Some(Frame::Close(0))
        );
        // Without v5, 255 is just a channel number.
        assert_eq!(
            decode(encode_close(STDIN), false, false),
            Some(Frame::Data(255, vec![0]))
        );
        assert_eq!(decode(Message::binary(Vec::new()), false, true), None);
    }
}
