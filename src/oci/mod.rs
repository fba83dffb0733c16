//! OCI runtime edge: the runtime spec builder, the runc wrapper ([`OciRuntime`], [`Runc`],
//! [`FakeRuntime`]) and the monitor launcher ([`launch_monitor`], [`ExitWatcher`]).
//!
//! [`build_spec`] turns a CRI container request ([`ContainerRequest`]), its pod
//! ([`SandboxContext`]), the image config and the mounted rootfs into runc's `config.json`,
//! following containerd's CRI plugin rule by rule.

pub mod launch;
pub mod runc;
pub mod runtime;
pub mod spare;
pub mod spec;

// The spec builder's modules that other rooms name, at the paths they had before `spec/`.
pub(crate) use spec::mounts;
pub use spec::{caps, host, request, resources, stage, userns};

pub use host::HostFacts;
pub use launch::{launch_monitor, ContainerExit, ExitWatcher, Launched, MonitorArgs};
pub use request::{
    CapabilityEdits, ContainerRequest, DeviceRequest, HugepageLimit, IdMapping, LinuxRequest,
    MountRequest, NamespaceMode, NamespaceOptions, Propagation, Resources, SandboxContext,
    Security, SecurityProfile, SupplementalGroupsPolicy, UserNamespace, UserNamespaceMode,
};
pub use resources::{cgroups_path, CgroupSupport};
pub use runc::{ExecOutput, FakeRuntime, OciRuntime, Runc, State, EXEC_OUTPUT_CAP};
pub use runtime::{FakeLauncher, MonitorLauncher, ProcessLauncher};
pub use spec::{build_spec, SpecOptions, OCI_VERSION};
pub use spec::{resolve_user, ResolvedUser, DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
