//! Deferred deletion: removed objects' directories, renamed into a trash dir, deleted later.
//!
//! The rename is atomic and frees the path at once; one background worker deletes the
//! entries, and the next start finishes what a crash left (see [`Trash::sweep`]). Why:
//! deleting a container's files on the RPC path cost tens of milliseconds (issue 13), most of
//! it in the overlay's unmount, which syncs the whole upper filesystem. A rename into
//! `<dir>/trash` on the same filesystem is one syscall, and after it the object no longer
//! exists for recovery (it reads `{sandboxes,containers}/<id>` only). The worker detaches
//! every mount below an entry before it deletes anything: nothing is deleted through a mount.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{Error, Result, ResultExt};

/// The trash dir's name under the root and under the state dir.
pub const TRASH_DIR: &str = "trash";

/// Which trash an entry goes to: the one on the same filesystem as the entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bin {
    /// `<root>/trash`, for records and writable layers.
    Durable,
    /// `<state>/trash`, for bundles, rootfs mount points and pod files.
    Volatile,
}

#[derive(Debug, Default)]
struct Queue {
    paths: VecDeque<PathBuf>,
    /// A worker is draining the queue.
    running: bool,
}

/// The two trash dirs and the queue of their entries still to delete.
#[derive(Debug)]
pub struct Trash {
    durable: PathBuf,
    volatile: PathBuf,
    queue: Arc<Mutex<Queue>>,
}

impl Trash {
    /// The trash dirs under `root` and `state`, created if missing; nothing is queued yet
    /// (see [`Trash::sweep`]).
    pub fn open(root: &Path, state: &Path) -> Result<Trash> {
        let (durable, volatile) = (root.join(TRASH_DIR), state.join(TRASH_DIR));
        for dir in [&durable, &volatile] {
            std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        }
        Ok(Trash {
            durable,
            volatile,
            queue: Arc::default(),
        })
    }

    /// The directory of `bin`.
    pub fn dir(&self, bin: Bin) -> &Path {
        match bin {
            Bin::Durable => &self.durable,
            Bin::Volatile => &self.volatile,
        }
    }

    /// Moves `path` into `bin` (one rename: it is gone from where it was, also for a crash
    /// that follows) and queues its deletion. Ok(false) when `path` does not exist. Where the
    /// rename is refused (another filesystem), `path` is deleted here and now instead.
    pub fn put(&self, bin: Bin, path: &Path) -> Result<bool> {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let to = self
            .dir(bin)
            .join(format!("{name}-{:016x}", rand::random::<u64>()));
        match std::fs::rename(path, &to) {
            Ok(()) => {
                self.enqueue(to);
                Ok(true)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => {
                tracing::debug!("trash {}: rename: {e}; deleting in place", path.display());
                delete(path)?;
                Ok(true)
            }
        }
    }

    /// Queues every entry the trash dirs hold (what a crash kept the previous daemon from
    /// deleting); returns how many. Volatile entries first: a rootfs overlay is unmounted
    /// before its writable layer is deleted.
    pub fn sweep(&self) -> usize {
        let mut n = 0;
        for dir in [&self.volatile, &self.durable] {
            let Ok(rd) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in rd.flatten() {
                self.enqueue(e.path());
                n += 1;
            }
        }
        n
    }

    /// Whether nothing is queued or being deleted.
    pub fn is_idle(&self) -> bool {
        let q = super::lock(&self.queue);
        q.paths.is_empty() && !q.running
    }

    /// Queues `path`; starts the worker on tokio's blocking pool unless one runs (outside a
    /// runtime, in unit tests, the deletion happens here).
    fn enqueue(&self, path: PathBuf) {
        let start = {
            let mut q = super::lock(&self.queue);
            q.paths.push_back(path);
            !std::mem::replace(&mut q.running, true)
        };
        if !start {
            return;
        }
        let queue = self.queue.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || drain(&queue))),
            Err(_) => drain(&queue),
        }
    }
}

/// Deletes queued entries one after another (one at a time keeps the two cores free for the
/// RPCs) until the queue is empty.
fn drain(queue: &Mutex<Queue>) {
    loop {
        let next = {
            let mut q = super::lock(queue);
            let next = q.paths.pop_front();
            q.running = next.is_some();
            next
        };
        let Some(path) = next else { return };
        let t = std::time::Instant::now();
        match delete(&path) {
            Ok(()) => tracing::debug!(
                path = %path.display(),
                us = t.elapsed().as_micros() as u64,
                "trash entry deleted"
            ),
            Err(e) => tracing::warn!("trash: {e} (the next start tries again)"),
        }
    }
}

/// Detaches every mount below `path` (a container's rootfs overlay, staged mounts), then
/// deletes it; a mount that stays keeps everything in place.
fn delete(path: &Path) -> Result<()> {
    if std::fs::symlink_metadata(path).is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound) {
        return Ok(());
    }
    crate::failpoint!("trash.delete.begin");
    crate::oci::stage::unmount_and_remove(path)
        .map_err(|e| Error::internal(format!("delete {}: {}", path.display(), e.message())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .map(|rd| {
                rd.flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn put_frees_the_path_at_once_and_deletes_the_entry() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (root, state) = (tmp.path().join("root"), tmp.path().join("state"));
        let trash = Trash::open(&root, &state).expect("open");
        let obj = root.join("containers/abc");
        std::fs::create_dir_all(obj.join("rw/upper/etc")).expect("mkdir");
        std::fs::write(obj.join("rw/upper/etc/f"), b"x").expect("write");
        assert!(trash.put(Bin::Durable, &obj).expect("put"));
        assert!(!obj.exists(), "the path is free after put");
        // No runtime here: the worker ran inline.
        assert!(trash.is_idle());
        assert_eq!(files(&root.join(TRASH_DIR)), Vec::<String>::new());
        assert!(!trash.put(Bin::Durable, &obj).expect("put again"), "absent");
    }

    #[tokio::test]
    async fn the_worker_drains_in_the_background_and_a_sweep_finishes_leftovers() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (root, state) = (tmp.path().join("root"), tmp.path().join("state"));
        // What a daemon killed mid-delete left behind.
        let left = state.join(TRASH_DIR).join("bundle-0123");
        std::fs::create_dir_all(left.join("a/b")).expect("mkdir");
        let trash = Trash::open(&root, &state).expect("open");
        assert_eq!(trash.sweep(), 1);
        for i in 0..5 {
            let obj = state.join(format!("containers/c{i}"));
            std::fs::create_dir_all(obj.join("bundle")).expect("mkdir");
            assert!(trash.put(Bin::Volatile, &obj).expect("put"));
        }
        for _ in 0..500 {
            if trash.is_idle() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(trash.is_idle());
        assert_eq!(files(&state.join(TRASH_DIR)), Vec::<String>::new());
        assert_eq!(files(&state.join("containers")), Vec::<String>::new());
    }

    #[test]
    fn a_mount_below_an_entry_is_detached_not_deleted_through() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIP a_mount_below_an_entry_is_detached_not_deleted_through: needs root");
            return;
        }
        let tmp = tempfile::tempdir().expect("tmp");
        let (root, state) = (tmp.path().join("root"), tmp.path().join("state"));
        let trash = Trash::open(&root, &state).expect("open");
        // A host directory bind-mounted below the entry (a staged volume): its file survives.
        let host = tmp.path().join("volume");
        std::fs::create_dir_all(&host).expect("mkdir");
        std::fs::write(host.join("keep"), b"data").expect("write");
        let obj = state.join("containers/c1");
        let at = obj.join("stage/m0");
        std::fs::create_dir_all(&at).expect("mkdir");
        rustix::mount::mount_bind(&host, &at).expect("bind");
        assert!(trash.put(Bin::Volatile, &obj).expect("put"));
        assert!(trash.is_idle());
        assert_eq!(files(&state.join(TRASH_DIR)), Vec::<String>::new());
        assert_eq!(std::fs::read(host.join("keep")).expect("kept"), b"data");
    }
}
