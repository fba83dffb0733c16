//! Terminal resize messages: `{"Width":W,"Height":H}` JSON, one per WebSocket message or back to back on a SPDY stream.

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::mpsc;

use crate::runtime::TerminalSize;

/// remotecommand.TerminalSize on the wire.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct WireSize {
    #[serde(rename = "Width")]
    pub width: u16,
    #[serde(rename = "Height")]
    pub height: u16,
}

impl From<WireSize> for TerminalSize {
    fn from(w: WireSize) -> Self {
        TerminalSize {
            width: w.width,
            height: w.height,
        }
    }
}

/// The wire form of `size`.
pub fn encode(size: TerminalSize) -> Vec<u8> {
    serde_json::to_vec(&WireSize {
        width: size.width,
        height: size.height,
    })
    .unwrap_or_default()
}

/// One resize message (WebSocket); None when malformed.
pub fn decode(msg: &[u8]) -> Option<TerminalSize> {
    serde_json::from_slice::<WireSize>(msg).ok().map(Into::into)
}

/// Most bytes of an incomplete resize object kept before the stream is given up.
const MAX_PENDING: usize = 4096;

/// Reads concatenated resize objects from `r` (a SPDY resize stream) until EOF or a bad object,
/// sending each to `tx`.
pub async fn read_stream(mut r: impl AsyncRead + Unpin, tx: mpsc::Sender<TerminalSize>) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    loop {
        let n = match r.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut sizes = Vec::new();
        let mut it = serde_json::Deserializer::from_slice(&buf).into_iter::<WireSize>();
        let mut used = 0;
        loop {
            match it.next() {
                Some(Ok(size)) => {
                    used = it.byte_offset();
                    sizes.push(size);
                }
                Some(Err(e)) if e.is_eof() => break,
                Some(Err(_)) => return,
                None => break,
            }
        }
        buf.drain(..used);
        for size in sizes {
            if tx.send(size.into()).await.is_err() {
                return;
            }
        }
        if buf.len() > MAX_PENDING {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn objects_split_across_reads_are_decoded() {
        let (mut w, r) = tokio::io::duplex(64);
        let (tx, mut rx) = mpsc::channel(4);
        let task = tokio::spawn(read_stream(r, tx));
        use tokio::io::AsyncWriteExt;
        w.write_all(b"{\"Width\":80,\"Hei").await.expect("w");
        w.write_all(b"ght\":24}{\"Width\":100,\"Height\":50}")
            .await
            .expect("w");
        drop(w);
        let a = rx.recv().await.expect("first");
        let b = rx.recv().await.expect("second");
        assert_eq!((a.width, a.height), (80, 24));
        assert_eq!((b.width, b.height), (100, 50));
        assert!(rx.recv().await.is_none());
        task.await.expect("join");
        assert_eq!(
            decode(&encode(TerminalSize {
                width: 3,
                height: 4
            })),
            Some(TerminalSize {
                width: 3,
                height: 4
            })
        );
    }
}
