//! Full file systems named in errors: the mount a path is on, its type and free space (issue 28).

// A write that fails with ENOSPC or EDQUOT is an `ErrorKind::NoSpace` error (the io conversion
// does that); each place that writes names the file system it wrote to, so the caller reads
// which disk to clean, e.g. `image "busybox": layer sha256:…: write: no space left on device
// (file system /var/lib/bosun, ext4: 12 KiB of 20.0 GiB free)`.

use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, CWD};

use crate::error::{Error, ErrorKind, Result};

/// What a message says once its file system is named (so it is named once).
const NAMED: &str = " (file system ";

/// `e` with the file system holding `path` named (mount point, type, free of total space)
/// when `e` is a full-disk error that names none yet; any other error unchanged.
pub fn name_fs(e: Error, path: &Path) -> Error {
    if e.kind() != ErrorKind::NoSpace || e.message().contains(NAMED) {
        return e;
    }
    let Some(mount) = mount_point(path) else {
        return e;
    };
    let what = match (rustix::fs::statfs(&mount), rustix::fs::statvfs(&mount)) {
        (Ok(fs), Ok(v)) => format!(
            ", {}: {} of {} free",
            fs_type(fs.f_type as u64),
            bytes(v.f_bavail.saturating_mul(v.f_frsize)),
            bytes(v.f_blocks.saturating_mul(v.f_frsize))
        ),
        _ => String::new(),
    };
    let message = format!("{}{NAMED}{}{what})", e.message(), mount.display());
    Error::new(ErrorKind::NoSpace, message)
}

/// [`name_fs`] on a result's error.
pub trait NameFs<T> {
    /// On a full-disk error, names the file system holding `path`.
    fn name_fs(self, path: &Path) -> Result<T>;
}

impl<T, E: Into<Error>> NameFs<T> for std::result::Result<T, E> {
    fn name_fs(self, path: &Path) -> Result<T> {
        self.map_err(|e| name_fs(e.into(), path))
    }
}

/// The mount point of the file system holding `path` (or its nearest existing ancestor: a
/// directory that could not be made): the first directory up that is a mount root, or whose
/// parent is on another device.
fn mount_point(path: &Path) -> Option<PathBuf> {
    let flags = AtFlags::NO_AUTOMOUNT;
    let stat = |p: &Path| rustix::fs::statx(CWD, p, flags, StatxFlags::BASIC_STATS).ok();
    let mut at = path.ancestors().find(|p| stat(p).is_some())?.to_path_buf();
    if at.is_relative() {
        at = std::env::current_dir().ok()?.join(at);
    }
    loop {
        let here = stat(&at)?;
        let root = here
            .stx_attributes_mask
            .contains(StatxAttributes::MOUNT_ROOT)
            && here.stx_attributes.contains(StatxAttributes::MOUNT_ROOT);
        let Some(parent) = at.parent().filter(|_| !root) else {
            return Some(at);
        };
        let up = stat(parent)?;
        if (up.stx_dev_major, up.stx_dev_minor) != (here.stx_dev_major, here.stx_dev_minor) {
            return Some(at);
        }
        at = parent.to_path_buf();
    }
}

/// The mount point and type of the file system holding `path` (`/var/lib/bosun`, `overlay`),
/// for messages that name it.
pub fn describe(path: &Path) -> Option<(PathBuf, String)> {
    let mount = mount_point(path)?;
    let fs = rustix::fs::statfs(&mount).ok()?;
    Some((mount, fs_type(fs.f_type as u64)))
}

/// A file system's name from its `statfs` magic (the ones a node's disks are made of).
fn fs_type(magic: u64) -> String {
    let name = match magic {
        0xEF53 => "ext4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x0102_1994 => "tmpfs",
        0x794C_7630 => "overlay",
        0x2FC1_2FC1 => "zfs",
        0xF2F5_2010 => "f2fs",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        _ => return format!("type {magic:#x}"),
    };
    name.to_string()
}

/// `n` bytes in binary units, one decimal above KiB (`0 B`, `12 KiB`, `20.0 GiB`).
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let (mut v, mut unit) = (n as f64 / 1024.0, 0);
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    match unit {
        0 => format!("{v:.0} {}", UNITS[0]),
        _ => format!("{v:.1} {}", UNITS[unit]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enospc() -> Error {
        std::io::Error::from_raw_os_error(libc::ENOSPC).into()
    }

    #[test]
    fn a_full_disk_error_names_the_mount_once_and_others_pass() {
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("not/made/yet");
        let e = name_fs(enospc().context("create record"), &missing);
        assert_eq!(e.kind(), ErrorKind::NoSpace);
        let mount = mount_point(dir.path()).expect("mount point");
        let want = format!(
            "create record: no space left on device (file system {}, ",
            mount.display()
        );
        assert!(e.message().starts_with(&want), "{e}");
        assert!(e.message().ends_with(" free)"), "{e}");
        let again = name_fs(e.clone().context("sandbox x"), dir.path());
        assert_eq!(again.message(), format!("sandbox x: {}", e.message()));
        let other = name_fs(Error::internal("boom"), dir.path());
        assert_eq!(other.message(), "boom");
    }

    #[test]
    fn the_mount_point_is_where_the_device_changes() {
        assert_eq!(mount_point(Path::new("/")), Some(PathBuf::from("/")));
        // /proc is a mount of its own on every Linux the daemon runs on.
        assert_eq!(
            mount_point(Path::new("/proc/self/status")),
            Some(PathBuf::from("/proc"))
        );
    }

    #[test]
    fn sizes_read_like_df_h() {
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes(12 << 10), "12 KiB");
        assert_eq!(bytes(23 << 20 | 400 << 10), "23.4 MiB");
        assert_eq!(bytes(20 << 30), "20.0 GiB");
        assert_eq!(fs_type(0xEF53), "ext4");
        assert_eq!(fs_type(0x1234), "type 0x1234");
    }
}
