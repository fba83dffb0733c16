//! The runtime-spec builder: a CRI container request, its pod, the image config and the host's facts in, runc's `config.json` out.
//!
//! [`build_spec`] follows containerd's CRI plugin rule by rule. Nothing here drives a
//! container: the few host effects are detection at start ([`host`], which also asks the
//! runtime's `features` through [`crate::oci::runc`]) and the mounts staged for what the runtime
//! cannot do itself ([`stage`]).

pub mod apparmor;
mod build;
pub mod caps;
mod devices;
pub mod host;
pub(crate) mod mounts;
mod namespaces;
mod process;
pub mod request;
pub mod resources;
pub mod seccomp;
mod security;
pub mod stage;
mod user;
pub mod userns;

pub use build::{build_spec, SpecOptions, OCI_VERSION};
pub use security::{DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
pub use user::{resolve_user, ResolvedUser};
