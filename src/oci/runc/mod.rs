//! Driving runc-compatible OCI runtime CLIs (runc, crun): the [`OciRuntime`] trait, [`Runc`], exec, kill, delete, `checkpoint` (CRIU) and the `features` probe.
//!
//! Every call spawns the runtime's command line (`<runtime> --root R --log-format json …`)
//! or, where runc's own behaviour is plain, does its work in-process ([`fifo`] for `start`,
//! [`delete`] for the delete of a stopped container). [`FakeRuntime`] stands in for it in
//! unit tests.

pub mod checkpoint;
mod command;
mod delete;
pub(crate) mod exec;
pub(crate) mod exec_kill;
pub mod exec_stream;
pub mod fake;
pub mod features;
pub mod fifo;
pub mod handlers;
pub(crate) mod proc_tree;

pub use command::{wait_exec, ExecOutput, OciRuntime, Runc, State, EXEC_OUTPUT_CAP};
pub use exec_stream::{ExecKiller, ExecProcess, ExecStdio};
pub use fake::{Call, FakeRuntime};
pub use handlers::{Handler, Handlers, NodeFacts};
