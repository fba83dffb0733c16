//! Leases: named holds (one per container) that keep snapshots alive after their image is removed.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result, ResultExt};
use crate::image::digest::Digest;
use crate::store::atomic;

/// Leases under `<dir>/<owner>.json`, mirrored in memory.
#[derive(Debug)]
pub struct Leases {
    dir: PathBuf,
    held: Mutex<HashMap<String, Vec<Digest>>>,
}

fn valid_owner(owner: &str) -> bool {
    !owner.is_empty()
        && owner.len() <= 128
        && owner
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
        && !owner.starts_with('.')
}

impl Leases {
    /// Loads the leases in `dir` (unreadable ones are kept as files and logged).
    pub fn open(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        // Writes a crash cut short (issue 16).
        for f in atomic::remove_temps(dir).1 {
            tracing::warn!("{f}");
        }
        let mut held = HashMap::new();
        for e in fs::read_dir(dir)
            .ctx(|| format!("list {}", dir.display()))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(owner) = name.strip_suffix(".json") else {
                continue;
            };
            match fs::read(e.path())
                .map_err(Error::from)
                .and_then(|b| serde_json::from_slice::<Vec<Digest>>(&b).map_err(Error::from))
            {
                Ok(chains) => {
                    held.insert(owner.to_string(), chains);
                }
                Err(err) => tracing::warn!(lease = owner, "unreadable lease: {err}"),
            }
        }
        Ok(Leases {
            dir: dir.to_path_buf(),
            held: Mutex::new(held),
        })
    }

    /// Holds `chain_ids` for `owner` (replacing what it held). Written without fsync (2 of
    /// a CreateContainer's fsyncs, issue 13): kill -9 keeps the page cache, and what a power
    /// cut can lose is the lease of a container that cannot run again (after a reboot its
    /// rootfs mount and bundle are gone: it is UNKNOWN or EXITED, and only its removal
    /// remains, which needs no layer).
    pub fn hold(&self, owner: &str, chain_ids: &[Digest]) -> Result<()> {
        if !valid_owner(owner) {
            return Err(Error::invalid(format!(
                "lease owner {owner:?}: not a valid name"
            )));
        }
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        atomic::write_json_nosync(&self.dir.join(format!("{owner}.json")), &chain_ids)?;
        held.insert(owner.to_string(), chain_ids.to_vec());
        Ok(())
    }

    /// Drops `owner`'s lease; absent is fine.
    pub fn release(&self, owner: &str) -> Result<()> {
        if !valid_owner(owner) {
            return Ok(());
        }
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        match fs::remove_file(self.dir.join(format!("{owner}.json"))) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::from(e).context(format!("release lease {owner}"))),
        }
        held.remove(owner);
        Ok(())
    }

    /// The owners of every lease.
    pub fn owners(&self) -> Vec<String> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.keys().cloned().collect()
    }

    /// Every chain id some lease holds.
    pub fn chain_ids(&self) -> HashSet<Digest> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.values().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hold_release_and_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let l = Leases::open(dir.path()).expect("open");
        let c = Digest::of(b"chain");
        l.hold("ctr-1", std::slice::from_ref(&c)).expect("hold");
        assert!(Leases::open(dir.path())
            .expect("reload")
            .chain_ids()
            .contains(&c));
        l.release("ctr-1").expect("release");
        l.release("ctr-1").expect("release twice");
        assert!(Leases::open(dir.path())
            .expect("reload")
            .chain_ids()
            .is_empty());
        assert!(l.hold("../x", &[]).is_err());
    }
}
