//! State on disk, the truth after a crash: object records, their in-memory index, recovery.

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
