//! The new mount API for mounts staged on the host: detached clones of a mount tree
//! (`open_tree`), their attributes (`mount_setattr`: read-only, ID-mapped) and attaching them
//! (`move_mount`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::path::Path;

use rustix::fs::CWD;
use rustix::mount::{MoveMountFlags, OpenTreeFlags};

/// `MOUNT_ATTR_RDONLY` (linux/mount.h).
const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
/// `MOUNT_ATTR_IDMAP` (linux/mount.h, Linux 5.12).
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
/// `MS_PRIVATE` as a `mount_attr.propagation` value.
const MS_PRIVATE: u64 = 1 << 18;

/// The kernel's `struct mount_attr` (version 0, 32 bytes).
#[repr(C)]
struct RawMountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// What [`set_attributes`] changes on every mount of a detached tree.
#[derive(Debug, Clone, Copy, Default)]
pub struct Attributes<'a> {
    /// Make the mounts read-only.
    pub read_only: bool,
    /// ID-map the mounts through this user namespace (its uid/gid maps).
    pub idmap: Option<BorrowedFd<'a>>,
    /// Make the mounts private (else they keep the propagation they were cloned with).
    pub private: bool,
}

/// A detached copy of the mount at `path` (with every mount below it when `recursive`), owned
/// by the returned descriptor: dropping it before [`attach`] releases the copy.
pub fn clone_tree(path: &Path, recursive: bool) -> io::Result<OwnedFd> {
    let mut flags = OpenTreeFlags::OPEN_TREE_CLONE | OpenTreeFlags::OPEN_TREE_CLOEXEC;
    if recursive {
        flags |= OpenTreeFlags::AT_RECURSIVE;
    }
    Ok(rustix::mount::open_tree(CWD, path, flags)?)
}

/// Sets `attrs` on the detached tree `tree` (every mount in it).
pub fn set_attributes(tree: BorrowedFd<'_>, attrs: &Attributes<'_>) -> io::Result<()> {
    let mut raw = RawMountAttr {
        attr_set: 0,
        attr_clr: 0,
        propagation: if attrs.private { MS_PRIVATE } else { 0 },
        userns_fd: 0,
    };
    if attrs.read_only {
        raw.attr_set |= MOUNT_ATTR_RDONLY;
    }
    if let Some(ns) = attrs.idmap {
        raw.attr_set |= MOUNT_ATTR_IDMAP;
        raw.userns_fd = u64::try_from(ns.as_raw_fd())
            .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    }
    let empty = c"";
    // SAFETY: `tree` is a valid descriptor for the call's duration, the path is a
    // NUL-terminated empty string (AT_EMPTY_PATH: the descriptor itself), and `raw` is a
    // properly laid-out `struct mount_attr` whose size is passed; the kernel only reads it.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_EMPTY_PATH | libc::AT_RECURSIVE,
            &raw as *const RawMountAttr,
            std::mem::size_of::<RawMountAttr>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Attaches the detached tree `tree` at `target` (an existing file or directory).
pub fn attach(tree: BorrowedFd<'_>, target: &Path) -> io::Result<()> {
    Ok(rustix::mount::move_mount(
        tree,
        c"",
        CWD,
        target,
        MoveMountFlags::MOVE_MOUNT_F_EMPTY_PATH,
    )?)
}

/// Whether the kernel has `mount_setattr` (Linux 5.12): a call on an invalid descriptor fails
/// with EBADF where it exists and ENOSYS where it does not (a call that changes nothing would
/// succeed before looking at the descriptor, so it asks for read-only).
pub fn mount_setattr_supported() -> bool {
    let raw = RawMountAttr {
        attr_set: MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let empty = c"";
    // SAFETY: as in `set_attributes`; descriptor -1 is never valid, so nothing is changed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            empty.as_ptr(),
            libc::AT_EMPTY_PATH,
            &raw as *const RawMountAttr,
            std::mem::size_of::<RawMountAttr>(),
        )
    };
    rc != 0 && io::Error::last_os_error().raw_os_error() != Some(libc::ENOSYS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_kernel_has_mount_setattr() {
        // Debian 12's kernel (6.1) and newer have it; the probe must not change anything.
        assert!(mount_setattr_supported());
    }

    #[test]
    fn clone_of_a_missing_path_fails() {
        let e = clone_tree(Path::new("/nonexistent/bosun-mount-api"), false).expect_err("clone");
        assert!(matches!(
            e.raw_os_error(),
            Some(libc::ENOENT) | Some(libc::EPERM)
        ));
    }
}
