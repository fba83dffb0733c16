//! The layer byte stream: decompression by media type and sha256 of the uncompressed tar (diff id).

use std::fs::File;
use std::io::{self, BufReader, Read};

use crate::error::{Result, ResultExt};
use crate::image::digest::{Digest, Hasher};
use crate::image::manifest::Compression;

/// Read buffer for blobs and plain tars (tar reads 512-byte headers; avoid a syscall each).
const BUF_SIZE: usize = 256 * 1024;

/// Wraps a layer blob in the decoder its compression needs.
///
/// gzip uses the multi-member decoder (some tools write concatenated members) and zstd reads
/// concatenated frames, so the whole blob is decoded either way.
pub fn decompress(blob: File, compression: Compression) -> Result<Box<dyn Read + Send>> {
    let input = BufReader::with_capacity(BUF_SIZE, blob);
    Ok(match compression {
        Compression::None => Box::new(input),
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(input)),
        Compression::Zstd => {
            Box::new(zstd::stream::read::Decoder::with_buffer(input).ctx(|| "start zstd decoder")?)
        }
    })
}

/// A reader that hashes and counts everything read through it.
pub struct DigestReader<R> {
    inner: R,
    hasher: Hasher,
    bytes: u64,
}

impl<R: Read> DigestReader<R> {
    /// Wraps `inner`.
    pub fn new(inner: R) -> Self {
        DigestReader {
            inner,
            hasher: Hasher::new(),
            bytes: 0,
        }
    }

    /// The sha256 of the bytes read so far, and their count.
    pub fn finish(self) -> (Digest, u64) {
        (self.hasher.finish(), self.bytes)
    }
}

impl<R: Read> Read for DigestReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn blob(bytes: &[u8]) -> File {
        let mut f = tempfile::tempfile().expect("tempfile");
        f.write_all(bytes).expect("write");
        io::Seek::rewind(&mut f).expect("rewind");
        f
    }

    fn read_all(compression: Compression, bytes: &[u8]) -> (Vec<u8>, Digest) {
        let mut r = DigestReader::new(decompress(blob(bytes), compression).expect("decoder"));
        let mut out = Vec::new();
        r.read_to_end(&mut out).expect("read");
        (out, r.finish().0)
    }

    #[test]
    fn every_compression_yields_the_plain_stream_and_its_digest() {
        let plain = b"hello layer".repeat(100);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(&plain).expect("gzip");
        let gz = gz.finish().expect("gzip finish");
        let zst = zstd::encode_all(&plain[..], 3).expect("zstd");
        for (c, bytes) in [
            (Compression::None, plain.clone()),
            (Compression::Gzip, gz),
            (Compression::Zstd, zst),
        ] {
            let (out, digest) = read_all(c, &bytes);
            assert_eq!(out, plain, "{c:?}");
            assert_eq!(digest, Digest::of(&plain), "{c:?}");
        }
    }
}
