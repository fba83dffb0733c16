//! Runtime domain: sandboxes and containers on runc, their on-disk state and crash recovery.

mod bundle;
mod checkpoint;
pub mod checkpoint_archive;
mod checkpoint_restore_archive;
mod container_lifecycle;
pub mod events;
mod handle;
mod interrupted;
mod log_reopen;
mod network;
pub mod overlay_probe;
mod pod_lifecycle;
mod restore;
mod restore_checkpoint;
pub mod rootfs;
pub mod service;
pub mod session;
pub mod signal;
mod start;
pub mod state;
pub mod stats;
mod stop;
mod validate;

#[cfg(test)]
mod list_tests;
#[cfg(test)]
mod network_tests;
#[cfg(test)]
mod stop_tests;
#[cfg(test)]
pub(crate) mod test_fixture;
#[cfg(test)]
mod validate_fuzz;
#[cfg(test)]
mod validate_tests;

pub use service::Runtime;
pub use session::{Session, SessionEnd, StreamRequest, TerminalSize};
// `crate::runtime::{meta, status}` as before the state room (pod/, cli/ and cri/ name them).
pub use state::{
    load_all, reconcile, ContainerEntry, ContainerMeta, ContainerState, ContainerStatus, Dns,
    Entry, Filter, Loaded, Meta, NewContainer, PodName, PortMapping, Recovered, Reservation,
    SandboxEntry, SandboxMeta, SandboxRequest, SandboxState, SandboxStatus, StateDir, Status,
    Table,
};
pub use state::{meta, status};
pub use validate::{log_path as check_log_path, name as check_name, path as check_path};
