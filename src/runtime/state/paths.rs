//! Where the runtime keeps each object: durable records under the root, volatile pieces under the state dir.

use std::path::{Path, PathBuf};

/// The runtime's directories.
#[derive(Debug, Clone)]
pub struct Layout {
    /// `<root>`: the durable records `{sandboxes,containers}/<id>/` and the rw layers (the
    /// image service measures `<root>/containers` as the container filesystem).
    pub durable: PathBuf,
    /// `<state>`: namespace pins, pod files, bundles, exit files, runc's root.
    pub volatile: PathBuf,
}

impl Layout {
    /// The layout for a daemon with `root` and `state`.
    pub fn new(root: &Path, state: &Path) -> Self {
        Layout {
            durable: root.to_path_buf(),
            volatile: state.to_path_buf(),
        }
    }

    /// Where bosun writes its AppArmor profile before loading it.
    pub fn apparmor_dir(&self) -> PathBuf {
        self.durable.join("apparmor")
    }

    /// runc's `--root`.
    pub fn runc_root(&self) -> PathBuf {
        self.volatile.join("runc")
    }

    /// A sandbox's volatile directory (pod files, shm).
    pub fn sandbox_dir(&self, id: &str) -> PathBuf {
        self.volatile.join("sandboxes").join(id)
    }

    /// A container's volatile directory (bundle, exit file).
    pub fn container_dir(&self, id: &str) -> PathBuf {
        self.volatile.join("containers").join(id)
    }

    /// A restored container's checkpoint (CRIU's images and work directory), beside its
    /// writable layer; removed with it.
    pub fn restore_dir(&self, id: &str) -> PathBuf {
        self.durable.join("containers").join(id).join("restore")
    }

    /// A container's writable layer (`upper`, `work`), kept until RemoveContainer.
    pub fn rw_dir(&self, id: &str) -> PathBuf {
        self.durable.join("containers").join(id).join("rw")
    }
}

/// A sandbox's pinned namespaces under its volatile directory.
pub fn ns_dir(sandbox_dir: &Path) -> PathBuf {
    sandbox_dir.join("ns")
}

/// A container's OCI bundle under its volatile directory.
pub fn bundle(container_dir: &Path) -> PathBuf {
    container_dir.join("bundle")
}

/// A container's rootfs mount point.
pub fn rootfs(container_dir: &Path) -> PathBuf {
    bundle(container_dir).join("rootfs")
}

/// The monitor's exit record.
pub fn exit_file(container_dir: &Path) -> PathBuf {
    container_dir.join("exit.json")
}
