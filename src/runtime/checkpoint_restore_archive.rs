//! Restore's side of the checkpoint archive: safe streaming extraction (of a tar, or a checkpoint image's unpacked layer), the members a restore needs, the rootfs changes applied into the new container's rootfs, the bind mounts it must be given again.

use std::fs::File;
use std::path::{Component, Path, PathBuf};

use super::checkpoint_archive::{
    ConfigDump, CHECKPOINT_DIR, CONFIG_DUMP, DELETED_FILES, ROOTFS_DIFF, SPEC_DUMP,
};
use crate::error::{Error, Result, ResultExt};

/// Container paths whose bind mounts the runtime makes itself (the pod's files), so a restore
/// need not be given them again: the new pod's are mounted there.
pub const RUNTIME_BINDS: [&str; 5] = [
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/dev/shm",
    "/dev/termination-log",
];

/// An extracted checkpoint: its directory, `config.dump` and `spec.dump`.
#[derive(Debug)]
pub struct Extracted {
    /// Where the members are (`checkpoint/`, `spec.dump`, …).
    pub dir: PathBuf,
    /// `config.dump`.
    pub config: ConfigDump,
    /// `spec.dump`: the OCI spec the checkpointed container ran with.
    pub spec: oci_spec::runtime::Spec,
}

/// Extracts the tar `archive` into the new directory `dest`, streaming. Only plain files and
/// directories are taken; a member with an absolute path or `..`, or a link or device, is
/// refused (InvalidArgument naming it): nothing can land outside `dest`.
pub fn extract(archive: &Path, dest: &Path) -> Result<()> {
    let name = crate::error::echo_path(archive);
    let file = File::open(archive)
        .map_err(|e| Error::invalid(format!("checkpoint archive {name}: cannot be read: {e}")))?;
    std::fs::create_dir(dest).ctx(|| format!("create {}", dest.display()))?;
    let unreadable = |e: std::io::Error| {
        Error::invalid(format!(
            "checkpoint archive {name}: not a readable tar: {e}"
        ))
    };
    let mut tar = tar::Archive::new(std::io::BufReader::with_capacity(1 << 20, file));
    for entry in tar.entries().map_err(unreadable)? {
        let mut entry = entry.map_err(unreadable)?;
        let path = entry.path().map_err(unreadable)?.into_owned();
        let rel = inside(&path).ok_or_else(|| {
            Error::invalid(format!(
                "checkpoint archive {name}: member {:?} leaves the archive's directory",
                crate::error::echo_path(&path)
            ))
        })?;
        if rel.as_os_str().is_empty() {
            continue;
        }
        let kind = entry.header().entry_type();
        let out = dest.join(&rel);
        if kind.is_dir() {
            std::fs::create_dir_all(&out).ctx(|| format!("create {}", out.display()))?;
        } else if kind.is_file() || kind == tar::EntryType::Continuous {
            if let Some(parent) = out.parent() {
                std::fs::create_dir_all(parent).ctx(|| format!("create {}", parent.display()))?;
            }
            let mut f = File::create(&out).ctx(|| format!("create {}", out.display()))?;
            std::io::copy(&mut entry, &mut f)
                .map_err(|e| unreadable(std::io::Error::new(e.kind(), format!("{path:?}: {e}"))))?;
        } else {
            return Err(Error::invalid(format!(
                "checkpoint archive {name}: member {:?} is a {kind:?}, not a file or directory",
                crate::error::echo_path(&path)
            )));
        }
    }
    Ok(())
}

/// Copies the unpacked layer `src` of a checkpoint image into the new directory `dest`, with
/// the same rule as [`extract`]: plain files and directories only.
pub fn copy_layer(image: &str, src: &Path, dest: &Path) -> Result<()> {
    std::fs::create_dir(dest).ctx(|| format!("create {}", dest.display()))?;
    copy_dir(image, src, dest)
}

fn copy_dir(image: &str, src: &Path, dest: &Path) -> Result<()> {
    for e in std::fs::read_dir(src).ctx(|| format!("read {}", src.display()))? {
        let e = e.ctx(|| format!("read {}", src.display()))?;
        let ft = e
            .file_type()
            .ctx(|| format!("stat {}", e.path().display()))?;
        let out = dest.join(e.file_name());
        if ft.is_dir() {
            std::fs::create_dir(&out).ctx(|| format!("create {}", out.display()))?;
            copy_dir(image, &e.path(), &out)?;
        } else if ft.is_file() {
            std::fs::copy(e.path(), &out).ctx(|| format!("copy {}", out.display()))?;
        } else {
            return Err(Error::invalid(format!(
                "checkpoint image {image:?}: {:?} is not a file or directory",
                e.file_name()
            )));
        }
    }
    Ok(())
}

/// `path` relative and without `..` (a leading `./` dropped); `None` when it would leave.
fn inside(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::CurDir => {}
            Component::RootDir | Component::Prefix(_) | Component::ParentDir => return None,
        }
    }
    Some(out)
}

/// The members a restore needs in `dir` (extracted from `source`): InvalidArgument naming
/// the one missing or unreadable.
pub fn load(source: &str, dir: &Path) -> Result<Extracted> {
    let missing = |member: &str, why: String| {
        Error::invalid(format!(
            "checkpoint {source}: {member} {why} (not a checkpoint archive?)"
        ))
    };
    let read = |member: &str| {
        std::fs::read(dir.join(member)).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => missing(member, "is missing".into()),
            _ => missing(member, format!("cannot be read: {e}")),
        })
    };
    let config: ConfigDump = serde_json::from_slice(&read(CONFIG_DUMP)?)
        .map_err(|e| missing(CONFIG_DUMP, format!("is not valid: {e}")))?;
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(&read(SPEC_DUMP)?)
        .map_err(|e| missing(SPEC_DUMP, format!("is not valid: {e}")))?;
    if !dir.join(CHECKPOINT_DIR).join("inventory.img").is_file() {
        return Err(missing(
            "checkpoint/",
            "is missing or has no inventory.img (CRIU's images)".into(),
        ));
    }
    Ok(Extracted {
        dir: dir.to_path_buf(),
        config,
        spec,
    })
}

/// The container paths of the checkpointed container's bind mounts that the runtime does not
/// make itself: a restore must be given a mount at each.
pub fn required_binds(spec: &oci_spec::runtime::Spec) -> Vec<String> {
    let mut out: Vec<String> = spec
        .mounts()
        .iter()
        .flatten()
        .filter(|m| {
            m.typ().as_deref() == Some("bind")
                || m.options()
                    .iter()
                    .flatten()
                    .any(|o| o == "bind" || o == "rbind")
        })
        .map(|m| m.destination().display().to_string())
        .filter(|d| !RUNTIME_BINDS.contains(&d.as_str()))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Applies the checkpoint's rootfs changes to the mounted `rootfs`: `rootfs-diff.tar`'s files
/// (no member may leave the rootfs, through `..` or a link) and `deleted.files` removed.
pub fn apply_rootfs(dir: &Path, rootfs: &Path) -> Result<()> {
    let diff = dir.join(ROOTFS_DIFF);
    if diff.is_file() {
        let bad = |e: std::io::Error| Error::invalid(format!("checkpoint {ROOTFS_DIFF}: {e}"));
        let mut tar = tar::Archive::new(File::open(&diff).ctx(|| "open rootfs-diff.tar")?);
        tar.set_preserve_permissions(true);
        tar.set_preserve_mtime(true);
        tar.set_overwrite(true);
        for entry in tar.entries().map_err(bad)? {
            let mut entry = entry.map_err(bad)?;
            let path = entry.path().map_err(bad)?.into_owned();
            // unpack_in refuses `..` and a parent that resolves outside the rootfs.
            if !entry.unpack_in(rootfs).map_err(bad)? {
                return Err(Error::invalid(format!(
                    "checkpoint {ROOTFS_DIFF}: member {:?} leaves the root filesystem",
                    crate::error::echo_path(&path)
                )));
            }
        }
    }
    let deleted = dir.join(DELETED_FILES);
    if deleted.is_file() {
        let text = std::fs::read(&deleted).ctx(|| "read deleted.files")?;
        let paths: Vec<String> = serde_json::from_slice(&text)
            .map_err(|e| Error::invalid(format!("checkpoint {DELETED_FILES}: {e}")))?;
        let root = rootfs
            .canonicalize()
            .ctx(|| format!("resolve {}", rootfs.display()))?;
        for p in paths {
            let rel = inside(Path::new(p.trim_start_matches('/')))
                .filter(|r| !r.as_os_str().is_empty())
                .ok_or_else(|| {
                    Error::invalid(format!("checkpoint {DELETED_FILES}: {p:?} is not a path"))
                })?;
            let target = root.join(&rel);
            // The parent must resolve inside the rootfs (no symlinked directory leading out).
            let parent_ok = target
                .parent()
                .and_then(|d| d.canonicalize().ok())
                .is_some_and(|d| d.starts_with(&root));
            let Ok(md) = std::fs::symlink_metadata(&target) else {
                continue;
            };
            if !parent_ok {
                return Err(Error::invalid(format!(
                    "checkpoint {DELETED_FILES}: {p:?} leaves the root filesystem"
                )));
            }
            if md.is_dir() {
                std::fs::remove_dir_all(&target)
            } else {
                std::fs::remove_file(&target)
            }
            .ctx(|| format!("remove {p}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "checkpoint_restore_archive_tests.rs"]
mod tests;
