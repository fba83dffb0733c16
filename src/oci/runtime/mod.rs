//! Parts of the OCI runtime edge split out of [`super::runc`]: exec (and its process-tree
//! killer), the fake runtime, and the monitor launcher trait with its fake.

pub(crate) mod exec;
pub(crate) mod exec_kill;
pub mod exec_stream;
pub mod fake;
pub mod fifo;
pub mod launcher;
pub(crate) mod proc_tree;

pub use exec_stream::{ExecKiller, ExecProcess, ExecStdio};
pub use fake::{Call, FakeRuntime};
pub use launcher::{FakeLauncher, MonitorLauncher, ProcessLauncher};
