//! SPDY/3 name/value header blocks and their per-direction zlib contexts (with the dictionary).
//!
//! Block: `count:32`, then count × (`name-len:32`, name, `value-len:32`, value); several values
//! of one name are joined by NUL. Names are lower-case on the wire (Go lower-cases them).
//! Each direction of a connection has ONE zlib stream for all its blocks; every block ends
//! with a SYNC_FLUSH so the receiver can decode it without waiting for more.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::HEADER_DICTIONARY;
use super::Headers;

/// Largest decompressed header block we accept (bounds zlib bombs from a hostile peer).
pub(super) const MAX_BLOCK_LEN: usize = 256 * 1024;

/// Why a header block could not be decoded.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub(super) enum HeaderError {
    #[error("zlib: {0}")]
    Zlib(String),
    #[error("decompressed block is larger than {0} bytes")]
    TooLarge(usize),
    #[error("truncated or malformed name/value block")]
    Malformed,
    #[error("header name or value is not UTF-8")]
    NotUtf8,
}

/// Serializes `headers` as an uncompressed name/value block (names lower-cased, repeated
/// names joined into one entry with NUL-separated values, first-appearance order).
pub(super) fn encode_block(headers: &Headers) -> Vec<u8> {
    let mut merged: Vec<(String, String)> = Vec::with_capacity(headers.len());
    for (name, value) in headers {
        let name = name.to_ascii_lowercase();
        match merged.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => {
                v.push('\0');
                v.push_str(value);
            }
            None => merged.push((name, value.clone())),
        }
    }
    let mut out = Vec::new();
    out.extend_from_slice(&(merged.len() as u32).to_be_bytes());
    for (name, value) in &merged {
        for s in [name, value] {
            out.extend_from_slice(&(s.len() as u32).to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
    }
    out
}

/// Parses an uncompressed name/value block. Names are lower-cased; NUL-joined values become
/// separate entries.
pub(super) fn decode_block(b: &[u8]) -> Result<Headers, HeaderError> {
    let mut at = 0usize;
    let mut take = |n: usize| -> Result<&[u8], HeaderError> {
        let s = b
            .get(at..at.checked_add(n).ok_or(HeaderError::Malformed)?)
            .ok_or(HeaderError::Malformed)?;
        at += n;
        Ok(s)
    };
    let be = |s: &[u8]| u32::from_be_bytes([s[0], s[1], s[2], s[3]]) as usize;
    let count = be(take(4)?);
    // Every entry takes at least 8 bytes: a count beyond that is a lie, refuse before allocating.
    if count > b.len() / 8 {
        return Err(HeaderError::Malformed);
    }
    let mut headers = Vec::with_capacity(count);
    for _ in 0..count {
        let n = be(take(4)?);
        let name = std::str::from_utf8(take(n)?)
            .map_err(|_| HeaderError::NotUtf8)?
            .to_ascii_lowercase();
        let n = be(take(4)?);
        let value = std::str::from_utf8(take(n)?).map_err(|_| HeaderError::NotUtf8)?;
        for v in value.split('\0') {
            headers.push((name.clone(), v.to_string()));
        }
    }
    if at != b.len() {
        return Err(HeaderError::Malformed);
    }
    Ok(headers)
}

/// The sending direction's zlib context.
pub(super) struct Deflater {
    z: Compress,
}

impl Deflater {
    pub(super) fn new() -> std::io::Result<Deflater> {
        let mut z = Compress::new(Compression::default(), true);
        z.set_dictionary(&HEADER_DICTIONARY)
            .map_err(std::io::Error::other)?;
        Ok(Deflater { z })
    }

    /// Compresses one block, ending it with a SYNC_FLUSH.
    pub(super) fn compress(&mut self, headers: &Headers) -> std::io::Result<Vec<u8>> {
        let input = encode_block(headers);
        let mut out = Vec::with_capacity(input.len() / 2 + 64);
        let start = self.z.total_in();
        loop {
            let used = (self.z.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            self.z
                .compress_vec(&input[used..], &mut out, FlushCompress::Sync)
                .map_err(std::io::Error::other)?;
            let used = (self.z.total_in() - start) as usize;
            // A sync flush is complete once zlib stops filling the whole output buffer.
            if used == input.len() && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

/// The receiving direction's zlib context.
pub(super) struct Inflater {
    z: Decompress,
}

impl Default for Inflater {
    fn default() -> Self {
        Inflater {
            z: Decompress::new(true),
        }
    }
}

impl Inflater {
    /// Decompresses one sync-flushed block and parses it.
    pub(super) fn decompress(&mut self, input: &[u8]) -> Result<Headers, HeaderError> {
        let zerr = |e: flate2::DecompressError| HeaderError::Zlib(e.to_string());
        let mut out: Vec<u8> = Vec::with_capacity(1024);
        let start = self.z.total_in();
        loop {
            let used = (self.z.total_in() - start) as usize;
            if out.len() == out.capacity() {
                if out.len() >= MAX_BLOCK_LEN {
                    return Err(HeaderError::TooLarge(MAX_BLOCK_LEN));
                }
                let room = MAX_BLOCK_LEN - out.len();
                out.reserve_exact(out.len().max(1024).min(room));
            }
            let before_out = out.len();
            let status =
                match self
                    .z
                    .decompress_vec(&input[used..], &mut out, FlushDecompress::Sync)
                {
                    Ok(s) => s,
                    Err(e) => match e.needs_dictionary() {
                        Some(_) => {
                            self.z.set_dictionary(&HEADER_DICTIONARY).map_err(zerr)?;
                            continue;
                        }
                        None => return Err(zerr(e)),
                    },
                };
            let used_now = (self.z.total_in() - start) as usize;
            if status == Status::StreamEnd {
                // The peer ended its zlib stream: no later block could be decoded.
                return Err(HeaderError::Zlib("zlib stream ended".into()));
            }
            if used_now == input.len() && out.len() < out.capacity() {
                return decode_block(&out);
            }
            if used_now == used && out.len() == before_out && out.len() < out.capacity() {
                return Err(HeaderError::Malformed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(pairs: &[(&str, &str)]) -> Headers {
        pairs
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn block_round_trip_joins_and_splits_repeated_names() -> anyhow::Result<()> {
        let hs = h(&[
            ("StreamType", "stdout"),
            ("port", "80"),
            ("streamtype", "x"),
            ("empty", ""),
        ]);
        let b = encode_block(&hs);
        let back = decode_block(&b)?;
        assert_eq!(
            back,
            h(&[
                ("streamtype", "stdout"),
                ("streamtype", "x"),
                ("port", "80"),
                ("empty", "")
            ])
        );
        Ok(())
    }

    #[test]
    fn block_rejects_lies() {
        // count says 1000 entries in a 4-byte block
        assert_eq!(decode_block(&[0, 0, 3, 0xe8]), Err(HeaderError::Malformed));
        // name length beyond the end
        assert_eq!(
            decode_block(&[0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]),
            Err(HeaderError::Malformed)
        );
        // trailing garbage
        assert_eq!(decode_block(&[0, 0, 0, 0, 1]), Err(HeaderError::Malformed));
        assert_eq!(decode_block(&[0, 0]), Err(HeaderError::Malformed));
    }

    #[test]
    fn contexts_carry_state_across_blocks() -> anyhow::Result<()> {
        let mut d = Deflater::new()?;
        let mut i = Inflater::default();
        for n in 0..50 {
            let hs = h(&[
                ("streamtype", "data"),
                ("port", &n.to_string()),
                ("requestid", "0"),
            ]);
            let block = d.compress(&hs)?;
            assert_eq!(i.decompress(&block)?, hs);
        }
        // Later blocks repeat earlier ones and shrink thanks to the shared window.
        let again = d.compress(&h(&[
            ("streamtype", "data"),
            ("port", "49"),
            ("requestid", "0"),
        ]))?;
        assert!(again.len() < 16, "{} bytes", again.len());
        Ok(())
    }

    #[test]
    fn zlib_bomb_is_refused() -> anyhow::Result<()> {
        // A value of 1 MiB of 'a' compresses to ~1 KiB but must not be inflated past the cap.
        let big = "a".repeat(1024 * 1024);
        let block = Deflater::new()?.compress(&h(&[("x", &big)]))?;
        assert!(block.len() < 8 * 1024);
        assert_eq!(
            Inflater::default().decompress(&block),
            Err(HeaderError::TooLarge(MAX_BLOCK_LEN))
        );
        Ok(())
    }

    #[test]
    fn blocks_up_to_the_cap_decode() -> anyhow::Result<()> {
        for len in [MAX_BLOCK_LEN - 1000, MAX_BLOCK_LEN - 17, 100_000, 5] {
            let hs = h(&[("x", &"b".repeat(len))]);
            let block = Deflater::new()?.compress(&hs)?;
            assert_eq!(Inflater::default().decompress(&block)?, hs, "{len}");
        }
        Ok(())
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(Inflater::default()
            .decompress(&[0x78, 0xbb, 1, 2, 3, 4, 5, 6, 7])
            .is_err());
        assert!(Inflater::default().decompress(b"not zlib at all").is_err());
    }
}
