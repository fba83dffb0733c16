//! SPDY session tests: the peers they share (two sessions of ours over an in-memory duplex, a raw-frame peer).

mod sessions;
mod wire;

use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::time::timeout;

use super::frame::{self, decode, encode, goaway, rst, Frame, FLAG_FIN};
use super::header::{Deflater, Inflater};
use super::{Connection, Headers, Incoming};

const T: Duration = Duration::from_secs(20);

fn h(pairs: &[(&str, &str)]) -> Headers {
    pairs
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect()
}

fn pair() -> (Connection, Incoming, Connection, Incoming) {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (client, client_in) = Connection::client(a);
    let (server, server_in) = Connection::server(b);
    (client, client_in, server, server_in)
}

/// A hand-driven peer speaking raw frames, to test what a well-behaved session never sends.
struct Raw {
    io: DuplexStream,
    deflater: Deflater,
    inflater: Inflater,
    buf: Vec<u8>,
}

impl Raw {
    fn new(io: DuplexStream) -> Result<Raw> {
        Ok(Raw {
            io,
            deflater: Deflater::new()?,
            inflater: Inflater::default(),
            buf: Vec::new(),
        })
    }

    async fn send(&mut self, f: &Frame) -> Result<()> {
        let mut out = Vec::new();
        encode(f, &mut self.deflater, &mut out)?;
        self.io.write_all(&out).await?;
        Ok(())
    }

    /// The next frame (a WINDOW_UPDATE too: the session must never send one); `None` at EOF.
    async fn recv(&mut self) -> Result<Option<Frame>> {
        loop {
            if let Some((f, used)) = decode(&self.buf, &mut self.inflater)? {
                self.buf.drain(..used);
                match f {
                    None => continue,
                    Some(f) => return Ok(Some(f)),
                }
            }
            let mut chunk = [0u8; 4096];
            let n = timeout(T, self.io.read(&mut chunk)).await??;
            if n == 0 {
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }
}

fn raw_server() -> Result<(Raw, Connection, Incoming)> {
    let (a, b) = tokio::io::duplex(64 * 1024);
    let (server, incoming) = Connection::server(b);
    Ok((Raw::new(a)?, server, incoming))
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
