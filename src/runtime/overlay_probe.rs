//! At start: can overlayfs make containers' writable layers under the root? (not on an overlay root: issue 27)

use std::path::Path;

use crate::error::{Error, Result};
use crate::store::space;

/// Mounts a throwaway overlay with its upper and work directories where containers' writable
/// layers go (`<root>/containers`), then removes it. A root overlayfs cannot write to (the
/// root is itself on overlayfs: a node container whose /var is not a volume) fails here, at
/// start, with what to mount, instead of every CreateContainer failing later.
pub fn check(root: &Path) -> Result<()> {
    let dir = root.join("containers").join(".overlay-probe");
    // A probe a killed daemon left: its mount (if any) and directories go first.
    let merged = dir.join("merged");
    if super::rootfs::is_mounted(&merged) {
        super::rootfs::unmount(&merged)?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let made = ["lower", "upper", "work", "merged"]
        .iter()
        .try_for_each(|d| std::fs::create_dir_all(dir.join(d)));
    let mounted = made.map_err(Error::from).and_then(|()| {
        super::rootfs::mount(&[dir.join("lower")], &dir, &merged)
            .and_then(|()| super::rootfs::unmount(&merged))
    });
    let _ = std::fs::remove_dir_all(&dir);
    mounted.map_err(|e| refusal(root, &e))
}

/// The start error: the file system under the root and what to do about it.
fn refusal(root: &Path, e: &Error) -> Error {
    let (mount, fs) = space::describe(root)
        .map(|(m, t)| (m.display().to_string(), t))
        .unwrap_or_else(|| (root.display().to_string(), "unknown".to_string()));
    let advice = if fs == "overlay" {
        format!(
            "{} is on overlayfs ({mount}), which overlayfs cannot use as an upper layer: \
             put the root on a volume or a real file system (in a node container: \
             `--volume /var` as kind does, or `-v /var/lib/bosun`; or set `root` in \
             /etc/bosun/config.toml to a directory on one)",
            root.display()
        )
    } else {
        format!(
            "{} is on {fs} ({mount}): overlayfs needs a root on a file system it supports \
             as an upper layer (ext4, xfs with d_type, btrfs, tmpfs)",
            root.display()
        )
    };
    Error::precondition(format!(
        "root {}: overlayfs cannot make containers' writable layers there ({}); {advice}",
        root.display(),
        e.message()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::mount::MountFlags;

    /// The mount tests need root: elsewhere they say SKIP with the reason.
    fn can_mount(test: &str) -> bool {
        let root = rustix::process::geteuid().is_root();
        if !root {
            eprintln!("SKIP {test}: needs root (mount)");
        }
        root
    }

    #[test]
    fn a_root_on_a_real_file_system_passes_and_keeps_nothing() {
        if !can_mount("a_root_on_a_real_file_system_passes_and_keeps_nothing") {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        check(dir.path()).expect("overlay probe on a tempdir");
        let left: Vec<_> = std::fs::read_dir(dir.path().join("containers"))
            .expect("containers dir")
            .collect();
        assert!(left.is_empty(), "probe left {left:?}");
    }

    #[test]
    fn a_root_on_overlayfs_is_refused_naming_what_to_mount() {
        if !can_mount("a_root_on_overlayfs_is_refused_naming_what_to_mount") {
            return;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |s: &str| dir.path().join(s);
        for d in ["l", "u", "w", "m"] {
            std::fs::create_dir(p(d)).expect("mkdir");
        }
        let data = format!(
            "lowerdir={},upperdir={},workdir={}",
            p("l").display(),
            p("u").display(),
            p("w").display()
        );
        let data = std::ffi::CString::new(data).expect("mount data");
        rustix::mount::mount(
            "overlay",
            p("m"),
            "overlay",
            MountFlags::empty(),
            data.as_c_str(),
        )
        .expect("mount the outer overlay");
        let root = p("m").join("var/lib/bosun");
        std::fs::create_dir_all(&root).expect("root dir");
        let e = check(&root).expect_err("an overlay root must be refused");
        let _ = rustix::mount::unmount(p("m"), rustix::mount::UnmountFlags::DETACH);
        assert_eq!(e.kind(), crate::error::ErrorKind::FailedPrecondition, "{e}");
        for want in ["is on overlayfs", "--volume /var", "root "] {
            assert!(e.message().contains(want), "{want:?} not in: {e}");
        }
        assert!(
            !root.join("containers/.overlay-probe").exists(),
            "probe left behind"
        );
    }
}
