//! DELs handed over to a background retry: the sandbox went away (its RunPodSandbox failed)
//! with its DEL failed, so the network keeps what the DEL needs until it succeeds (issue 28).
//!
//! What is kept, in the network's own directory (`<root>/network`): the sandbox's record
//! (`<id>.json`, the one written before its first ADD, or a new one when only the embedded
//! network was reached) marked `deferred` with the pod's CNI identity, and a second pin of
//! its netns (`<id>.netns`, a bind mount: the sandbox's own pins go with it). Both survive a
//! restart, which resumes the retry; the pin goes once the DEL is done. After a reboot the pin
//! is an empty file and the DEL runs without a netns, as any DEL after a reboot does.

use std::path::{Path, PathBuf};

use super::cni::{Cni, Record};
use super::PodNetwork;
use crate::error::{Error, Result, ResultExt};

impl Cni {
    /// Where sandbox `id`'s netns is pinned while its DEL is deferred.
    fn pin_path(&self, id: &str) -> PathBuf {
        self.cache_dir.join(format!("{id}.netns"))
    }

    /// Whether sandbox `id`'s DEL was handed over (a record that cannot be read is not).
    pub(super) fn is_deferred(&self, id: &str) -> bool {
        matches!(self.read_record(id), Ok(Some(r)) if r.deferred.is_some())
    }

    /// [`super::Network::defer_detach`]: pins the netns, then marks (or writes) the record.
    pub(super) async fn defer(&self, pod: &PodNetwork) -> Result<PodNetwork> {
        let mut rec = match self.read_record(&pod.id)? {
            Some(r) => r,
            // Only the embedded network was reached (its lease journal says what it holds).
            None => Record {
                network: self
                    .native_plan()
                    .map(|p| p.name.clone())
                    .unwrap_or_default(),
                steps: Vec::new(),
                del_attempts: 0,
                deferred: None,
            },
        };
        let pin = self.pin_path(&pod.id);
        let mut kept = pod.clone();
        kept.netns = if crate::sandbox::is_nsfs_mount(&pod.netns) {
            let (from, to) = (pod.netns.clone(), pin.clone());
            tokio::task::spawn_blocking(move || pin_netns(&from, &to))
                .await
                .map_err(|e| Error::internal(format!("pin task: {e}")))??;
            pin.clone()
        } else {
            PathBuf::new()
        };
        rec.deferred = Some(kept.clone());
        if let Err(e) = self.write_record(&pod.id, &rec).await {
            let _ = unpin(&pin);
            return Err(e);
        }
        Ok(kept)
    }

    /// The deferred DELs recorded in the network's directory.
    pub(super) fn deferred_pods(&self) -> Vec<PodNetwork> {
        let Ok(rd) = std::fs::read_dir(&self.cache_dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                let id = name.strip_suffix(".json")?;
                self.read_record(id).ok().flatten()?.deferred
            })
            .collect()
    }

    /// Releases sandbox `id`'s pin (its DEL is done).
    pub(super) fn unpin(&self, id: &str) -> Result<()> {
        unpin(&self.pin_path(id))
    }

    /// At start: pins whose record is gone (a daemon killed between the end of a deferred DEL
    /// and the release of its pin) are released. Blocking.
    pub(super) fn sweep_pins(&self) -> Vec<String> {
        let Ok(rd) = std::fs::read_dir(&self.cache_dir) else {
            return Vec::new();
        };
        let mut released = Vec::new();
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(id) = name.strip_suffix(".netns") else {
                continue;
            };
            if self.is_deferred(id) {
                continue;
            }
            match unpin(&e.path()) {
                Ok(()) => released.push(id.to_string()),
                Err(err) => tracing::warn!("{err}"),
            }
        }
        released
    }
}

/// Bind-mounts netns pin `from` on `to` (an empty file made for it).
fn pin_netns(from: &Path, to: &Path) -> Result<()> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(to)
        .ctx(|| format!("create {}", to.display()))?;
    rustix::mount::mount_bind(from, to).map_err(|e| {
        let _ = std::fs::remove_file(to);
        Error::internal(format!("pin {} at {}: {e}", from.display(), to.display()))
    })
}

/// Detaches whatever is mounted on `pin` and removes it (idempotent).
fn unpin(pin: &Path) -> Result<()> {
    crate::sandbox::unmount_all(pin)?;
    crate::sandbox::remove_file(pin)
}
