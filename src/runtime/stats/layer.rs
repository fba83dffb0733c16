//! Disk usage of a container's writable layer: a walk of its upper directory that tolerates files vanishing under it.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// Bytes allocated (what `du` counts: blocks × 512) and inodes used under a directory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUsage {
    /// Allocated bytes.
    pub bytes: u64,
    /// Inodes (the directory itself included; hard links counted once).
    pub inodes: u64,
}

/// Measures `dir` without following symlinks or crossing into other filesystems. Entries that
/// disappear during the walk (a running container deletes files) are skipped; `None` only
/// when `dir` itself cannot be read.
pub fn disk_usage(dir: &Path) -> Option<DiskUsage> {
    let root = std::fs::symlink_metadata(dir).ok()?;
    if !root.is_dir() {
        return None;
    }
    let dev = root.dev();
    let mut usage = DiskUsage {
        bytes: root.blocks() * 512,
        inodes: 1,
    };
    let mut seen = HashSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.dev() != dev {
                continue;
            }
            if !meta.is_dir() && meta.nlink() > 1 && !seen.insert(meta.ino()) {
                continue;
            }
            usage.bytes += meta.blocks() * 512;
            usage.inodes += 1;
            if meta.is_dir() {
                stack.push(path);
            }
        }
    }
    Some(usage)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_blocks_and_inodes_once_per_hard_link() {
        let tmp = tempfile::tempdir().expect("tmp");
        let d = tmp.path().join("upper");
        std::fs::create_dir_all(d.join("a/b")).expect("mkdir");
        let empty = disk_usage(&d).expect("usage");
        assert_eq!(empty.inodes, 3);
        std::fs::write(d.join("a/b/file"), vec![1u8; 1 << 20]).expect("write");
        std::fs::hard_link(d.join("a/b/file"), d.join("a/link")).expect("link");
        std::os::unix::fs::symlink("/etc", d.join("sym")).expect("symlink");
        let u = disk_usage(&d).expect("usage");
        assert_eq!(
            u.inodes, 5,
            "dirs upper, a, b + file (linked twice) + symlink"
        );
        assert!(
            u.bytes >= empty.bytes + (1 << 20) && u.bytes < empty.bytes + (1 << 20) + (64 << 10),
            "{u:?} vs {empty:?}"
        );
        assert_eq!(disk_usage(&tmp.path().join("missing")), None);
        assert_eq!(disk_usage(&d.join("a/b/file")), None);
    }
}
