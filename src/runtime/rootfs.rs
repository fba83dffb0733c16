//! A container's root filesystem: an overlay of the image's layer snapshots and a private writable layer.

use std::os::fd::BorrowedFd;
use std::path::{Path, PathBuf};

use rustix::mount::{MountFlags, UnmountFlags};

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::oci::stage::clone_to;
use crate::store::space::{name_fs, NameFs};
use crate::sys::mount_api::Attributes;

/// The kernel's limit on mount data (one page).
const MAX_MOUNT_DATA: usize = 4095;

/// Mounts `lower` (top layer first) with `rw/upper` and `rw/work` at `target`; creates the
/// directories. Idempotent: an existing overlay at `target` is kept.
pub fn mount(lower: &[PathBuf], rw: &Path, target: &Path) -> Result<()> {
    if lower.is_empty() {
        return Err(Error::invalid("rootfs: the image has no layers"));
    }
    create_dirs(rw, target)?;
    if is_mounted(target) {
        return Ok(());
    }
    mount_overlay(lower, rw, target)
}

/// [`mount`] for a pod with its own user namespace: every layer is seen through an ID-mapped
/// clone (mapped by `userns`, staged under `stage` until the overlay holds it, then detached),
/// and the writable layer's root belongs to the container's root (`owner`, host uid and gid).
/// Files keep their image ownership on disk and look the same from inside; what the container
/// writes is stored with its host ids. Overlayfs itself cannot be ID-mapped, its layers can
/// (Linux 5.19).
pub fn mount_idmapped(
    lower: &[PathBuf],
    rw: &Path,
    target: &Path,
    userns: BorrowedFd<'_>,
    owner: (u32, u32),
    stage: &Path,
) -> Result<()> {
    if lower.is_empty() {
        return Err(Error::invalid("rootfs: the image has no layers"));
    }
    create_dirs(rw, target)?;
    if is_mounted(target) {
        return Ok(());
    }
    let upper = rw.join("upper");
    rustix::fs::chown(
        &upper,
        Some(rustix::fs::Uid::from_raw(owner.0)),
        Some(rustix::fs::Gid::from_raw(owner.1)),
    )
    .ctx(|| format!("chown {} to {}:{}", upper.display(), owner.0, owner.1))?;
    let attrs = Attributes {
        read_only: false,
        idmap: Some(userns),
        private: true,
    };
    let mut staged = Vec::with_capacity(lower.len());
    let mut result = Ok(());
    for (i, layer) in lower.iter().enumerate() {
        let at = stage.join(format!("l{i}"));
        result = clone_to(layer, &at, false, &attrs).map_err(|e| e.context("rootfs layer"));
        if result.is_err() {
            break;
        }
        staged.push(at);
    }
    if result.is_ok() {
        result = crate::failpoint_check!("container.rootfs.staged")
            .and_then(|()| mount_overlay(&staged, rw, target));
    }
    // The overlay holds private clones of its layers: the staged ones can go now.
    for at in &staged {
        let _ = rustix::mount::unmount(at, UnmountFlags::DETACH);
        let _ = std::fs::remove_dir(at);
    }
    result
}

/// `rw/upper`, `rw/work` and the mount point.
fn create_dirs(rw: &Path, target: &Path) -> Result<()> {
    for dir in [&rw.join("upper"), &rw.join("work"), target] {
        std::fs::create_dir_all(dir)
            .ctx(|| format!("create {}", dir.display()))
            .name_fs(dir)?;
    }
    Ok(())
}

/// The overlay mount itself.
fn mount_overlay(lower: &[PathBuf], rw: &Path, target: &Path) -> Result<()> {
    let upper = rw.join("upper");
    let work = rw.join("work");
    let lowers: Vec<String> = lower.iter().map(|p| escape(&p.to_string_lossy())).collect();
    let data = format!(
        "lowerdir={},upperdir={},workdir={},index=off",
        lowers.join(":"),
        escape(&upper.to_string_lossy()),
        escape(&work.to_string_lossy())
    );
    if data.len() > MAX_MOUNT_DATA {
        return Err(Error::invalid(format!(
            "rootfs: {} layers make {} bytes of overlay options (the kernel takes {MAX_MOUNT_DATA})",
            lower.len(),
            data.len()
        )));
    }
    let data = std::ffi::CString::new(data)
        .map_err(|_| Error::invalid("rootfs: a layer path contains a NUL byte"))?;
    rustix::mount::mount(
        "overlay",
        target,
        "overlay",
        MountFlags::empty(),
        data.as_c_str(),
    )
    .map_err(|e| Error::internal(format!("mount overlay at {}: {e}", target.display())))?;
    // Overlayfs mounts read-only, with only a kernel warning, when it cannot make its work
    // directory: on a full disk. A container must not get a rootfs it cannot write.
    let read_only = rustix::fs::statvfs(target)
        .is_ok_and(|v| v.f_flag.contains(rustix::fs::StatVfsMountFlags::RDONLY));
    if read_only {
        let _ = unmount(target);
        let e = Error::new(
            ErrorKind::NoSpace,
            format!(
                "mount overlay at {}: no space left on device for its work directory {} \
                 (it came up read-only)",
                target.display(),
                work.display()
            ),
        );
        return Err(name_fs(e, &work));
    }
    Ok(())
}

/// Unmounts `target` (every stacked mount, detached if busy); fine when nothing is mounted.
pub fn unmount(target: &Path) -> Result<()> {
    for _ in 0..16 {
        match rustix::mount::unmount(target, UnmountFlags::empty()) {
            Ok(()) => continue,
            Err(rustix::io::Errno::INVAL) | Err(rustix::io::Errno::NOENT) => return Ok(()),
            Err(rustix::io::Errno::BUSY) => {
                rustix::mount::unmount(target, UnmountFlags::DETACH)
                    .map_err(|e| Error::internal(format!("unmount {}: {e}", target.display())))?;
            }
            Err(e) => {
                return Err(Error::internal(format!(
                    "unmount {}: {e}",
                    target.display()
                )))
            }
        }
    }
    Ok(())
}

/// Whether `target` is a mount point: statx's mount-root attribute (Linux 5.8), one syscall;
/// on older kernels /proc/self/mountinfo, which grows with every container on the node (a
/// scan of it made each CreateContainer slower than the one before, issue 13).
pub fn is_mounted(target: &Path) -> bool {
    use rustix::fs::{AtFlags, StatxAttributes, StatxFlags, CWD};
    let flags = AtFlags::NO_AUTOMOUNT | AtFlags::SYMLINK_NOFOLLOW;
    match rustix::fs::statx(CWD, target, flags, StatxFlags::empty()) {
        Ok(st) if st.stx_attributes_mask.contains(StatxAttributes::MOUNT_ROOT) => {
            st.stx_attributes.contains(StatxAttributes::MOUNT_ROOT)
        }
        Ok(_) | Err(rustix::io::Errno::NOSYS) => is_listed_mount(target),
        // Missing or not reachable: nothing is mounted there.
        Err(_) => false,
    }
}

/// Whether /proc/self/mountinfo lists `target` as a mount point.
fn is_listed_mount(target: &Path) -> bool {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return false;
    };
    let want = target.to_string_lossy();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .any(|mp| unescape_mountinfo(mp) == want)
}

/// Overlay option values escape `,` `:` and `\` with a backslash.
fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, ',' | ':' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn option_values_are_escaped() {
        assert_eq!(escape("/a,b:c\\d"), "/a\\,b\\:c\\\\d");
        assert_eq!(unescape_mountinfo("/a\\040b"), "/a b");
    }

    #[test]
    fn mount_points_are_told_apart_from_plain_directories() {
        let dir = tempfile::tempdir().expect("tempdir");
        for (path, want) in [
            (Path::new("/proc"), true),
            (Path::new("/"), true),
            (dir.path(), false),
            (Path::new("/proc/self"), false),
            (Path::new("/nonexistent/x"), false),
        ] {
            assert_eq!(is_mounted(path), want, "{}", path.display());
            if path.exists() {
                assert_eq!(is_listed_mount(path), want, "mountinfo: {}", path.display());
            }
        }
    }

    #[test]
    fn no_layers_and_too_many_layers_are_refused() {
        let dir = tempfile::tempdir().expect("tmp");
        let e = mount(&[], dir.path(), &dir.path().join("t")).expect_err("empty");
        assert!(e.message().contains("no layers"), "{e}");
        let long: Vec<PathBuf> = (0..200)
            .map(|i| dir.path().join(format!("layer-{i:03}-{}", "x".repeat(40))))
            .collect();
        let e = mount(&long, dir.path(), &dir.path().join("t")).expect_err("long");
        assert!(e.message().contains("200 layers"), "{e}");
    }
}
