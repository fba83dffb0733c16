//! State on disk, the truth after a crash: object records, their in-memory index, recovery.

// What this room assumes (DESIGN rules 6-8, docs/architecture.md "State on disk"):
//
// On disk, under <root>, durable: {sandboxes,containers}/<id>/meta.json, immutable and written
// first (a directory without one never finished its creation), and status.json, replaced whole
// by a rename with its version bumped (record.rs, table.rs). Under <state>, volatile: pod
// namespaces and files, bundles, the monitor's exit record, runc's root (paths.rs). A removal
// is one rename into <root>/trash or <state>/trash, deleted in the background (trash.rs).
//
// Derived, never stored: an object's state, from its timestamps (status.rs); the in-memory
// index and the name reservations, rebuilt from the records at each start (table.rs,
// reserve.rs). Memory changes only after the write to disk succeeded, but for facts kept on
// disk elsewhere (an exit in the monitor's record, a stop whose namespaces are gone): on a full
// disk those are published anyway and their status written once there is room (issue 28,
// Entry::update_even_if_full).
//
// Recovery, before the daemon serves: load.rs reads every record back and never fails as a
// whole (stale temp files deleted, a directory without meta.json removed, an unreadable
// status read as UNKNOWN, created when meta.json was written); recover.rs reconciles a
// container's status with its monitor's exit record and liveness; StateDir::adopt indexes the
// result. runtime/restore.rs, above this room, runs it all in order and does what needs live
// processes (monitors, runc, namespaces, CNI).
//
// Imports go one way: nothing here names runtime/ outside state/, and inside it
// dir -> table -> load -> record -> status has no way back.

use std::sync::{Mutex, MutexGuard, PoisonError};

pub mod dir;
pub mod id;
pub mod load;
pub mod meta;
pub mod paths;
pub mod record;
pub mod recover;
pub mod reserve;
pub mod status;
pub mod table;
pub mod trash;

#[cfg(test)]
mod dir_tests;
#[cfg(test)]
mod recover_tests;
#[cfg(test)]
mod status_tests;

pub use dir::StateDir;
pub use load::{load_all, Loaded, Recovered};
pub use meta::{
    ContainerEntry, ContainerMeta, Dns, NewContainer, PodName, PortMapping, SandboxEntry,
    SandboxMeta, SandboxRequest,
};
pub use record::{Meta, Status};
pub use recover::reconcile;
pub use reserve::Reservation;
pub use status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
pub use table::{Entry, Filter, Table};

/// Locks `m`, taking over a lock a panicking holder poisoned rather than panicking too (every
/// std mutex of the runtime and its state is locked through it).
pub(in crate::runtime) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}
