//! Whole-tree operations on unpacked layers, fd-relative and symlink-safe: removal and disk usage.

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;

use rustix::fs::{fchmod, fstat, openat, statat, unlinkat, AtFlags, Dir, FileType, Mode};
use rustix::io::Errno;

use super::root::DIR_FLAGS;
use crate::error::{Error, Result, ResultExt};

/// Removes `name` in `parent`, whatever it is, without following symlinks. Directories are
/// emptied first and made owner-writable on the way, so read-only (0555) trees go too.
pub(crate) fn remove_at(parent: BorrowedFd<'_>, name: &OsStr) -> rustix::io::Result<()> {
    match unlinkat(parent, name, AtFlags::empty()) {
        Ok(()) | Err(Errno::NOENT) => return Ok(()),
        // Linux answers EISDIR for a directory; some filesystems say EPERM.
        Err(Errno::ISDIR) | Err(Errno::PERM) => {}
        Err(e) => return Err(e),
    }
    let dir = openat(parent, name, DIR_FLAGS, Mode::empty())?;
    empty_dir(&dir)?;
    drop(dir);
    match unlinkat(parent, name, AtFlags::REMOVEDIR) {
        Ok(()) | Err(Errno::NOENT) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Removes every child of the open directory `dir`.
fn empty_dir(dir: &OwnedFd) -> rustix::io::Result<()> {
    let st = fstat(dir)?;
    if st.st_mode & 0o700 != 0o700 {
        // Best effort: root does not need it, and the unlinks below report any real problem.
        let _ = fchmod(dir, Mode::from_raw_mode((st.st_mode | 0o700) & 0o7777));
    }
    for name in child_names(dir.as_fd())? {
        remove_at(dir.as_fd(), &name)?;
    }
    Ok(())
}

/// The names in `dir` (without `.` and `..`), read in full before anything is changed.
fn child_names(dir: BorrowedFd<'_>) -> rustix::io::Result<Vec<OsString>> {
    let mut names = Vec::new();
    let mut it = Dir::read_from(dir)?;
    while let Some(entry) = it.read() {
        let name = entry?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(OsString::from_vec(name));
        }
    }
    Ok(names)
}

/// Removes the tree at `path`; missing is fine.
///
/// `remove_dir_all` first; if it fails (whiteout devices and 0555 directories stop some
/// non-root setups), walk again by fd, making directories writable as we go.
pub(crate) fn remove_tree(path: &Path) -> Result<()> {
    let first = match fs::remove_dir_all(path) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => e,
    };
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return Err(Error::invalid(format!(
            "remove {}: not a removable path",
            path.display()
        )));
    };
    let parent = rustix::fs::open(parent, DIR_FLAGS, Mode::empty())
        .ctx(|| format!("remove {}: open parent", path.display()))?;
    remove_at(parent.as_fd(), name)
        .ctx(|| format!("remove {} (remove_dir_all said: {first})", path.display()))
}

/// Disk usage of the tree at `dir`: bytes in allocated blocks and inodes, each hard-linked
/// inode counted once (as containerd and `du` count).
pub fn disk_usage(dir: &Path) -> Result<(u64, u64)> {
    let fd = rustix::fs::open(dir, DIR_FLAGS, Mode::empty())
        .ctx(|| format!("open {}", dir.display()))?;
    let st = fstat(&fd).ctx(|| format!("stat {}", dir.display()))?;
    let mut acc = Usage {
        bytes: blocks(&st),
        inodes: 1,
        seen: HashSet::new(),
    };
    acc.walk(&fd).ctx(|| format!("measure {}", dir.display()))?;
    Ok((acc.bytes, acc.inodes))
}

struct Usage {
    bytes: u64,
    inodes: u64,
    seen: HashSet<(u64, u64)>,
}

impl Usage {
    fn walk(&mut self, dir: &OwnedFd) -> rustix::io::Result<()> {
        for name in child_names(dir.as_fd())? {
            let st = statat(dir, &name, AtFlags::SYMLINK_NOFOLLOW)?;
            let is_dir = FileType::from_raw_mode(st.st_mode) == FileType::Directory;
            if !is_dir && st.st_nlink > 1 && !self.seen.insert((st.st_dev, st.st_ino)) {
                continue;
            }
            self.bytes += blocks(&st);
            self.inodes += 1;
            if is_dir {
                let child = openat(dir, &name, DIR_FLAGS, Mode::empty())?;
                self.walk(&child)?;
            }
        }
        Ok(())
    }
}

fn blocks(st: &rustix::fs::Stat) -> u64 {
    u64::try_from(st.st_blocks).unwrap_or(0) * 512
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn remove_tree_takes_read_only_dirs_and_leaves_symlink_targets() {
        let tmp = tempfile::tempdir().expect("tempdir");
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).expect("outside");
        fs::write(outside.join("keep"), b"x").expect("keep");
        let tree = tmp.path().join("tree");
        fs::create_dir_all(tree.join("ro/sub")).expect("dirs");
        fs::write(tree.join("ro/sub/f"), b"data").expect("file");
        std::os::unix::fs::symlink(&outside, tree.join("ro/link")).expect("symlink");
        fs::set_permissions(tree.join("ro/sub"), fs::Permissions::from_mode(0o555)).expect("ro");
        fs::set_permissions(tree.join("ro"), fs::Permissions::from_mode(0o555)).expect("ro");
        let parent = rustix::fs::open(tmp.path(), DIR_FLAGS, Mode::empty()).expect("open");
        remove_at(parent.as_fd(), OsStr::new("tree")).expect("remove_at");
        assert!(!tree.exists());
        assert!(
            outside.join("keep").exists(),
            "followed a symlink while removing"
        );
        remove_tree(&tree).expect("missing is fine");
    }

    #[test]
    fn disk_usage_counts_hard_links_once() {
        let tmp = tempfile::tempdir().expect("tempdir");
        fs::write(tmp.path().join("a"), vec![1u8; 10_000]).expect("a");
        fs::hard_link(tmp.path().join("a"), tmp.path().join("b")).expect("link");
        let (bytes, inodes) = disk_usage(tmp.path()).expect("usage");
        assert_eq!(inodes, 2, "root dir + one file");
        assert!(bytes >= 10_000, "{bytes}");
    }
}
