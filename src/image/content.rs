//! Content-addressed blob store: blobs become visible only after their digest and size are verified.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::image::digest::{Digest, Hasher};
use crate::store::atomic;
use crate::store::space::NameFs;

/// Manifests and configs larger than this are refused when read whole.
pub const MAX_SMALL_BLOB: u64 = 8 << 20;

/// Blobs under `<root>/blobs/sha256/<hex>`; scratch writes (manifests, imports) under
/// `<root>/ingest/`; registry downloads under `<root>/partial/<hex>`, kept when interrupted so
/// the next pull resumes them (issue 28 item 3).
#[derive(Debug, Clone)]
pub struct ContentStore {
    root: PathBuf,
}

impl ContentStore {
    /// Opens (creating) the store at `root` and discards the scratch writes a crash left
    /// behind; interrupted downloads stay for [`ContentStore::resume`].
    pub fn open(root: &Path) -> Result<Self> {
        for d in ["blobs/sha256", "ingest", "partial"] {
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
            resumable: false,
        })
    }

    /// Where an interrupted download of blob `d` is kept.
    fn partial_path(&self, d: &Digest) -> PathBuf {
        self.root.join("partial").join(d.hex())
    }

    /// Opens the download of blob `expected` (`size` bytes) where an earlier one stopped: the
    /// bytes it stored are hashed again and writing goes on after them. Blocking (reads the
    /// partial file). Dropped uncommitted, the ingest keeps its bytes for the next resume,
    /// unless [`Ingest::restart`] dropped them or [`Ingest::commit`] found them wrong.
    pub fn resume(&self, expected: &Digest, size: u64) -> Result<Ingest> {
        let path = self.partial_path(expected);
        let what = || format!("blob {expected}: partial download {}", path.display());
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ctx(what)?;
        let len = file.metadata().ctx(what)?.len();
        let mut hasher = Hasher::new();
        let mut written = 0u64;
        if len <= size {
            let mut buf = vec![0u8; 1 << 20];
            let mut from = (&file).take(len);
            loop {
                let n = from.read(&mut buf).ctx(what)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                written += n as u64;
            }
        }
        if written != len {
            // Longer than the blob: not a prefix of it.
            (hasher, written) = (Hasher::new(), 0);
        }
        file.set_len(written).ctx(what)?;
        file.seek(SeekFrom::Start(written)).ctx(what)?;
        Ok(Ingest {
            file: Some(file),
            path,
            target: self.blob_path(expected),
            expected: expected.clone(),
            size: Some(size),
            written,
            hasher,
            resumable: true,
        })
    }

    /// Removes interrupted downloads last written more than `grace` ago, and those of blobs
    /// stored since; the number removed.
    pub fn remove_stale_partials(&self, grace: Duration) -> usize {
        let Ok(rd) = fs::read_dir(self.root.join("partial")) else {
            return 0;
        };
        let mut removed = 0;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let stored = Digest::parse(&format!("sha256:{name}")).is_ok_and(|d| self.contains(&d));
            let stale = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_none_or(|age| age > grace);
            if (stored || stale) && fs::remove_file(e.path()).is_ok() {
                removed += 1;
            }
        }
        removed
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

    /// Stores the next `size` bytes of `r` as a blob, whatever they hash to, and returns their
    /// digest: archive entries no descriptor names yet (a docker-archive's layers and configs).
    /// Fewer bytes than `size` store nothing.
    pub fn put_reader(&self, r: &mut dyn Read, size: u64) -> Result<Digest> {
        /// The scratch file, removed unless it became the blob.
        struct Scratch(PathBuf);
        impl Drop for Scratch {
            fn drop(&mut self) {
                let _ = fs::remove_file(&self.0);
            }
        }
        let scratch = Scratch(
            self.root
                .join("ingest")
                .join(format!("unnamed-{:016x}", rand::random::<u64>())),
        );
        let mut file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&scratch.0)
            .ctx(|| format!("create {}", scratch.0.display()))
            .name_fs(&scratch.0)?;
        let mut hasher = Hasher::new();
        let mut buf = vec![0u8; 1 << 20];
        let mut left = size;
        while left > 0 {
            let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = r.read(&mut buf[..want])?;
            if n == 0 {
                return Err(Error::invalid(format!(
                    "blob of {size} bytes: input ended after {}",
                    size - left
                )));
            }
            hasher.update(&buf[..n]);
            file.write_all(&buf[..n])
                .ctx(|| format!("write {}", scratch.0.display()))
                .name_fs(&scratch.0)?;
            left -= n as u64;
        }
        let digest = hasher.finish();
        if self.contains(&digest) {
            return Ok(digest);
        }
        file.sync_all()
            .ctx(|| format!("blob {digest}: fsync"))
            .name_fs(&scratch.0)?;
        drop(file);
        let target = self.blob_path(&digest);
        fs::rename(&scratch.0, &target)
            .ctx(|| format!("blob {digest}: commit"))
            .name_fs(&target)?;
        atomic::sync_parent(&target)?;
        Ok(digest)
    }

    /// The store's root directory (for usage accounting).
    pub fn root(&self) -> &Path {
        &self.root
    }
}

/// A blob being written: hashed as it goes, renamed into place only when digest and size match.
/// Dropping it without commit removes the partial file, unless it is a resumable download
/// ([`ContentStore::resume`]) that holds some bytes.
pub struct Ingest {
    file: Option<File>,
    path: PathBuf,
    target: PathBuf,
    expected: Digest,
    size: Option<u64>,
    written: u64,
    hasher: Hasher,
    resumable: bool,
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

    /// Drops what was written so far: writing starts again at byte 0 (a registry that
    /// ignored a range, or sent bytes that do not hash to the digest).
    pub fn restart(&mut self) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::internal("ingest already closed"))?;
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)).map(drop))
            .ctx(|| format!("blob {}: truncate", self.expected))?;
        self.written = 0;
        self.hasher = Hasher::new();
        Ok(())
    }

    /// Checks size and digest of what was written, without committing.
    pub fn verify(&self) -> Result<()> {
        if let Some(size) = self.size {
            if self.written != size {
                return Err(Error::invalid(format!(
                    "blob {}: got {} bytes, descriptor says {size}",
                    self.expected, self.written
                )));
            }
        }
        let got = self.hasher.clone().finish();
        if got != self.expected {
            return Err(Error::invalid(format!(
                "blob {}: digest mismatch, content hashes to {got}",
                self.expected
            )));
        }
        Ok(())
    }

    /// Verifies size and digest, makes the blob durable and visible.
    pub fn commit(mut self) -> Result<()> {
        if let Err(e) = self.verify() {
            // Bytes that do not make the blob are no start for another download.
            self.resumable = false;
            return Err(e);
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
        if !self.resumable || self.written == 0 || self.file.is_none() {
            let _ = fs::remove_file(&self.path);
        }
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
    fn a_resumed_ingest_hashes_again_what_was_stored_and_goes_on() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let d = Digest::of(b"hello world");
        let mut w = cs.resume(&d, 11).expect("resume");
        w.write(b"hello ").expect("write");
        drop(w);
        // Kept across a restart of the store, unlike scratch ingests.
        let cs = ContentStore::open(dir.path()).expect("reopen");
        let mut w = cs.resume(&d, 11).expect("resume again");
        assert_eq!(w.written(), 6);
        w.write(b"world").expect("write");
        w.commit().expect("commit");
        assert_eq!(cs.read(&d).expect("read"), b"hello world");
        assert_eq!(
            fs::read_dir(dir.path().join("partial"))
                .expect("ls")
                .count(),
            0
        );
    }

    #[test]
    fn a_blob_of_unknown_digest_is_stored_under_what_it_hashes_to() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let mut input: &[u8] = b"layer bytes and more";
        let d = cs.put_reader(&mut input, 11).expect("put");
        assert_eq!(d, Digest::of(b"layer bytes"));
        assert_eq!(cs.read(&d).expect("read"), b"layer bytes");
        assert_eq!(input, b" and more", "only `size` bytes are taken");
        let again = cs.put_reader(&mut &b"layer bytes"[..], 11).expect("again");
        assert_eq!(again, d);
        let e = cs
            .put_reader(&mut &b"short"[..], 11)
            .expect_err("short input");
        assert!(e.to_string().contains("ended after 5"), "{e}");
        assert_eq!(cs.list().expect("list"), [d]);
        assert_eq!(
            fs::read_dir(dir.path().join("ingest")).expect("ls").count(),
            0
        );
    }

    #[test]
    fn restart_and_failed_verification_leave_no_partial_bytes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let d = Digest::of(b"abcd");
        let partial = dir.path().join("partial").join(d.hex());
        // Longer than the blob: not a prefix of it, so the resume starts at 0.
        fs::write(&partial, b"abcdef").expect("write");
        let mut w = cs.resume(&d, 4).expect("resume");
        assert_eq!(w.written(), 0);
        w.write(b"abXX").expect("write");
        assert!(w.verify().is_err());
        w.restart().expect("restart");
        assert_eq!(w.written(), 0);
        drop(w);
        assert!(!partial.exists(), "an empty partial is not kept");
        let mut w = cs.resume(&d, 4).expect("resume");
        w.write(b"abXX").expect("write");
        assert!(w.commit().is_err());
        assert!(
            !partial.exists(),
            "bytes that failed the digest are not kept"
        );
        assert!(!cs.contains(&d));
    }

    #[test]
    fn stale_partials_and_those_of_stored_blobs_are_removed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let (fresh, old, done) = (Digest::of(b"1"), Digest::of(b"2"), Digest::of(b"3"));
        for d in [&fresh, &old, &done] {
            fs::write(dir.path().join("partial").join(d.hex()), b"x").expect("write");
        }
        File::options()
            .write(true)
            .open(dir.path().join("partial").join(old.hex()))
            .and_then(|f| f.set_modified(std::time::SystemTime::now() - Duration::from_secs(7200)))
            .expect("age");
        cs.put(&done, b"3").expect("put");
        assert_eq!(cs.remove_stale_partials(Duration::from_secs(3600)), 2);
        let left: Vec<_> = fs::read_dir(dir.path().join("partial"))
            .expect("ls")
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(left, [fresh.hex().to_string()]);
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
