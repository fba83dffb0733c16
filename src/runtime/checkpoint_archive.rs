//! The checkpoint archive (containerd's and CRI-O's layout, what checkpointctl reads): `checkpoint/`, `rootfs-diff.tar`, `deleted.files`, `spec.dump`, `config.dump`, `status.dump`, `stats-dump`, `dump.log`, `container.log`.

use std::fs::File;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::checkpoint::{from_ns, rfc3339};
use super::state::meta::{ContainerMeta, PodName};
use super::state::status::ContainerStatus;
use crate::error::{Error, Result, ResultExt};

/// CRIU's images.
pub const CHECKPOINT_DIR: &str = "checkpoint";
/// The OCI config.json the container ran with.
pub const SPEC_DUMP: &str = "spec.dump";
/// The container's metadata ([`ConfigDump`]).
pub const CONFIG_DUMP: &str = "config.dump";
/// The container's status at the checkpoint.
pub const STATUS_DUMP: &str = "status.dump";
/// CRIU's dump statistics.
pub const STATS_DUMP: &str = "stats-dump";
/// CRIU's log of the dump.
pub const DUMP_LOG: &str = "dump.log";
/// The CRI log up to the checkpoint.
pub const CONTAINER_LOG: &str = "container.log";
/// Files of the writable layer that are new or changed.
pub const ROOTFS_DIFF: &str = "rootfs-diff.tar";
/// Files of the image the container deleted (a JSON list of absolute paths).
pub const DELETED_FILES: &str = "deleted.files";

/// `config.dump`: the fields checkpointctl reads (Podman's and CRI-O's names), and bosun's
/// own for restore.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ConfigDump {
    /// The container id.
    pub id: String,
    /// The container's CRI name.
    pub name: String,
    /// The image as the create request named it.
    pub rootfs_image: String,
    /// The image id (`sha256:…`).
    pub rootfs_image_ref: String,
    /// The image's name (first repo tag).
    pub rootfs_image_name: String,
    /// The runtime handler (`runc`, `crun`).
    pub runtime: String,
    /// When the container was created (RFC 3339).
    pub created_time: String,
    /// When it was checkpointed (RFC 3339).
    pub checkpointed_time: String,
    /// When it was restored (RFC 3339; the zero time until then).
    pub restored_time: String,
    /// Restored from a checkpoint.
    pub restored: bool,
    /// The pod sandbox it ran in.
    pub pod_sandbox_id: String,
}

/// What goes into an archive besides CRIU's images.
pub struct Contents {
    /// The container id.
    pub id: String,
    /// Its metadata.
    pub meta: ContainerMeta,
    /// Its status at the checkpoint.
    pub status: ContainerStatus,
    /// The runtime handler's name.
    pub runtime: String,
    /// The pod it ran in.
    pub pod: PodName,
    /// The OCI bundle (config.json).
    pub bundle: PathBuf,
    /// The overlay's upper directory.
    pub upper: PathBuf,
    /// The checkpoint time (RFC 3339).
    pub checkpointed: String,
}

/// Writes the metadata files into `staging` (where CRIU wrote `checkpoint/` and
/// `work/dump.log`) and packs it (without `work/`) into `target`, through a temporary file
/// renamed at the end: `target` is complete or absent.
pub fn write(c: &Contents, staging: &Path, target: &Path) -> Result<()> {
    write_json(&staging.join(SPEC_DUMP), &spec_dump(c)?)?;
    let config = ConfigDump {
        id: c.id.clone(),
        name: c.meta.request.name.clone(),
        rootfs_image: c.meta.request.image.clone(),
        rootfs_image_ref: c.meta.image_id.clone(),
        rootfs_image_name: c.meta.image_name.clone(),
        runtime: c.runtime.clone(),
        created_time: rfc3339(from_ns(c.status.created_ns)),
        checkpointed_time: c.checkpointed.clone(),
        restored_time: "0001-01-01T00:00:00Z".into(),
        restored: false,
        pod_sandbox_id: c.meta.sandbox_id.clone(),
    };
    write_json(&staging.join(CONFIG_DUMP), &config)?;
    write_json(&staging.join(STATUS_DUMP), &c.status)?;
    // CRIU writes its statistics into its work directory (runc's --work-path) when it has one.
    let stats = [staging.join("work"), staging.join(CHECKPOINT_DIR)]
        .into_iter()
        .map(|d| d.join(STATS_DUMP))
        .find(|p| p.is_file());
    if let Some(stats) = stats {
        std::fs::copy(&stats, staging.join(STATS_DUMP)).ctx(|| "copy stats-dump")?;
    }
    let work_log = staging.join("work").join(DUMP_LOG);
    if work_log.exists() {
        std::fs::copy(&work_log, staging.join(DUMP_LOG)).ctx(|| "copy dump.log")?;
    }
    if !c.meta.log_path.is_empty() && Path::new(&c.meta.log_path).is_file() {
        std::fs::copy(&c.meta.log_path, staging.join(CONTAINER_LOG))
            .ctx(|| format!("copy {}", c.meta.log_path))?;
    }
    let deleted = rootfs_diff(&c.upper, &staging.join(ROOTFS_DIFF))?;
    write_json(&staging.join(DELETED_FILES), &deleted)?;
    pack(staging, target)
}

/// The bundle's config.json with the pod's name and namespace among its annotations (as
/// containerd's specs carry them: checkpointctl shows them).
fn spec_dump(c: &Contents) -> Result<serde_json::Value> {
    let path = c.bundle.join("config.json");
    let text = std::fs::read(&path).ctx(|| format!("read {}", path.display()))?;
    let mut spec: serde_json::Value = serde_json::from_slice(&text)
        .map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    if let Some(ann) = spec
        .as_object_mut()
        .map(|o| {
            o.entry("annotations")
                .or_insert_with(|| serde_json::json!({}))
        })
        .and_then(|a| a.as_object_mut())
    {
        for (k, v) in [
            ("io.kubernetes.cri.sandbox-name", &c.pod.name),
            ("io.kubernetes.cri.sandbox-namespace", &c.pod.namespace),
            ("io.kubernetes.cri.sandbox-uid", &c.pod.uid),
        ] {
            ann.entry(k).or_insert_with(|| v.clone().into());
        }
    }
    Ok(spec)
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let json = serde_json::to_vec_pretty(value)
        .map_err(|e| Error::internal(format!("encode {}: {e}", path.display())))?;
    std::fs::write(path, json).ctx(|| format!("write {}", path.display()))
}

/// Packs `upper`'s new and changed files into the tar `out` and returns the paths the
/// container deleted (overlay whiteouts: 0/0 character devices), absolute in the container.
pub fn rootfs_diff(upper: &Path, out: &Path) -> Result<Vec<String>> {
    let file = File::create(out).ctx(|| format!("create {}", out.display()))?;
    let mut tar = tar::Builder::new(file);
    tar.follow_symlinks(false);
    let mut deleted = Vec::new();
    if upper.is_dir() {
        walk(upper, Path::new(""), &mut tar, &mut deleted)?;
    }
    tar.finish().ctx(|| format!("write {}", out.display()))?;
    deleted.sort();
    Ok(deleted)
}

fn walk(
    dir: &Path,
    rel: &Path,
    tar: &mut tar::Builder<File>,
    deleted: &mut Vec<String>,
) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .ctx(|| format!("read {}", dir.display()))?
        .collect::<std::io::Result<_>>()
        .ctx(|| format!("read {}", dir.display()))?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let name = rel.join(e.file_name());
        let md = std::fs::symlink_metadata(&path).ctx(|| format!("stat {}", path.display()))?;
        let ft = md.file_type();
        if ft.is_char_device() && md.rdev() == 0 {
            deleted.push(format!("/{}", name.display()));
            continue;
        }
        tar.append_path_with_name(&path, &name)
            .ctx(|| format!("archive {}", path.display()))?;
        if ft.is_dir() {
            walk(&path, &name, tar, deleted)?;
        }
    }
    Ok(())
}

/// Tars `staging` without its `work/` directory into `target`, through a temporary sibling of
/// its own (random name: a user's `<target>.part`, or a second checkpoint to the same
/// location, is never truncated or removed).
fn pack(staging: &Path, target: &Path) -> Result<()> {
    let part = crate::store::atomic::temp_path(target);
    let packed = (|| -> Result<()> {
        let file = File::create(&part).ctx(|| format!("create {}", part.display()))?;
        let mut tar = tar::Builder::new(file);
        tar.follow_symlinks(false);
        let mut names: Vec<_> = std::fs::read_dir(staging)
            .ctx(|| format!("read {}", staging.display()))?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .filter(|n| n != "work")
            .collect();
        names.sort();
        for n in names {
            let p = staging.join(&n);
            if p.is_dir() {
                tar.append_dir_all(&n, &p)
            } else {
                tar.append_path_with_name(&p, &n)
            }
            .ctx(|| format!("archive {}", p.display()))?;
        }
        let file = tar
            .into_inner()
            .ctx(|| format!("write {}", part.display()))?;
        file.sync_all().ctx(|| format!("sync {}", part.display()))?;
        std::fs::rename(&part, target)
            .ctx(|| format!("rename {} to {}", part.display(), target.display()))
    })();
    if packed.is_err() {
        let _ = std::fs::remove_file(&part);
    }
    packed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rootfs_diff_packs_changes_and_lists_whiteouts() {
        let dir = std::env::temp_dir().join(format!("bosun-diff-{}", std::process::id()));
        let upper = dir.join("upper");
        std::fs::create_dir_all(upper.join("etc")).expect("test fixture");
        std::fs::write(upper.join("etc/new.conf"), b"x").expect("test fixture");
        std::os::unix::fs::symlink("new.conf", upper.join("etc/link")).expect("test fixture");
        let out = dir.join("diff.tar");
        let deleted = rootfs_diff(&upper, &out).expect("test fixture");
        assert!(deleted.is_empty());
        let mut names: Vec<String> = tar::Archive::new(File::open(&out).expect("test fixture"))
            .entries()
            .expect("test fixture")
            .map(|e| {
                e.expect("test fixture")
                    .path()
                    .expect("test fixture")
                    .display()
                    .to_string()
            })
            .collect();
        names.sort();
        assert_eq!(names, ["etc", "etc/link", "etc/new.conf"]);
        // A whiteout needs mknod (root): checked where the tests run as root.
        if rustix::process::geteuid().is_root() {
            rustix::fs::mknodat(
                rustix::fs::CWD,
                upper.join("etc/gone"),
                rustix::fs::FileType::CharacterDevice,
                rustix::fs::Mode::from_raw_mode(0),
                0,
            )
            .expect("test fixture");
            assert_eq!(
                rootfs_diff(&upper, &out).expect("test fixture"),
                ["/etc/gone"]
            );
        }
        std::fs::remove_dir_all(&dir).expect("test fixture");
    }
}
