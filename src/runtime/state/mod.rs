//! State on disk, the truth after a crash: object records, their in-memory index, recovery.

pub mod dir;
pub mod id;
pub mod meta;
pub mod paths;
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

pub use dir::{Meta, StateDir, Status};
pub use meta::{
    ContainerEntry, ContainerMeta, Dns, NewContainer, PodName, PortMapping, SandboxEntry,
    SandboxMeta, SandboxRequest,
};
pub use recover::{load_all, reconcile, Loaded, Recovered};
pub use reserve::Reservation;
pub use status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
pub use table::{Entry, Filter, Table};
