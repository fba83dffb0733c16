//! Disk usage of the image store (blobs + snapshots) kept up to date without walking trees per call.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::error::Result;
use crate::image::content::ContentStore;
use crate::image::snapshot::Snapshots;

/// A filesystem usage reading, as ImageFsInfo reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    /// When it was taken (unix ns).
    pub timestamp_ns: i64,
    /// A directory on the filesystem in question.
    pub mountpoint: PathBuf,
    /// Bytes used on disk (allocated blocks).
    pub used_bytes: u64,
    /// Inodes used.
    pub inodes_used: u64,
}

/// Blob usage is re-read from the (flat) blob directory after each change; snapshot usage is
/// recorded at unpack time and summed, since walking snapshot trees would be slow.
#[derive(Debug)]
pub struct UsageTracker {
    content: Mutex<(u64, u64)>,
    snap_bytes: AtomicU64,
    snap_inodes: AtomicU64,
}

/// Bytes allocated for `meta` (what `du` counts).
pub fn disk_bytes(meta: &std::fs::Metadata) -> u64 {
    use std::os::unix::fs::MetadataExt;
    meta.blocks() * 512
}

fn content_usage(content: &ContentStore) -> (u64, u64) {
    let mut bytes = 0;
    let mut inodes = 0;
    if let Ok(list) = content.list() {
        for d in list {
            if let Ok(m) = std::fs::symlink_metadata(content.blob_path(&d)) {
                bytes += disk_bytes(&m);
                inodes += 1;
            }
        }
    }
    (bytes, inodes)
}

impl UsageTracker {
    /// Reads the current usage of both stores.
    pub fn new(content: &ContentStore, snapshots: &Snapshots) -> Result<Self> {
        let (mut sb, mut si) = (0, 0);
        for c in snapshots.list()? {
            if let Some(u) = snapshots.usage(&c) {
                sb += u.bytes;
                si += u.inodes;
            }
        }
        Ok(UsageTracker {
            content: Mutex::new(content_usage(content)),
            snap_bytes: AtomicU64::new(sb),
            snap_inodes: AtomicU64::new(si),
        })
    }

    /// Re-reads blob usage (after a pull, import or GC).
    pub fn refresh_content(&self, content: &ContentStore) {
        let u = content_usage(content);
        *self.content.lock().unwrap_or_else(|p| p.into_inner()) = u;
    }

    /// Accounts a new snapshot.
    pub fn add_snapshot(&self, bytes: u64, inodes: u64) {
        self.snap_bytes.fetch_add(bytes, Ordering::Relaxed);
        self.snap_inodes.fetch_add(inodes, Ordering::Relaxed);
    }

    /// Accounts a removed snapshot.
    pub fn remove_snapshot(&self, bytes: u64, inodes: u64) {
        let _ = self
            .snap_bytes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(bytes))
            });
        let _ = self
            .snap_inodes
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| {
                Some(v.saturating_sub(inodes))
            });
    }

    /// The current reading.
    pub fn snapshot(&self, mountpoint: &Path) -> FsUsage {
        let (cb, ci) = *self.content.lock().unwrap_or_else(|p| p.into_inner());
        FsUsage {
            timestamp_ns: crate::image::index::now_ns(),
            mountpoint: mountpoint.to_path_buf(),
            used_bytes: cb + self.snap_bytes.load(Ordering::Relaxed),
            inodes_used: ci + self.snap_inodes.load(Ordering::Relaxed),
        }
    }
}
