//! Content-addressed blob store: blobs become visible only after their digest and size are verified.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::image::digest::{Digest, Hasher};
use crate::store::atomic;
use crate::store::space::NameFs;

/// Manifests and configs larger than this are refused when read whole.
pub const MAX_SMALL_BLOB: u64 = 8 << 20;

/// Blobs under `<root>/blobs/sha256/<hex>`, in-progress writes under `<root>/ingest/`.
#[derive(Debug, Clone)]
pub struct ContentStore {
    root: PathBuf,
}

impl ContentStore {
    /// Opens (creating) the store at `root` and discards ingests a crash left behind.
    pub fn open(root: &Path) -> Result<Self> {
        for d in ["blobs/sha256", "ingest"] {
            fs::create_dir_all(root.join(d))
                .ctx(|| format!("create {}", root.join(d).display()))?;
        }
        if let Ok(rd) = fs::read_dir(root.join("ingest")) {
            for e in rd.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(ContentStore {
            root: root.to_path_buf(),
        })
    }

    /// Where the verified blob `d` lives.
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    /// Whether the verified blob `d` is present.
    pub fn contains(&self, d: &Digest) -> bool {
        self.blob_path(d).is_file()
    }

    /// The size of blob `d`, if present.
    pub fn size(&self, d: &Digest) -> Option<u64> {
        fs::metadata(self.blob_path(d)).ok().map(|m| m.len())
    }

    /// Opens blob `d` for streaming reads.
    pub fn open_blob(&self, d: &Digest) -> Result<File> {
        File::open(self.blob_path(d)).ctx(|| format!("blob {d}"))
    }

    /// Reads a small blob (manifest, config) whole.
    pub fn read(&self, d: &Digest) -> Result<Vec<u8>> {
        let f = self.open_blob(d)?;
        let mut buf = Vec::new();
        f.take(MAX_SMALL_BLOB + 1)
            .read_to_end(&mut buf)
            .ctx(|| format!("read blob {d}"))?;
        if buf.len() as u64 > MAX_SMALL_BLOB {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!("blob {d}: larger than {MAX_SMALL_BLOB} bytes"),
            ));
        }
        Ok(buf)
    }

    /// Stores `bytes`, checking them against `expected`.
    pub fn put(&self, expected: &Digest, bytes: &[u8]) -> Result<()> {
        if self.contains(expected) {
            return Ok(());
        }
        let mut w = self.ingest(expected, Some(bytes.len() as u64))?;
        w.write(bytes)?;
        w.commit()
    }

    /// Starts writing blob `expected`; nothing is visible until [`Ingest::commit`] verifies it.
    pub fn ingest(&self, expected: &Digest, size: Option<u64>) -> Result<Ingest> {
        let path = self.root.join("ingest").join(format!(
            "{}-{:016x}",
            expected.hex(),
            rand::random::<u64>()
        ));
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .ctx(|| format!("blob {expected}: create ingest file"))
            .name_fs(&path)?;
        Ok(Ingest {
            file: Some(file),
            path,
            target: self.blob_path(expected),
            expected: expected.clone(),
            size,
            written: 0,
            hasher: Hasher::new(),
        })
    }

    /// Removes blob `d`; absent is fine.
    pub fn delete(&self, d: &Digest) -> Result<()> {
        match fs::remove_file(self.blob_path(d)) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::from(e).context(format!("remove blob {d}"))),
        }
    }

    /// Every verified blob's digest.
    pub fn list(&self) -> Result<Vec<Digest>> {
        let dir = self.root.join("blobs/sha256");
        let mut out = Vec::new();
        for e in fs::read_dir(&dir)
            .ctx(|| format!("list {}", dir.display()))?
            .flatten()
        {
            if let Ok(d) = Digest::parse(&format!("sha256:{}", e.file_name().to_string_lossy())) {
                out.push(d);
            }
        }
        Ok(out)
    }

    /// The store's root directory (for usage accounting).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// A blob being written: hashed as it goes, renamed into place only when digest and size match.
/// Dropping it without commit removes the partial file.
pub struct Ingest {
    file: Option<File>,
    path: PathBuf,
    target: PathBuf,
    expected: Digest,
    size: Option<u64>,
    written: u64,
    hasher: Hasher,
}

impl Ingest {
    /// Appends `chunk`. Fails early once more bytes arrive than the descriptor announced.
    pub fn write(&mut self, chunk: &[u8]) -> Result<()> {
        self.written += chunk.len() as u64;
        if let Some(size) = self.size {
            if self.written > size {
                return Err(Error::invalid(format!(
                    "blob {}: more than the {size} bytes its descriptor announced",
                    self.expected
                )));
            }
        }
        self.hasher.update(chunk);
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::internal("ingest already closed"))?;
        file.write_all(chunk)
            .ctx(|| format!("blob {}: write", self.expected))
            .name_fs(&self.path)
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    /// Verifies size and digest, makes the blob durable and visible.
    pub fn commit(mut self) -> Result<()> {
        if let Some(size) = self.size {
            if self.written != size {
                return Err(Error::invalid(format!(
                    "blob {}: got {} bytes, descriptor says {size}",
                    self.expected, self.written
                )));
            }
        }
        let got = std::mem::take(&mut self.hasher).finish();
        if got != self.expected {
            return Err(Error::invalid(format!(
                "blob {}: digest mismatch, content hashes to {got}",
                self.expected
            )));
        }
        let file = self
            .file
            .take()
            .ok_or_else(|| Error::internal("ingest already closed"))?;
        file.sync_all()
            .ctx(|| format!("blob {}: fsync", self.expected))
            .name_fs(&self.path)?;
        drop(file);
        fs::rename(&self.path, &self.target)
            .ctx(|| format!("blob {}: commit", self.expected))
            .name_fs(&self.target)?;
        atomic::sync_parent(&self.target)
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        // Committed ingests were renamed away; this only removes abandoned partial files.
        let _ = fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verified_blob_becomes_visible_and_bad_one_leaves_nothing() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let d = Digest::of(b"layer");
        cs.put(&d, b"layer").expect("put");
        assert!(cs.contains(&d));
        assert_eq!(cs.read(&d).expect("read"), b"layer");

        let wrong = Digest::of(b"other");
        let mut w = cs.ingest(&wrong, None).expect("ingest");
        w.write(b"tampered").expect("write");
        let err = w.commit().expect_err("digest mismatch must fail");
        assert!(err.to_string().contains("digest mismatch"), "{err}");
        assert!(!cs.contains(&wrong));
        assert_eq!(
            fs::read_dir(dir.path().join("ingest")).expect("ls").count(),
            0
        );
    }

    #[test]
    fn a_full_disk_fails_the_ingest_naming_the_file_system_and_leaves_nothing() {
        let name = "a_full_disk_fails_the_ingest_naming_the_file_system_and_leaves_nothing";
        let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
            return;
        };
        let cs = ContentStore::open(fs.path()).expect("open");
        fs.fill();
        let layer = vec![7u8; 32 << 10];
        let d = Digest::of(&layer);
        let e = cs.put(&d, &layer).expect_err("a full disk");
        assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
        assert!(
            e.message()
                .starts_with(&format!("blob {d}: write: no space left")),
            "{e}"
        );
        assert!(e
            .message()
            .contains(&format!("(file system {}, tmpfs", fs.path().display())));
        assert!(!cs.contains(&d));
        assert_eq!(
            fs::read_dir(fs.path().join("ingest")).expect("ls").count(),
            0
        );
        fs.free();
        cs.put(&d, &layer).expect("once freed");
    }

    #[test]
    fn oversize_write_fails_early() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let mut w = cs.ingest(&Digest::of(b"ab"), Some(2)).expect("ingest");
        assert!(w.write(b"abc").is_err());
    }
}
