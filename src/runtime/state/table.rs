//! One object kind's index: entries with per-entry status locks, lookups, filters, writes.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use super::id;
use super::load::Loaded;
use super::lock;
use super::record::{Meta, Status, META_FILE, STATUS_FILE};
use super::reserve::{self, Names, Reservation};
use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::store::atomic::{sync_dir, write_json_nosync, write_synced};
use crate::store::space::{name_fs, NameFs};

/// One object: immutable id and metadata, and its current status.
#[derive(Debug)]
pub struct Entry<M, S> {
    id: String,
    dir: PathBuf,
    meta: M,
    /// The current status; held only to clone or swap.
    status: Mutex<S>,
    /// Serialises status writers; held across the write and fsync, never by readers.
    write: Mutex<()>,
    /// The status in memory is newer than `status.json` (see [`Entry::update_even_if_full`]).
    behind: AtomicBool,
}

/// How often a status kept in memory for want of disk space is written again.
const SAVE_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl<M: Meta, S: Status> Entry<M, S> {
    /// The full id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The object's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The immutable metadata.
    pub fn meta(&self) -> &M {
        &self.meta
    }

    /// A copy of the current status (cheap; never waits for a disk write).
    pub fn status(&self) -> S {
        lock(&self.status).clone()
    }

    /// Applies `change` to a copy of the status, bumps the version, writes `status.json`
    /// atomically, and only then publishes the copy. On any error memory is unchanged.
    ///
    /// Not fsynced: a rename survives kill -9, and what a power cut could lose is reconciled
    /// at the next start (after a reboot every container is gone and every pod's namespaces
    /// too); two fsyncs cost 3-6 ms per update here, on every start, stop and exit.
    pub fn update(&self, change: impl FnOnce(&mut S) -> Result<()>) -> Result<S> {
        let _writer = lock(&self.write);
        let mut next = self.status();
        change(&mut next)?;
        next.set_version(next.version() + 1);
        write_json_nosync(&self.dir.join(STATUS_FILE), &next)
            .ctx(|| format!("{}: write status", self.id))?;
        self.behind.store(false, Ordering::Relaxed);
        *lock(&self.status) = next.clone();
        Ok(next)
    }

    /// [`Entry::update`] for a change that is a fact already, kept on disk elsewhere: a
    /// container's exit (its monitor's exit record), a pod stopped (its namespaces gone),
    /// what recovery derived from those. On a full disk memory takes it anyway and the status
    /// file is written again every second until there is room (or a later write or the
    /// object's removal supersedes it): a container that exited must not stay RUNNING, nor
    /// its pod unremovable, while the disk is full, and after a crash recovery derives the
    /// same state from the same facts (DESIGN rule 6). Other failures are [`Entry::update`]'s.
    pub fn update_even_if_full(
        self: &Arc<Self>,
        change: impl FnOnce(&mut S) -> Result<()>,
    ) -> Result<S> {
        let _writer = lock(&self.write);
        let mut next = self.status();
        change(&mut next)?;
        next.set_version(next.version() + 1);
        match write_json_nosync(&self.dir.join(STATUS_FILE), &next) {
            Ok(()) => self.behind.store(false, Ordering::Relaxed),
            Err(e) if e.kind() == ErrorKind::NoSpace => {
                tracing::warn!(id = %self.id, "write status: {e}; kept in memory until there is room");
                if !self.behind.swap(true, Ordering::Relaxed) {
                    save_later(Arc::downgrade(self));
                }
            }
            Err(e) => return Err(e.context(format!("{}: write status", self.id))),
        }
        *lock(&self.status) = next.clone();
        Ok(next)
    }

    /// Writes the status kept in memory if it is newer than the file.
    fn catch_up(&self) -> Result<()> {
        let _writer = lock(&self.write);
        if self.behind.load(Ordering::Relaxed) {
            write_json_nosync(&self.dir.join(STATUS_FILE), &self.status())?;
            self.behind.store(false, Ordering::Relaxed);
        }
        Ok(())
    }
}

/// Retries [`Entry::catch_up`] every [`SAVE_RETRY`] while the disk is full; stops once it
/// succeeds, fails otherwise (the object was removed: its directory is gone) or the entry is
/// dropped. Outside a tokio runtime (unit tests) nothing retries.
fn save_later<M: Meta, S: Status>(entry: Weak<Entry<M, S>>) {
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    rt.spawn(async move {
        loop {
            tokio::time::sleep(SAVE_RETRY).await;
            let Some(e) = entry.upgrade() else { return };
            match e.catch_up() {
                Ok(()) => {
                    tracing::info!(id = %e.id, "status written now that there is room");
                    return;
                }
                Err(err) if err.kind() == ErrorKind::NoSpace => {}
                Err(err) => {
                    tracing::debug!(id = %e.id, "status not written after all: {err}");
                    e.behind.store(false, Ordering::Relaxed);
                    return;
                }
            }
        }
    });
}

/// List filter; every set field must match (labels: all of them).
#[derive(Debug, Clone)]
pub struct Filter<St> {
    /// Id prefix.
    pub id_prefix: Option<String>,
    /// Any of these states (empty = all).
    pub states: Vec<St>,
    /// Label selector: each key must be present with this value.
    pub labels: HashMap<String, String>,
    /// Owning sandbox id (containers).
    pub pod_id: Option<String>,
}

impl<St> Default for Filter<St> {
    fn default() -> Self {
        Filter {
            id_prefix: None,
            states: Vec::new(),
            labels: HashMap::new(),
            pod_id: None,
        }
    }
}

/// The in-memory index of one kind over `<root>/<kind dir>/`.
#[derive(Debug)]
pub struct Table<M, S> {
    kind: &'static str,
    dir: PathBuf,
    index: Mutex<HashMap<String, Arc<Entry<M, S>>>>,
    names: Names,
}

impl<M: Meta, S: Status> Table<M, S> {
    pub(crate) fn new(kind: &'static str, dir: PathBuf) -> Self {
        Table {
            kind,
            dir,
            index: Mutex::new(HashMap::new()),
            names: Names::default(),
        }
    }

    /// Claims `name_key` under a fresh id; AlreadyExists naming the holder while another
    /// creation is in flight or the object exists. Released on drop unless [`Self::create`]d.
    pub fn reserve(&self, name_key: &str) -> Result<Reservation> {
        let mut new = id::new_id();
        while lock(&self.index).contains_key(&new) {
            new = id::new_id();
        }
        reserve::claim(&self.names, self.kind, name_key, &new)?;
        Ok(Reservation::new(
            self.names.clone(),
            name_key.to_string(),
            new,
        ))
    }

    /// Creates the object: directory, `meta.json` (first: no meta means it never existed),
    /// then `status.json` at version 1; indexed only when all are on disk.
    pub fn create(
        &self,
        reservation: Reservation,
        meta: M,
        mut status: S,
    ) -> Result<Arc<Entry<M, S>>> {
        let id = reservation.id().to_string();
        let dir = self.dir.join(&id);
        let ctx = || format!("{} {id}: create its record", self.kind);
        fs::create_dir(&dir).ctx(ctx).name_fs(&self.dir)?;
        status.set_version(1);
        // The meta synced, the status not (as every later status update), then one fsync of
        // the new directory for both renames and one of the kind directory for the new entry
        // (3 fsyncs: issue 13). A crash before the last reads as a creation that never got its
        // records (recovery removes or marks it UNKNOWN), and the call has not answered yet.
        // Only a power cut can lose the first status (kill -9 keeps the page cache): recovery
        // then finds the object without a readable status and reports it UNKNOWN, which is
        // what a reboot makes of a created container or pod anyway (their bundles and
        // namespaces are gone).
        let written = serde_json::to_vec_pretty(&meta)
            .map_err(Error::from)
            .and_then(|bytes| write_synced(&dir.join(META_FILE), &bytes))
            .and_then(|()| {
                crate::failpoint_check!(format!("{}.create.meta-written", self.kind))?;
                write_json_nosync(&dir.join(STATUS_FILE), &status)
            })
            .and_then(|()| sync_dir(&dir))
            .and_then(|()| sync_dir(&self.dir));
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&dir);
            return Err(name_fs(e.context(ctx()), &self.dir));
        }
        let entry = Arc::new(Entry {
            id: id.clone(),
            dir,
            meta,
            status: Mutex::new(status),
            write: Mutex::new(()),
            behind: AtomicBool::new(false),
        });
        lock(&self.index).insert(id, entry.clone());
        reservation.commit();
        Ok(entry)
    }

    /// Indexes a recovered object and re-claims its name. An object whose name another one
    /// recovered first holds (two records of one name: a removal a power cut undid) is
    /// indexed all the same, so it is listed and can be removed (issue 28: a list never
    /// misses an object that exists); the error says so, for the log.
    pub fn adopt(&self, loaded: Loaded<M, S>) -> Result<()> {
        let name = loaded.meta.name_key();
        let claimed = reserve::claim(&self.names, self.kind, &name, &loaded.id).map_err(|e| {
            e.context(format!(
                "{} {}: recover (listed all the same; the name stays with the other)",
                self.kind, loaded.id
            ))
        });
        let entry = Arc::new(Entry {
            dir: self.dir.join(&loaded.id),
            id: loaded.id.clone(),
            meta: loaded.meta,
            status: Mutex::new(loaded.status),
            write: Mutex::new(()),
            behind: AtomicBool::new(false),
        });
        lock(&self.index).insert(loaded.id, entry);
        claimed
    }

    /// The object with exactly this id, or NotFound.
    pub fn get(&self, id: &str) -> Result<Arc<Entry<M, S>>> {
        lock(&self.index).get(id).cloned().ok_or_else(|| {
            Error::not_found(format!(
                "{} {}: not found",
                self.kind,
                crate::error::echo(id)
            ))
        })
    }

    /// The object whose id starts with `prefix` (see [`id::resolve`]).
    pub fn resolve(&self, prefix: &str) -> Result<Arc<Entry<M, S>>> {
        let index = lock(&self.index);
        let full = id::resolve(self.kind, prefix, index.keys().map(String::as_str))?;
        index.get(&full).cloned().ok_or_else(|| {
            Error::not_found(format!(
                "{} {}: not found",
                self.kind,
                crate::error::echo(prefix)
            ))
        })
    }

    /// [`Entry::update`] on the object with exactly this id.
    pub fn update(&self, id: &str, change: impl FnOnce(&mut S) -> Result<()>) -> Result<S> {
        self.get(id)?.update(change)
    }

    /// Deletes the object's directory (meta first, so a crash midway reads as never
    /// created), then unindexes it and frees its name. Ok(false) if it was not there.
    pub fn remove(&self, id: &str) -> Result<bool> {
        let Ok(entry) = self.get(id) else {
            return Ok(false);
        };
        let _writer = lock(&entry.write);
        let ctx = || format!("{} {id}: remove", self.kind);
        match fs::remove_file(entry.dir.join(META_FILE)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::from(e).context(ctx()))
            }
            _ => {}
        }
        sync_dir(&entry.dir).ctx(ctx)?;
        crate::failpoint!(format!("{}.remove.meta-removed", self.kind));
        fs::remove_dir_all(&entry.dir).ctx(ctx)?;
        sync_dir(&self.dir).ctx(ctx)?;
        lock(&self.index).remove(id);
        reserve::release(&self.names, &entry.meta.name_key(), id);
        Ok(true)
    }

    /// Moves the object's directory into the trash (one rename: a crash after it reads as
    /// removed; deleted in the background), then unindexes it and frees its name. Ok(false)
    /// if it was not there. Not fsynced: kill -9 cannot undo a rename, a power cut can bring
    /// the record back, to be removed again.
    pub fn retire(&self, id: &str, trash: &super::trash::Trash) -> Result<bool> {
        let Ok(entry) = self.get(id) else {
            return Ok(false);
        };
        let _writer = lock(&entry.write);
        trash
            .put(super::trash::Bin::Durable, &entry.dir)
            .map_err(|e| e.context(format!("{} {id}: remove", self.kind)))?;
        crate::failpoint!(format!("{}.remove.meta-removed", self.kind));
        lock(&self.index).remove(id);
        reserve::release(&self.names, &entry.meta.name_key(), id);
        Ok(true)
    }

    /// The objects matching `filter`; holds the index lock only to clone matching Arcs.
    pub fn list(&self, filter: &Filter<S::State>) -> Vec<Arc<Entry<M, S>>> {
        let candidates: Vec<_> = lock(&self.index)
            .values()
            .filter(|e| matches_meta(e, filter))
            .cloned()
            .collect();
        if filter.states.is_empty() {
            return candidates;
        }
        candidates
            .into_iter()
            .filter(|e| filter.states.contains(&lock(&e.status).state()))
            .collect()
    }

    /// The number of objects.
    pub fn len(&self) -> usize {
        lock(&self.index).len()
    }

    /// Whether there are no objects.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn matches_meta<M: Meta, S: Status>(e: &Entry<M, S>, f: &Filter<S::State>) -> bool {
    f.id_prefix.as_deref().is_none_or(|p| e.id.starts_with(p))
        && f.pod_id
            .as_deref()
            .is_none_or(|p| e.meta.pod_id() == Some(p))
        && f.labels
            .iter()
            .all(|(k, v)| e.meta.label(k) == Some(v.as_str()))
}
