//! CheckpointContainer: CRIU dumps a running container through its runtime handler while it keeps running, and the archive is written at the asked location in the layout containerd and CRI-O write.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::checkpoint_archive::{self as archive, Contents};
use super::handle::Handle;
use super::service::{require_id, Runtime};
use super::state::meta::ContainerEntry;
use super::state::paths;
use super::state::status::ContainerState;
use crate::error::{echo, Error, Result, ResultExt};

impl Runtime {
    /// Checkpoints running container `id` into the archive `location` (an absolute path; its
    /// directory must exist). The container keeps running. Checked before anything is made:
    /// the container (NotFound), `location` (InvalidArgument), the container running, not
    /// being stopped, CRIU usable on this node and by its runtime handler (FailedPrecondition,
    /// saying why). A failure midway leaves no file. `timeout_s` (CRI's `timeout`, 0: ten
    /// minutes) bounds CRIU's dump.
    ///
    /// The work runs in its own task: a caller that goes away (the kubelet's deadline) does not
    /// cut the dump short (runc killed mid-dump) nor leave the staging directory behind; what
    /// it made is removed, since that caller was told the checkpoint failed.
    pub async fn checkpoint_container(
        self: &Arc<Self>,
        id: &str,
        location: &str,
        timeout_s: i64,
    ) -> Result<()> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let target = check_location(&id, location)?;
        let abandoned = Arc::new(AtomicBool::new(false));
        let (rt, flag) = (self.clone(), abandoned.clone());
        let task =
            tokio::spawn(
                async move { rt.checkpoint_owned(&entry, &target, timeout_s, &flag).await },
            );
        let _caller = Abandon(abandoned);
        task.await
            .map_err(|e| Error::internal(format!("container {id}: checkpoint task: {e}")))?
    }

    /// The checkpoint task: one at a time per container (a second waits), the state checked
    /// under the lifecycle lock, the dump and archive without it (see [`Handle::checkpoint`]).
    async fn checkpoint_owned(
        &self,
        entry: &ContainerEntry,
        target: &Path,
        timeout_s: i64,
        abandoned: &AtomicBool,
    ) -> Result<()> {
        let id = entry.id().to_string();
        let handle = self.handle(&id);
        let _dump = handle.checkpoint.lock().await;
        {
            let _life = handle.lifecycle.lock().await;
            if self.state.containers.get(&id).is_err() {
                return Err(Error::not_found(format!(
                    "container {id}: checkpoint: removed while the checkpoint waited"
                )));
            }
            let st = entry.status().state();
            if st != ContainerState::Running {
                return Err(Error::precondition(format!(
                    "container {id}: checkpoint: container is {st:?}, only a running container \
                     can be checkpointed"
                )));
            }
            if handle.stop_in_flight() || handle.is_exited() {
                return Err(Error::precondition(format!(
                    "container {id}: checkpoint: the container is being stopped"
                )));
            }
            if self.host.criu.is_none() {
                return Err(Error::precondition(format!(
                    "container {id}: checkpoint: {}",
                    self.host.criu_why
                )));
            }
            let handler = self.handler_of(&id);
            if let Some(why) = &handler.no_checkpoint {
                return Err(Error::precondition(format!(
                    "container {id}: checkpoint: runtime handler {:?}: {why}",
                    handler.name
                )));
            }
        }
        let staging = staging_dir(target);
        let mut result = self.dump_and_pack(entry, &staging, target, timeout_s).await;
        if let Err(e) = std::fs::remove_dir_all(&staging).or_else(|e| match e.kind() {
            std::io::ErrorKind::NotFound => Ok(()),
            _ => Err(e),
        }) {
            tracing::warn!(container = %id, "checkpoint: remove {}: {e}", staging.display());
        }
        if let Err(e) = result {
            result = Err(stopped_meanwhile(&handle, &id, e).await);
        } else if abandoned.load(Ordering::SeqCst) {
            tracing::warn!(
                container = %id,
                "checkpoint: the caller went away before it finished: {} removed",
                target.display()
            );
            let _ = std::fs::remove_file(target);
        }
        result
    }

    /// CRIU's dump into `staging/checkpoint`, then the archive at `target`.
    async fn dump_and_pack(
        &self,
        entry: &ContainerEntry,
        staging: &Path,
        target: &Path,
        timeout_s: i64,
    ) -> Result<()> {
        let id = entry.id().to_string();
        let images = staging.join(archive::CHECKPOINT_DIR);
        let work = staging.join("work");
        for d in [&images, &work] {
            std::fs::create_dir_all(d)
                .ctx(|| format!("container {id}: checkpoint: create {}", d.display()))?;
        }
        let timeout = match timeout_s {
            t if t > 0 => Duration::from_secs(t as u64),
            _ => crate::oci::runc::checkpoint::CHECKPOINT_TIMEOUT,
        };
        let handler = self.handler_of(&id).clone();
        let t = std::time::Instant::now();
        let dump = crate::oci::runc::checkpoint::Dump {
            images,
            work,
            timeout,
        };
        handler.runtime.checkpoint(&id, &dump).await?;
        tracing::info!(container = %id, ms = t.elapsed().as_millis() as u64, "CRIU dump done");
        let meta = entry.meta().clone();
        let contents = Contents {
            id: id.clone(),
            bundle: paths::bundle(&meta.state_dir),
            status: entry.status(),
            runtime: handler.name.clone(),
            pod: self
                .sandbox(&meta.sandbox_id)
                .map(|sb| sb.meta().request.pod.clone())
                .unwrap_or_default(),
            upper: self.layout.rw_dir(&id).join("upper"),
            checkpointed: rfc3339(SystemTime::now()),
            meta,
        };
        let (s, t) = (staging.to_path_buf(), target.to_path_buf());
        tokio::task::spawn_blocking(move || archive::write(&contents, &s, &t))
            .await
            .map_err(|e| Error::internal(format!("checkpoint task: {e}")))?
            .map_err(|e| e.context(format!("container {id}: checkpoint")))
    }
}

/// Marks the checkpoint abandoned when the caller's future is dropped before it finished.
struct Abandon(Arc<AtomicBool>);

impl Drop for Abandon {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// A failed dump of a container that stopped meanwhile (a StopContainer's kill, or its own
/// exit: CRIU then fails on the vanished processes) says so; other failures are unchanged.
async fn stopped_meanwhile(handle: &Handle, id: &str, e: Error) -> Error {
    if !handle.stop_in_flight() && !handle.is_exited() {
        // CRIU can notice the death before the monitor has reported it.
        let _ = tokio::time::timeout(Duration::from_secs(1), handle.exited()).await;
    }
    if !handle.stop_in_flight() && !handle.is_exited() {
        return e;
    }
    Error::precondition(format!(
        "container {id}: checkpoint: the container was stopped during the checkpoint \
         (StopContainer or its own exit); no archive was written ({})",
        e.message()
    ))
}

/// The archive path: `location` absolute, not a directory, in an existing directory.
fn check_location(id: &str, location: &str) -> Result<PathBuf> {
    let bad = |why: String| Error::invalid(format!("container {id}: checkpoint: location {why}"));
    if location.is_empty() {
        return Err(bad("is required (the archive's absolute path)".into()));
    }
    let path = PathBuf::from(location);
    if !path.is_absolute() {
        return Err(bad(format!("{:?} is not an absolute path", echo(location))));
    }
    if path.is_dir() {
        return Err(bad(format!(
            "{:?} is a directory, not an archive path",
            echo(location)
        )));
    }
    match path.parent() {
        Some(dir) if dir.is_dir() => Ok(path),
        _ => Err(bad(format!(
            "{:?}: its directory does not exist",
            echo(location)
        ))),
    }
}

/// A fresh directory beside `target` (same file system) for CRIU's images and the files.
fn staging_dir(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(
        ".{name}.bosun-checkpoint-{:016x}",
        rand::random::<u64>()
    ))
}

/// `t` as RFC 3339 with nanoseconds, UTC (Go's `time.RFC3339Nano`, what checkpointctl parses).
pub(super) fn rfc3339(t: SystemTime) -> String {
    let mut out = Vec::new();
    crate::monitor::timestamp::push_rfc3339_nano(&mut out, t);
    String::from_utf8_lossy(&out).into_owned()
}

/// Unix nanoseconds as a time.
pub(super) fn from_ns(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_must_be_an_absolute_file_path_in_an_existing_directory() {
        for (loc, want) in [
            ("", "is required"),
            ("rel/a.tar", "not an absolute path"),
            ("/", "is a directory"),
            ("/nonexistent-bosun-dir/a.tar", "directory does not exist"),
        ] {
            let e = check_location("c1", loc).expect_err("refused");
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument, "{loc}");
            assert!(e.message().contains(want), "{loc}: {e}");
        }
        let tmp = std::env::temp_dir().join("x.tar");
        assert_eq!(
            check_location("c1", tmp.to_str().expect("test fixture")).expect("test fixture"),
            tmp
        );
    }

    #[test]
    fn staging_is_a_hidden_sibling() {
        let s = staging_dir(Path::new("/var/lib/kubelet/checkpoints/c.tar"));
        assert_eq!(s.parent(), Some(Path::new("/var/lib/kubelet/checkpoints")));
        assert!(s
            .file_name()
            .expect("test fixture")
            .to_string_lossy()
            .starts_with(".c.tar.bosun-checkpoint-"));
    }
}
