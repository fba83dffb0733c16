//! Per-chain-id layer snapshots: each layer unpacked once into its own overlay lowerdir.

use std::fs::{self, File};
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use rustix::fs::{renameat, renameat_with, RenameFlags};
use rustix::io::Errno;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, ResultExt};
use crate::image::digest::Digest;
use crate::image::manifest::layer_compression;
use crate::image::unpack::{self, decompress, disk_usage, remove_tree, DigestReader};
use crate::store::atomic::{sync_dir, write_json};
use crate::store::space::NameFs;

/// Prefix of in-progress (unpack) and condemned (remove) directories under the root.
const TMP_PREFIX: &str = ".tmp-";
/// The layer's own files inside a snapshot directory.
const FS_DIR: &str = "fs";
/// The stored [`SnapshotUsage`]; its presence marks a complete snapshot.
const USAGE_FILE: &str = "usage.json";

/// Bounds on what one layer may contain; over any of them the unpack fails ResourceExhausted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnpackLimits {
    /// Most content bytes (the sum of member sizes) in one layer.
    pub max_layer_bytes: u64,
    /// Most members (files, dirs, links, ...) in one layer.
    pub max_entries: u64,
    /// Longest member name and symlink target, in bytes.
    pub max_path_len: usize,
}

impl Default for UnpackLimits {
    /// 64 GiB, 2 000 000 entries, 4096-byte paths.
    fn default() -> Self {
        UnpackLimits {
            max_layer_bytes: 64 << 30,
            max_entries: 2_000_000,
            max_path_len: 4096,
        }
    }
}

/// One layer blob to unpack, as the manifest and image config describe it.
#[derive(Debug, Clone, Copy)]
pub struct LayerSource<'a> {
    /// The blob file in the content store.
    pub blob: &'a Path,
    /// The manifest's media type (decides the decompression).
    pub media_type: &'a str,
    /// The blob's digest, used to name the layer in errors.
    pub digest: &'a Digest,
    /// The sha256 of the uncompressed tar, from the image config's `rootfs.diff_ids`.
    pub diff_id: &'a Digest,
}

/// Disk space taken by one snapshot (hard-linked inodes counted once).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotUsage {
    /// Bytes in allocated blocks.
    pub bytes: u64,
    /// Inodes, the snapshot's root directory included.
    pub inodes: u64,
}

/// The snapshot store: `<root>/<chain id hex>/{fs/,usage.json}`.
#[derive(Debug)]
pub struct Snapshots {
    root: PathBuf,
    limits: UnpackLimits,
}

impl Snapshots {
    /// Opens (creating) the store at `root` and removes temp dirs a crash left behind.
    pub fn open(root: &Path, limits: UnpackLimits) -> Result<Self> {
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(root)
            .ctx(|| format!("create snapshot root {}", root.display()))?;
        let entries = fs::read_dir(root).ctx(|| format!("list {}", root.display()))?;
        for entry in entries {
            let entry = entry.ctx(|| format!("list {}", root.display()))?;
            if entry.file_name().to_string_lossy().starts_with(TMP_PREFIX) {
                tracing::info!(path = %entry.path().display(), "removing leftover snapshot temp dir");
                remove_tree(&entry.path())?;
            }
        }
        Ok(Snapshots {
            root: root.to_path_buf(),
            limits,
        })
    }

    /// OCI chain ids: `chain[0] = diff[0]`, `chain[i] = sha256(chain[i-1] + " " + diff[i])`.
    pub fn chain_ids(diff_ids: &[Digest]) -> Vec<Digest> {
        let mut out: Vec<Digest> = Vec::with_capacity(diff_ids.len());
        for diff in diff_ids {
            let next = match out.last() {
                None => diff.clone(),
                Some(prev) => Digest::of(format!("{prev} {diff}").as_bytes()),
            };
            out.push(next);
        }
        out
    }

    /// Whether the snapshot for `chain_id` is complete.
    pub fn exists(&self, chain_id: &Digest) -> bool {
        self.dir(chain_id).join(USAGE_FILE).is_file()
    }

    /// `<root>/<hex>/fs`: the layer's own files, to be stacked as an overlay lowerdir.
    pub fn fs_path(&self, chain_id: &Digest) -> PathBuf {
        self.dir(chain_id).join(FS_DIR)
    }

    /// Unpacks `layer` as the snapshot `chain_id` unless it exists already (then its stored
    /// usage is returned). Blocking: call it from a blocking thread.
    ///
    /// The layer is written into a fresh temp dir, its diff id checked, its usage recorded,
    /// then the dir is renamed into place. Any failure leaves nothing behind. Concurrent calls
    /// for one chain id all succeed; the first rename wins and the others discard their copy.
    pub fn unpack(&self, chain_id: &Digest, layer: LayerSource<'_>) -> Result<SnapshotUsage> {
        if let Some(usage) = self.usage(chain_id) {
            return Ok(usage);
        }
        let tmp_name = format!(
            "{TMP_PREFIX}{}-{:016x}",
            chain_id.hex(),
            rand::random::<u64>()
        );
        let mut tmp = TempDir {
            path: self.root.join(&tmp_name),
            keep: false,
        };
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&tmp.path)
            .ctx(|| format!("layer {}: create {}", layer.digest, tmp.path.display()))
            .name_fs(&self.root)?;
        let usage = self
            .unpack_into(&tmp.path, layer)
            .map_err(|e| e.context(format!("layer {}", layer.digest)))
            .name_fs(&self.root)?;
        let root = File::open(&self.root).ctx(|| format!("open {}", self.root.display()))?;
        let hex = chain_id.hex();
        let published = match renameat_with(&root, &tmp_name, &root, hex, RenameFlags::NOREPLACE) {
            // No RENAME_NOREPLACE here: a plain rename still cannot replace a complete
            // snapshot, since renaming a directory over a non-empty one fails.
            Err(Errno::INVAL) => renameat(&root, &tmp_name, &root, hex),
            other => other,
        };
        match published {
            Ok(()) => {
                tmp.keep = true;
                sync_dir(&self.root)?;
                let (bytes, inodes) = (usage.bytes, usage.inodes);
                tracing::debug!(%chain_id, layer = %layer.digest, bytes, inodes, "snapshot unpacked");
                Ok(usage)
            }
            Err(Errno::EXIST) | Err(Errno::NOTEMPTY) => {
                drop(tmp);
                self.usage(chain_id).ok_or_else(|| {
                    Error::internal(format!(
                        "snapshot {chain_id}: appeared without its {USAGE_FILE}"
                    ))
                })
            }
            Err(e) => {
                Err(Error::from(e).context(format!("snapshot {chain_id}: publish {tmp_name}")))
                    .name_fs(&self.root)
            }
        }
    }

    /// Decompresses, applies and verifies one layer into `tmp`, then records its usage there.
    fn unpack_into(&self, tmp: &Path, layer: LayerSource<'_>) -> Result<SnapshotUsage> {
        let compression = layer_compression(layer.media_type)?;
        let blob = File::open(layer.blob).ctx(|| format!("open blob {}", layer.blob.display()))?;
        let mut reader = DigestReader::new(decompress(blob, compression)?);
        let fs_dir = tmp.join(FS_DIR);
        fs::create_dir(&fs_dir).ctx(|| format!("create {}", fs_dir.display()))?;
        let stats = unpack::apply(&mut reader, &fs_dir, &self.limits)?;
        let (diff_id, len) = reader.finish();
        if diff_id != *layer.diff_id {
            return Err(Error::invalid(format!(
                "diff id mismatch: config says {}, the {len}-byte tar is {diff_id}",
                layer.diff_id
            )));
        }
        let (bytes, inodes) = disk_usage(&fs_dir)?;
        let usage = SnapshotUsage { bytes, inodes };
        // Make every file durable before the rename publishes the snapshot as complete.
        let fd = File::open(&fs_dir).ctx(|| format!("open {}", fs_dir.display()))?;
        rustix::fs::syncfs(&fd).ctx(|| format!("syncfs {}", fs_dir.display()))?;
        write_json(&tmp.join(USAGE_FILE), &usage)?;
        tracing::trace!(layer = %layer.digest, ?stats, "layer applied");
        Ok(usage)
    }

    /// The stored usage of a complete snapshot.
    pub fn usage(&self, chain_id: &Digest) -> Option<SnapshotUsage> {
        let bytes = fs::read(self.dir(chain_id).join(USAGE_FILE)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Removes a snapshot; a missing one is fine. It disappears atomically (renamed to a temp
    /// name first), then its tree is deleted, read-only dirs and whiteout devices included.
    pub fn remove(&self, chain_id: &Digest) -> Result<()> {
        let dir = self.dir(chain_id);
        let doomed = self.root.join(format!(
            "{TMP_PREFIX}{}-rm-{:016x}",
            chain_id.hex(),
            rand::random::<u64>()
        ));
        match fs::rename(&dir, &doomed) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::from(e).context(format!("snapshot {chain_id}: remove"))),
        }
        sync_dir(&self.root)?;
        remove_tree(&doomed).map_err(|e| e.context(format!("snapshot {chain_id}")))
    }

    /// The chain ids of all complete snapshots, sorted.
    pub fn list(&self) -> Result<Vec<Digest>> {
        let mut out = Vec::new();
        for entry in fs::read_dir(&self.root).ctx(|| format!("list {}", self.root.display()))? {
            let entry = entry.ctx(|| format!("list {}", self.root.display()))?;
            let name = entry.file_name();
            let Some(Ok(digest)) = name
                .to_str()
                .map(|hex| Digest::parse(&format!("sha256:{hex}")))
            else {
                continue;
            };
            if self.exists(&digest) {
                out.push(digest);
            }
        }
        out.sort();
        Ok(out)
    }

    fn dir(&self, chain_id: &Digest) -> PathBuf {
        self.root.join(chain_id.hex())
    }
}

/// A temp snapshot dir, removed on drop unless kept.
struct TempDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if !self.keep {
            if let Err(e) = remove_tree(&self.path) {
                tracing::warn!(path = %self.path.display(), error = %e, "could not remove temp snapshot dir");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::image::manifest::media;
    use crate::image::unpack::tests::{names, Fixture, TarBall};
    use std::io::Write;
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    use std::sync::Arc;

    fn sample() -> Vec<u8> {
        TarBall::new()
            .dir("etc/", 0o755)
            .file("etc/hostname", b"bosun\n")
            .finish()
    }

    #[test]
    fn chain_ids_follow_the_oci_recipe() {
        let d: Vec<Digest> = [&b"one"[..], b"two", b"six"]
            .iter()
            .map(|b| Digest::of(b))
            .collect();
        let chain = Snapshots::chain_ids(&d);
        let c1 = Digest::of(format!("{} {}", d[0], d[1]).as_bytes());
        let c2 = Digest::of(format!("{} {}", c1, d[2]).as_bytes());
        assert_eq!(chain, vec![d[0].clone(), c1, c2]);
        // A fixed vector (computed with `printf '%s %s' ... | sha256sum`).
        let fixed = Snapshots::chain_ids(&[Digest::of(b""), Digest::of(b"a"), Digest::of(b"")]);
        let hex: Vec<&str> = fixed.iter().map(Digest::hex).collect();
        assert_eq!(
            hex,
            [
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "54310b28337ccdbb5477f2808753d5b0e7c87d84187cee28a330a3e71f6c16fc",
                "4aced3213a08ba8e311270735b960ee9566172642f3d829a8ce5ea471cb67f2c",
            ]
        );
        assert!(Snapshots::chain_ids(&[]).is_empty());
    }

    #[test]
    fn plain_gzip_and_zstd_layers_unpack_alike() {
        let fx = Fixture::new();
        let tar = sample();
        let diff_id = Digest::of(&tar);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).expect("gzip");
        let gz = gz.finish().expect("gzip");
        let zst = zstd::encode_all(&tar[..], 3).expect("zstd");
        let plain = fx
            .unpack_as(&tar, media::OCI_LAYER, &diff_id)
            .1
            .expect("plain");
        fx.snaps.remove(&diff_id).expect("remove");
        let gzip = fx
            .unpack_as(&gz, media::DOCKER_LAYER_GZIP, &diff_id)
            .1
            .expect("gzip");
        fx.snaps.remove(&diff_id).expect("remove");
        let zstd = fx
            .unpack_as(&zst, media::OCI_LAYER_ZSTD, &diff_id)
            .1
            .expect("zstd");
        assert_eq!(plain.inodes, 3);
        assert_eq!((plain.inodes, gzip.inodes), (zstd.inodes, zstd.inodes));
        let hostname = fx.snaps.fs_path(&diff_id).join("etc/hostname");
        assert_eq!(fs::read(hostname).expect("hostname"), b"bosun\n");
        assert_eq!(fx.snaps.usage(&diff_id), Some(zstd));
        fx.snaps.remove(&diff_id).expect("remove");
        let err = fx
            .unpack_as(&tar, "application/x-rar", &diff_id)
            .1
            .expect_err("media type");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(names(&fx.root).is_empty());
        fx.assert_contained();
    }

    #[test]
    fn unpack_is_idempotent() {
        let fx = Fixture::new();
        let tar = sample();
        let (chain, first) = fx.unpack(&tar);
        let first = first.expect("first");
        // The second call must not even read the blob.
        let missing = fx.tmp.path().join("no-such-blob");
        let digest = Digest::of(&tar);
        let layer = LayerSource {
            blob: &missing,
            media_type: media::OCI_LAYER,
            digest: &digest,
            diff_id: &digest,
        };
        assert_eq!(fx.snaps.unpack(&chain, layer).expect("second"), first);
        assert_eq!(fx.snaps.list().expect("list"), vec![chain]);
    }

    #[test]
    fn concurrent_unpacks_of_one_chain_id_both_succeed() {
        let fx = Arc::new(Fixture::new());
        let mut tar = TarBall::new();
        for i in 0..200 {
            tar.file(&format!("d/f{i}"), &[i as u8; 3000]);
        }
        let tar = tar.finish();
        let digest = Digest::of(&tar);
        let blob = fx.tmp.path().join("blobs/layer.tar");
        fs::write(&blob, &tar).expect("blob");
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (fx, blob, digest) = (Arc::clone(&fx), blob.clone(), digest.clone());
                std::thread::spawn(move || {
                    let layer = LayerSource {
                        blob: &blob,
                        media_type: media::OCI_LAYER,
                        digest: &digest,
                        diff_id: &digest,
                    };
                    fx.snaps.unpack(&digest, layer)
                })
            })
            .collect();
        let results: Vec<_> = threads
            .into_iter()
            .map(|t| t.join().expect("join"))
            .collect();
        let first = results[0].clone().expect("unpack");
        for r in results {
            assert_eq!(r.expect("unpack"), first);
        }
        assert_eq!(names(&fx.root), vec![digest.hex().to_string()]);
        fx.assert_contained();
    }

    #[test]
    fn remove_takes_whiteouts_and_read_only_dirs() {
        let fx = Fixture::new();
        let tar = TarBall::new()
            .dir("ro/", 0o555)
            .dir("ro/deeper/", 0o500)
            .file("ro/deeper/f", b"x")
            .file("ro/.wh.gone", b"")
            .finish();
        let (chain, res) = fx.unpack(&tar);
        res.expect("unpack");
        let fs_dir = fx.snaps.fs_path(&chain);
        assert!(fs::symlink_metadata(fs_dir.join("ro/gone"))
            .expect("wh")
            .file_type()
            .is_char_device());
        assert_eq!(
            fs::metadata(fs_dir.join("ro"))
                .expect("ro")
                .permissions()
                .mode()
                & 0o777,
            0o555
        );
        fx.snaps.remove(&chain).expect("remove");
        assert!(!fx.snaps.exists(&chain));
        assert!(names(&fx.root).is_empty());
        fx.snaps
            .remove(&chain)
            .expect("removing a missing snapshot is fine");
    }

    #[test]
    fn open_removes_what_a_crash_left() {
        let fx = Fixture::new();
        let crashed = fx.root.join(".tmp-abc-0000/fs/ro");
        fs::create_dir_all(&crashed).expect("crashed");
        fs::set_permissions(&crashed, fs::Permissions::from_mode(0o555)).expect("ro");
        let (chain, res) = fx.unpack(&sample());
        res.expect("unpack");
        let again = Snapshots::open(&fx.root, UnpackLimits::default()).expect("reopen");
        assert_eq!(names(&fx.root), vec![chain.hex().to_string()]);
        assert_eq!(again.list().expect("list"), vec![chain]);
    }
}
