//! Runtime domain: sandboxes and containers on runc, their on-disk state and crash recovery.

pub mod id;
pub mod meta;
pub mod recover;
pub mod reserve;
pub mod service;
pub mod status;
pub mod store;
pub mod table;

#[cfg(test)]
mod recover_tests;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod store_tests;

pub use meta::{
    ContainerEntry, ContainerMeta, Dns, NewContainer, PodName, PortMapping, SandboxEntry,
    SandboxMeta, SandboxRequest,
};
pub use recover::{load_all, reconcile, Loaded, Recovered};
pub use reserve::Reservation;
pub use service::Runtime;
pub use status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
pub use store::{Meta, StateDir, Status};
pub use table::{Entry, Filter, Table};
