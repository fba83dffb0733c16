//! Runtime domain: sandboxes and containers on runc, their on-disk state and crash recovery.

mod bundle;
mod containers;
pub mod events;
mod exec_session;
mod handle;
pub mod id;
mod interactive;
mod interrupted;
mod log_reopen;
pub mod meta;
mod network;
pub mod paths;
mod port_forward;
pub mod recover;
pub mod reserve;
mod restore;
pub mod rootfs;
mod sandboxes;
pub mod service;
pub mod session;
pub mod session_io;
pub mod signal;
mod start;
pub mod stats;
pub mod status;
mod stop;
pub mod store;
pub mod table;
pub mod trash;
mod validate;

#[cfg(test)]
mod network_tests;
#[cfg(test)]
mod recover_tests;
#[cfg(test)]
mod status_tests;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
mod store_tests;
#[cfg(test)]
mod validate_fuzz;
#[cfg(test)]
mod validate_tests;

pub use meta::{
    ContainerEntry, ContainerMeta, Dns, NewContainer, PodName, PortMapping, SandboxEntry,
    SandboxMeta, SandboxRequest,
};
pub use recover::{load_all, reconcile, Loaded, Recovered};
pub use reserve::Reservation;
pub use service::Runtime;
pub use session::{Session, SessionEnd, StreamRequest, TerminalSize};
pub use status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
pub use store::{Meta, StateDir, Status};
pub use table::{Entry, Filter, Table};
pub use validate::{log_path as check_log_path, name as check_name, path as check_path};
