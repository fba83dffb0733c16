//! Test support for unpacking: a raw tar writer that allows hostile names, and a sandbox fixture.

mod content;
mod gnutar;
mod hostile;

use std::fs;
use std::path::{Path, PathBuf};

use tar::{EntryType, Header};

use crate::error::Result;
use crate::image::digest::Digest;
use crate::image::manifest::media;
use crate::image::snapshot::{LayerSource, SnapshotUsage, Snapshots, UnpackLimits};

/// Fixed mtime given to members unless a test says otherwise.
pub(crate) const MTIME: u64 = 1_600_000_000;

/// Builds tar bytes header by header, writing names raw so `..` and `/` survive.
#[derive(Default)]
pub(crate) struct TarBall {
    buf: Vec<u8>,
}

impl TarBall {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Appends one member; `edit` may change the header before the checksum is set.
    pub(crate) fn raw(
        &mut self,
        name: &str,
        kind: EntryType,
        data: &[u8],
        edit: impl FnOnce(&mut Header),
    ) -> &mut Self {
        // The tar crate insists on a GNU header for GNU sparse members.
        let mut h = if kind == EntryType::GNUSparse {
            Header::new_gnu()
        } else {
            Header::new_ustar()
        };
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        h.set_entry_type(kind);
        h.set_size(data.len() as u64);
        h.set_mode(if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(MTIME);
        edit(&mut h);
        h.set_cksum();
        self.buf.extend_from_slice(h.as_bytes());
        self.append_data(data);
        self
    }

    fn append_data(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.buf.extend(std::iter::repeat_n(0u8, pad));
    }

    pub(crate) fn file(&mut self, name: &str, data: &[u8]) -> &mut Self {
        self.raw(name, EntryType::Regular, data, |_| {})
    }

    pub(crate) fn dir(&mut self, name: &str, mode: u32) -> &mut Self {
        self.raw(name, EntryType::Directory, b"", |h| h.set_mode(mode))
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(name, EntryType::Symlink, b"", |h| set_link(h, target))
    }

    pub(crate) fn hardlink(&mut self, name: &str, target: &str) -> &mut Self {
        self.raw(name, EntryType::Link, b"", |h| set_link(h, target))
    }

    pub(crate) fn device(
        &mut self,
        name: &str,
        kind: EntryType,
        major: u32,
        minor: u32,
    ) -> &mut Self {
        self.raw(name, kind, b"", |h| {
            h.set_device_major(major).expect("major");
            h.set_device_minor(minor).expect("minor");
        })
    }

    /// A PAX extended header (`x`) describing the next member.
    pub(crate) fn pax(&mut self, records: &[(&str, &[u8])]) -> &mut Self {
        let mut data = Vec::new();
        for (key, value) in records {
            let body = 1 + key.len() + 1 + value.len() + 1; // " key=value\n"
            let mut len = body + body.to_string().len();
            if len.to_string().len() + body != len {
                len += 1;
            }
            data.extend_from_slice(format!("{len} {key}=").as_bytes());
            data.extend_from_slice(value);
            data.push(b'\n');
        }
        self.raw("PaxHeader", EntryType::XHeader, &data, |_| {})
    }

    /// The archive with its two zero end blocks.
    pub(crate) fn finish(&self) -> Vec<u8> {
        let mut out = self.buf.clone();
        out.extend(std::iter::repeat_n(0u8, 1024));
        out
    }
}

fn set_link(h: &mut Header, target: &str) {
    h.as_old_mut().linkname[..target.len()].copy_from_slice(target.as_bytes());
}

/// A temp dir holding a snapshot root next to sentinels a hostile layer must not touch:
/// `<tmp>/{snapshots/, outside-dir/ (empty), outside-file ("keep"), blobs/}`.
pub(crate) struct Fixture {
    pub(crate) tmp: tempfile::TempDir,
    pub(crate) root: PathBuf,
    pub(crate) snaps: Snapshots,
    pub(crate) outside_dir: PathBuf,
    pub(crate) outside_file: PathBuf,
}

impl Fixture {
    pub(crate) fn new() -> Self {
        Self::with_limits(UnpackLimits::default())
    }

    pub(crate) fn with_limits(limits: UnpackLimits) -> Self {
        let tmp = tempfile::tempdir().expect("tempdir");
        let root = tmp.path().join("snapshots");
        let outside_dir = tmp.path().join("outside-dir");
        let outside_file = tmp.path().join("outside-file");
        fs::create_dir(&outside_dir).expect("outside dir");
        fs::write(&outside_file, b"keep").expect("outside file");
        fs::create_dir(tmp.path().join("blobs")).expect("blobs");
        let snaps = Snapshots::open(&root, limits).expect("open snapshots");
        Fixture {
            tmp,
            root,
            snaps,
            outside_dir,
            outside_file,
        }
    }

    /// Stores `blob` and unpacks it as a one-layer image whose diff id is `diff_id`.
    pub(crate) fn unpack_as(
        &self,
        blob: &[u8],
        media_type: &str,
        diff_id: &Digest,
    ) -> (Digest, Result<SnapshotUsage>) {
        let digest = Digest::of(blob);
        let path = self.tmp.path().join("blobs").join(digest.hex());
        fs::write(&path, blob).expect("write blob");
        let chain = Snapshots::chain_ids(std::slice::from_ref(diff_id)).remove(0);
        let layer = LayerSource {
            blob: &path,
            media_type,
            digest: &digest,
            diff_id,
        };
        let res = self.snaps.unpack(&chain, layer);
        (chain, res)
    }

    /// Unpacks an uncompressed tar with its true diff id.
    pub(crate) fn unpack(&self, tar: &[u8]) -> (Digest, Result<SnapshotUsage>) {
        self.unpack_as(tar, media::OCI_LAYER, &Digest::of(tar))
    }

    /// Unpacks `tar`, expecting success; returns the snapshot's fs dir.
    pub(crate) fn unpack_ok(&self, tar: &[u8]) -> PathBuf {
        let (chain, res) = self.unpack(tar);
        res.expect("unpack");
        self.assert_contained();
        self.snaps.fs_path(&chain)
    }

    /// Unpacks `tar`, expecting failure; checks nothing was left or escaped and returns the
    /// error message.
    pub(crate) fn unpack_err(&self, tar: &[u8], kind: crate::error::ErrorKind) -> String {
        let (chain, res) = self.unpack(tar);
        let err = res.expect_err("unpack must fail");
        assert_eq!(err.kind(), kind, "{err}");
        assert!(
            !self.snaps.exists(&chain),
            "a failed unpack left a snapshot"
        );
        assert_eq!(
            names(&self.root),
            Vec::<String>::new(),
            "a failed unpack left files in the root"
        );
        self.assert_contained();
        let msg = err.to_string();
        assert!(msg.starts_with("layer sha256:"), "{msg}");
        msg
    }

    /// Nothing outside the snapshot root changed.
    pub(crate) fn assert_contained(&self) {
        assert_eq!(
            names(&self.outside_dir),
            Vec::<String>::new(),
            "something landed in the sentinel dir"
        );
        assert_eq!(fs::read(&self.outside_file).expect("sentinel"), b"keep");
        assert_eq!(
            names(self.tmp.path()),
            ["blobs", "outside-dir", "outside-file", "snapshots"]
        );
        let leftovers: Vec<_> = names(&self.root)
            .into_iter()
            .filter(|n| n.starts_with(".tmp-"))
            .collect();
        assert!(leftovers.is_empty(), "temp dirs left: {leftovers:?}");
    }
}

/// Sorted names in `dir`.
pub(crate) fn names(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    out.sort();
    out
}

/// The value of xattr `name` on `path` (not following symlinks), if set.
pub(crate) fn xattr(path: &Path, name: &str) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 256];
    let n = rustix::fs::lgetxattr(path, name, &mut buf[..]).ok()?;
    buf.truncate(n);
    Some(buf)
}
