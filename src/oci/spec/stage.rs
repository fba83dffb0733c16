//! Mounts staged on the host for what the OCI runtime cannot do itself (runc 1.1: recursive read-only and ID-mapped bind mounts).
//!
//! A detached clone of the source gets the attributes (`mount_setattr`), is attached under the
//! container's stage directory and handed to runc as a plain bind mount. They are needed only
//! while `runc create` copies them into the container's mount namespace: [`unstage`] then
//! detaches them, and the container's one teardown runs it again (after a failure, Remove, or
//! a crash mid-create).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use oci_spec::runtime::{Mount, Spec};
use rustix::mount::UnmountFlags;
use rustix::thread::UnshareFlags;

use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::oci::runc::features::RuntimeMountFeatures;
use crate::oci::spec::request::{IdMapping, UserNamespace};
use crate::oci::spec::userns;
use crate::sandbox::userns::NsHolder;
use crate::sys::mount_api::{self, Attributes};

/// The stage directory under a container's volatile directory.
pub fn stage_dir(container_dir: &Path) -> PathBuf {
    container_dir.join("stage")
}

/// The user namespaces ID-mapped mounts are mapped through: the pod's own (pinned) for mounts
/// with the pod's mappings, and one made on demand (and dropped with this value) for others.
pub struct IdmapNamespaces<'a> {
    pod: Option<(&'a UserNamespace, BorrowedFd<'a>)>,
    binary: &'a Path,
    made: Vec<(UserNamespace, OwnedFd)>,
}

impl<'a> IdmapNamespaces<'a> {
    /// `pod`: the pod's mappings and its pinned user namespace; `binary`: bosun, which holds a
    /// new user namespace while its maps are written.
    pub fn new(pod: Option<(&'a UserNamespace, BorrowedFd<'a>)>, binary: &'a Path) -> Self {
        IdmapNamespaces {
            pod,
            binary,
            made: Vec::new(),
        }
    }

    /// A user namespace with exactly these maps.
    fn get(&mut self, uids: &[IdMapping], gids: &[IdMapping]) -> Result<BorrowedFd<'_>> {
        let want = UserNamespace {
            uids: uids.to_vec(),
            gids: gids.to_vec(),
        };
        if let Some((ns, fd)) = self.pod {
            if *ns == want {
                return Ok(fd);
            }
        }
        let i = match self.made.iter().position(|(ns, _)| *ns == want) {
            Some(i) => i,
            None => {
                let holder = NsHolder::spawn(self.binary, UnshareFlags::empty(), None)?;
                holder.write_maps(&userns::map_text(uids), &userns::map_text(gids))?;
                self.made.push((want, holder.open_ns("user")?));
                self.made.len() - 1
            }
        };
        Ok(self.made[i].1.as_fd())
    }
}

/// Clones the mount at `source` (its whole tree when `recursive`), sets `attrs` on the clone and
/// attaches it at `target`, created to match `source` (a directory, or an empty file).
pub fn clone_to(source: &Path, target: &Path, recursive: bool, attrs: &Attributes) -> Result<()> {
    let is_dir = std::fs::metadata(source)
        .ctx(|| format!("stat {}", source.display()))?
        .is_dir();
    if is_dir {
        std::fs::create_dir_all(target).ctx(|| format!("create {}", target.display()))?;
    } else {
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).ctx(|| format!("create {}", parent.display()))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(target)
            .ctx(|| format!("create {}", target.display()))?;
    }
    let tree = mount_api::clone_tree(source, recursive)
        .ctx(|| format!("clone the mount of {}", source.display()))?;
    mount_api::set_attributes(tree.as_fd(), attrs).map_err(|e| {
        let what = match (attrs.read_only, attrs.idmap.is_some()) {
            (true, true) => "recursive read-only, ID-mapped",
            (true, false) => "recursive read-only",
            _ => "ID-mapped",
        };
        // EINVAL: a filesystem in the tree cannot be ID-mapped (or the tree is already).
        let kind = match e.raw_os_error() {
            Some(libc::EINVAL) | Some(libc::EPERM) => ErrorKind::FailedPrecondition,
            _ => ErrorKind::Internal,
        };
        // Which file system refused is not said; name those the clone holds.
        let hint = match (e.raw_os_error(), attrs.idmap.is_some()) {
            (Some(libc::EINVAL), true) => {
                let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
                let (major, minor) = crate::oci::spec::seccomp::host_kernel();
                format!(
                    " (file systems in it: {}; not every one can be ID-mapped on Linux \
                     {major}.{minor}: tmpfs can from 6.3)",
                    crate::oci::spec::mounts::file_systems_of(source, recursive, &info).join(", ")
                )
            }
            _ => String::new(),
        };
        Error::new(kind, format!("make {} {what}: {e}{hint}", source.display()))
    })?;
    mount_api::attach(tree.as_fd(), target).ctx(|| {
        format!(
            "attach the clone of {} at {}",
            source.display(),
            target.display()
        )
    })
}

/// Rewrites the spec's mounts the runtime cannot make: for each bind mount asking for `rro`
/// (unless `runtime.rro`) or an ID mapping (unless `runtime.idmap`), a clone of its source
/// with those attributes is staged under `dir` and becomes the mount's source, with plain
/// `ro` and no mapping left for runc. Returns how many were staged. On error, what was staged
/// stays for [`unstage`].
pub fn stage_mounts(
    spec: &mut Spec,
    runtime: RuntimeMountFeatures,
    dir: &Path,
    idmaps: &mut IdmapNamespaces<'_>,
) -> Result<usize> {
    let Some(mounts) = spec.mounts().clone() else {
        return Ok(0);
    };
    let mut out = Vec::with_capacity(mounts.len());
    let mut staged = 0;
    for (i, mut m) in mounts.into_iter().enumerate() {
        let options = m.options().clone().unwrap_or_default();
        let rro = !runtime.rro && options.iter().any(|o| o == "rro");
        let idmap = !runtime.idmap && m.uid_mappings().as_ref().is_some_and(|u| !u.is_empty());
        if rro || idmap {
            stage_one(&mut m, i, options, rro, idmap, dir, idmaps)
                .map_err(|e| e.context(format!("mount {}", m.destination().display())))?;
            staged += 1;
        }
        out.push(m);
    }
    spec.set_mounts(Some(out));
    Ok(staged)
}

fn stage_one(
    m: &mut Mount,
    i: usize,
    options: Vec<String>,
    rro: bool,
    idmap: bool,
    dir: &Path,
    idmaps: &mut IdmapNamespaces<'_>,
) -> Result<()> {
    let source = m
        .source()
        .clone()
        .ok_or_else(|| Error::internal("a bind mount without a source"))?;
    let ranges = |map: &Option<Vec<oci_spec::runtime::LinuxIdMapping>>| -> Vec<IdMapping> {
        map.iter()
            .flatten()
            .map(|r| IdMapping {
                container_id: r.container_id(),
                host_id: r.host_id(),
                length: r.size(),
            })
            .collect()
    };
    let (uids, gids) = (ranges(m.uid_mappings()), ranges(m.gid_mappings()));
    let ns = if idmap {
        Some(idmaps.get(&uids, &gids)?)
    } else {
        None
    };
    let attrs = Attributes {
        read_only: rro,
        idmap: ns,
        private: options.iter().any(|o| o == "rprivate" || o == "private"),
    };
    let target = dir.join(format!("m{i}"));
    let recursive = options.iter().any(|o| o == "rbind");
    clone_to(&source, &target, recursive, &attrs)?;
    let options = options
        .into_iter()
        .filter(|o| !(idmap && (o == "idmap" || o == "ridmap")))
        .map(|o| {
            if rro && o == "rro" {
                "ro".to_string()
            } else {
                o
            }
        })
        .collect();
    m.set_options(Some(options));
    m.set_source(Some(target));
    if idmap {
        m.set_uid_mappings(None);
        m.set_gid_mappings(None);
    }
    Ok(())
}

/// Detaches every mount staged under `dir` (deepest first) and removes `dir`. Idempotent;
/// fails (keeping `dir`, so nothing ever deletes through a mount) when one stays mounted.
pub fn unstage(dir: &Path) -> Result<()> {
    // Most containers stage nothing: no directory, no mountinfo scan (it grows with the node).
    if std::fs::symlink_metadata(dir).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(());
    }
    unmount_and_remove(dir)
}

/// Detaches every mount at or below `dir` (deepest first, stacked ones too) and removes
/// `dir` with everything in it. Fails, keeping `dir` (nothing ever deletes through a mount),
/// when one stays mounted; an absent `dir` is fine.
pub fn unmount_and_remove(dir: &Path) -> Result<()> {
    let mut points = crate::oci::spec::mounts::mount_points_under(dir);
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    for p in &points {
        for _ in 0..8 {
            if rustix::mount::unmount(p, UnmountFlags::DETACH).is_err() {
                break;
            }
        }
    }
    let left = crate::oci::spec::mounts::mount_points_under(dir);
    if let Some(p) = left.first() {
        return Err(Error::internal(format!(
            "remove {}: {} is still mounted",
            dir.display(),
            p.display()
        )));
    }
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::from(e).context(format!("remove {}", dir.display())))
        }
        _ => Ok(()),
    }
}

/// Detaches every mount staged under `<containers_dir>/<id>/stage` for each `<id>` that
/// `done` accepts (one mountinfo scan): at daemon start nothing is being created or started,
/// and a container that got as far as `runc run` has its own copies; a created container
/// still to be started needs its stage (the caller leaves it out). Returns how many went.
pub fn unstage_all(containers_dir: &Path, done: impl Fn(&str) -> bool) -> usize {
    let staged = |p: &Path| {
        p.strip_prefix(containers_dir).is_ok_and(|rel| {
            let mut parts = rel.components();
            let id = parts.next().and_then(|c| c.as_os_str().to_str());
            parts.next().is_some_and(|c| c.as_os_str() == "stage") && id.is_some_and(&done)
        })
    };
    let mut points: Vec<PathBuf> = crate::oci::spec::mounts::mount_points_under(containers_dir)
        .into_iter()
        .filter(|p| staged(p))
        .collect();
    points.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    points
        .iter()
        .filter(|p| rustix::mount::unmount(p.as_path(), UnmountFlags::DETACH).is_ok())
        .count()
}

#[cfg(test)]
#[path = "stage_tests.rs"]
mod tests;
