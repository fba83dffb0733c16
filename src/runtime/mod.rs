//! Runtime domain state: ids, versioned statuses, the on-disk state directory and crash recovery.

pub mod id;
pub mod recover;
pub mod reserve;
pub mod status;
pub mod store;
pub mod table;

#[cfg(test)]
mod recover_tests;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod store_tests;

pub use recover::{load_all, reconcile, Loaded, Recovered};
pub use reserve::Reservation;
pub use status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
pub use store::{Meta, StateDir, Status};
pub use table::{Entry, Filter, Table};
