//! OCI runtime edge: the runtime spec builder (and, later, the runc wrapper).
//!
//! [`build_spec`] turns a CRI container request ([`ContainerRequest`]), its pod
//! ([`SandboxContext`]), the image config and the mounted rootfs into runc's `config.json`,
//! following containerd's CRI plugin rule by rule.

pub mod caps;
mod devices;
pub mod host;
mod mounts;
mod namespaces;
mod process;
pub mod request;
mod resources;
pub mod seccomp;
mod security;
pub mod spec;
mod user;

pub use host::HostFacts;
pub use request::{
    CapabilityEdits, ContainerRequest, DeviceRequest, HugepageLimit, LinuxRequest, MountRequest,
    NamespaceMode, NamespaceOptions, Propagation, Resources, SandboxContext, Security,
    SecurityProfile, SupplementalGroupsPolicy,
};
pub use resources::{cgroups_path, CgroupSupport};
pub use security::{DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
pub use spec::{build_spec, SpecOptions, OCI_VERSION};
pub use user::{resolve_user, ResolvedUser};
