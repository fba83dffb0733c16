//! The OCI edge, three rooms: [`spec`] builds runc's `config.json`, [`runc`] drives the runtime's command line, [`launch`] starts the per-container monitors.
//!
//! The rooms' main items are re-exported here ([`build_spec`], [`ContainerRequest`],
//! [`OciRuntime`], [`Runc`], [`FakeRuntime`], [`launch_monitor`], [`ExitWatcher`], …): the
//! rest of the daemon names `crate::oci::…`, not the room.

pub mod launch;
pub mod runc;
pub mod spec;

// The spec builder's modules that other rooms name, at the paths they had before `spec/`.
pub(crate) use spec::mounts;
pub use spec::{apparmor, caps, host, request, resources, stage, userns};

pub use host::HostFacts;
pub use launch::{
    launch_monitor, ContainerExit, ExitWatcher, FakeLauncher, Launched, MonitorArgs, MonitorLaunch,
    MonitorLauncher, ProcessLauncher,
};
pub use request::{
    CapabilityEdits, ContainerRequest, DeviceRequest, HugepageLimit, IdMapping, LinuxRequest,
    MountRequest, NamespaceMode, NamespaceOptions, Propagation, Resources, SandboxContext,
    Security, SecurityProfile, SupplementalGroupsPolicy, UserNamespace, UserNamespaceMode,
};
pub use resources::{cgroups_path, CgroupSupport};
pub use runc::{ExecOutput, FakeRuntime, OciRuntime, Runc, State, EXEC_OUTPUT_CAP};
pub use spec::{build_spec, SpecOptions, OCI_VERSION};
pub use spec::{resolve_user, ResolvedUser, DEFAULT_MASKED_PATHS, DEFAULT_READONLY_PATHS};
