//! Domain types: what the OCI spec builder needs from a CRI CreateContainer request and its pod.
//!
//! These are plain, serde-serialisable values (they become the container's immutable
//! `meta.json`); `cri/` converts the generated proto types into them. Where CRI uses a zero or an
//! empty string for "unset", these types use `Option`, so the conversion is the only place that
//! knows the wire conventions.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One CRI CreateContainer request, reduced to what the runtime keeps and the spec needs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerRequest {
    /// ContainerMetadata.name (used in error messages and the spec annotations).
    pub name: String,
    /// The image reference as the kubelet asked for it (ImageSpec.image).
    pub image: String,
    /// CRI `command`: replaces the image ENTRYPOINT when non-empty.
    pub command: Vec<String>,
    /// CRI `args`: replaces the image CMD when non-empty.
    pub args: Vec<String>,
    /// CRI `working_dir`; `None` when the request left it empty.
    pub working_dir: Option<String>,
    /// CRI `envs` in request order; values are bytes on the wire (KeyValue.value).
    pub envs: Vec<(String, Vec<u8>)>,
    /// Bind mounts (volumes, service-account tokens, `/etc/hosts` overrides, ...).
    pub mounts: Vec<MountRequest>,
    /// Host device nodes exposed to the container.
    pub devices: Vec<DeviceRequest>,
    /// Allocate a terminal (`process.terminal`).
    pub tty: bool,
    /// Keep stdin open (the monitor's concern; recorded here).
    pub stdin: bool,
    /// Close stdin after the first attach detaches (the monitor's concern; recorded here).
    pub stdin_once: bool,
    /// Labels, opaque to the spec builder.
    pub labels: BTreeMap<String, String>,
    /// Annotations, opaque to the spec builder.
    pub annotations: BTreeMap<String, String>,
    /// Linux resources and security context.
    pub linux: LinuxRequest,
    /// CRI `stop_signal` as a signal number; `None` means the image's STOPSIGNAL, else SIGTERM.
    pub stop_signal: Option<i32>,
}

/// `LinuxContainerConfig`: resources and security context.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LinuxRequest {
    /// cgroup limits and the OOM score.
    pub resources: Resources,
    /// Users, capabilities, namespaces, profiles.
    pub security: Security,
}

/// How a bind mount propagates mount events (CRI MountPropagation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Propagation {
    /// `rprivate`: no propagation (the CRI default).
    #[default]
    Private,
    /// `rslave`: host mounts appear in the container.
    HostToContainer,
    /// `rshared`: both ways (needs a shared host mount; the kubelet allows it only privileged).
    Bidirectional,
}

/// A CRI Mount.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MountRequest {
    /// Absolute path inside the container.
    pub container_path: String,
    /// Host path; created as a directory when missing (containerd does the same).
    pub host_path: String,
    /// Mount read-only.
    pub readonly: bool,
    /// Mount propagation.
    pub propagation: Propagation,
    /// Recorded but ignored: bosun has no SELinux support.
    pub selinux_relabel: bool,
    /// Make every submount read-only too (`rro`; needs runtime support).
    pub recursive_read_only: bool,
    /// An image volume reference (CRI Mount.image); not supported, refused when set.
    pub image: Option<String>,
    /// ID-map the mount with these uid ranges (CRI Mount.uidMappings); empty: not ID-mapped.
    pub uid_mappings: Vec<IdMapping>,
    /// The gid ranges of an ID-mapped mount (set together with `uid_mappings`).
    pub gid_mappings: Vec<IdMapping>,
}

/// One contiguous range of a user namespace or ID-mapped mount (CRI IDMapping, OCI
/// LinuxIDMapping): container ids `container_id..container_id + length` are host ids
/// `host_id..host_id + length`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdMapping {
    /// First id inside.
    pub container_id: u32,
    /// First id on the host.
    pub host_id: u32,
    /// Number of ids.
    pub length: u32,
}

/// A pod's own user namespace (CRI `userns_options` with mode POD): its uid and gid maps.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct UserNamespace {
    /// uid ranges.
    pub uids: Vec<IdMapping>,
    /// gid ranges.
    pub gids: Vec<IdMapping>,
}

impl UserNamespace {
    /// The host uid and gid of the container's root (0:0 inside), when mapped.
    pub fn host_root(&self) -> Option<(u32, u32)> {
        Some((to_host(&self.uids, 0)?, to_host(&self.gids, 0)?))
    }
}

/// The host id of container id `id` under `map`; `None` when unmapped.
pub fn to_host(map: &[IdMapping], id: u32) -> Option<u32> {
    map.iter().find_map(|m| {
        let offset = id.checked_sub(m.container_id)?;
        (offset < m.length).then(|| m.host_id.checked_add(offset))?
    })
}

/// Which users a container runs with (CRI `userns_options` on a container).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum UserNamespaceMode {
    /// The host's users (mode NODE, or a pod without its own user namespace).
    #[default]
    Node,
    /// The pod's user namespace with these mappings (mode POD): must be the pod's own.
    Pod(UserNamespace),
}

/// A CRI Device.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct DeviceRequest {
    /// Path of the node inside the container.
    pub container_path: String,
    /// Host device node (or a directory of them); symlinks are resolved.
    pub host_path: String,
    /// Device cgroup access: one or more of `r`, `w`, `m`.
    pub permissions: String,
}

/// `LinuxContainerResources`. `None` means "not set" (CRI sends 0 / "" for that).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Resources {
    /// CFS period in microseconds.
    pub cpu_period: Option<u64>,
    /// CFS quota in microseconds (-1 means unlimited).
    pub cpu_quota: Option<i64>,
    /// CPU shares (relative weight).
    pub cpu_shares: Option<u64>,
    /// Memory limit in bytes.
    pub memory_limit_in_bytes: Option<i64>,
    /// Memory + swap limit in bytes.
    pub memory_swap_limit_in_bytes: Option<i64>,
    /// Requested OOM score adjustment (-1000..=1000); clamped to the daemon's own.
    pub oom_score_adj: Option<i64>,
    /// cpuset CPUs, e.g. `0-3,6`.
    pub cpuset_cpus: Option<String>,
    /// cpuset memory nodes.
    pub cpuset_mems: Option<String>,
    /// Huge page limits by page size.
    pub hugepage_limits: Vec<HugepageLimit>,
    /// Raw cgroup v2 files (`memory.high` = `...`); refused on cgroup v1.
    pub unified: BTreeMap<String, String>,
}
// CRI LinuxContainerResources has no pids limit: the kubelet limits pids at the pod cgroup.

/// One huge page limit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HugepageLimit {
    /// Page size as the kernel names it, e.g. `2MB`, `1GB`.
    pub page_size: String,
    /// Limit in bytes.
    pub limit: u64,
}

/// Where a namespace comes from (CRI NamespaceMode).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum NamespaceMode {
    /// Shared with the pod.
    #[default]
    Pod,
    /// The container's own.
    Container,
    /// The host's.
    Node,
    /// Another container's (pid only; `NamespaceOptions::target_id`).
    Target,
}

/// CRI NamespaceOption for a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct NamespaceOptions {
    /// Network namespace: Pod or Node.
    pub network: NamespaceMode,
    /// PID namespace: Pod, Container, Node or Target.
    pub pid: NamespaceMode,
    /// IPC namespace: Pod or Node.
    pub ipc: NamespaceMode,
    /// The container whose pid namespace is shared when `pid` is Target.
    pub target_id: String,
    /// The user namespace the request names; `None`: not given (the pod's applies).
    pub user: Option<UserNamespaceMode>,
}

/// A seccomp or AppArmor choice (CRI SecurityProfile).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SecurityProfile {
    /// No profile. The default for seccomp: CRI says an unset seccomp field means unconfined.
    #[default]
    Unconfined,
    /// The runtime's default profile. `cri/` maps an unset AppArmor field to this (containerd
    /// does, after kubernetes#51746).
    RuntimeDefault,
    /// A host profile: for seccomp an absolute JSON file path, for AppArmor a loaded profile name.
    Localhost(String),
}

/// How `supplemental_groups` combine with the image's /etc/group.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SupplementalGroupsPolicy {
    /// Groups listing the user in the image's /etc/group, plus `supplemental_groups`.
    #[default]
    Merge,
    /// Only the primary group and `supplemental_groups`.
    Strict,
}

/// Capability edits (CRI Capability).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CapabilityEdits {
    /// Added to the default set; `ALL` means every capability the daemon holds.
    pub add: Vec<String>,
    /// Removed from the set; `ALL` empties it before `add` (except `ALL`) applies.
    pub drop: Vec<String>,
    /// Raised into the ambient set (also made inheritable); must be in the final bounding set;
    /// `ALL` means the whole bounding set.
    pub add_ambient: Vec<String>,
}

/// `LinuxContainerSecurityContext`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Security {
    /// Capability edits.
    pub capabilities: CapabilityEdits,
    /// Privileged: every capability, host devices, no masked paths, rw sysfs.
    pub privileged: bool,
    /// Namespace sharing.
    pub namespaces: NamespaceOptions,
    /// Numeric uid; overridden by `run_as_username`.
    pub run_as_user: Option<i64>,
    /// Numeric gid; only valid with a user (CRI: "the runtime MUST error" otherwise).
    pub run_as_group: Option<i64>,
    /// User name resolved in the image's /etc/passwd.
    pub run_as_username: Option<String>,
    /// Mount the root filesystem read-only.
    pub readonly_rootfs: bool,
    /// Extra group ids.
    pub supplemental_groups: Vec<i64>,
    /// How the image's groups combine with `supplemental_groups`.
    pub supplemental_groups_policy: SupplementalGroupsPolicy,
    /// Set `no_new_privs` on the process.
    pub no_new_privs: bool,
    /// `None`: the default masked paths; `Some(list)`: exactly `list` (empty = none).
    ///
    /// proto3 cannot tell an empty repeated field from an unset one; `cri/` maps an empty list
    /// to `None` (the kubelet always sends the defaults for procMount Default; its Unmasked,
    /// which needs a pod user namespace, arrives as empty lists and so keeps the defaults over
    /// CRI; the standalone supervisor asks for `Some(vec![])`).
    pub masked_paths: Option<Vec<String>>,
    /// `None`: the default read-only paths; `Some(list)`: exactly `list` (see `masked_paths`).
    pub readonly_paths: Option<Vec<String>>,
    /// Seccomp choice.
    pub seccomp: SecurityProfile,
    /// AppArmor choice.
    pub apparmor: SecurityProfile,
}

impl Default for Security {
    fn default() -> Self {
        Security {
            capabilities: CapabilityEdits::default(),
            privileged: false,
            namespaces: NamespaceOptions::default(),
            run_as_user: None,
            run_as_group: None,
            run_as_username: None,
            readonly_rootfs: false,
            supplemental_groups: Vec::new(),
            supplemental_groups_policy: SupplementalGroupsPolicy::Merge,
            no_new_privs: false,
            masked_paths: None,
            readonly_paths: None,
            seccomp: SecurityProfile::Unconfined,
            apparmor: SecurityProfile::RuntimeDefault,
        }
    }
}

/// What the spec needs from the container's pod sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxContext {
    /// The sandbox id (spec annotation).
    pub id: String,
    /// The pod's hostname (`HOSTNAME` env); empty means the node's hostname.
    pub hostname: String,
    /// The pod's pinned network namespace file (unused with host network).
    pub net_ns: Option<PathBuf>,
    /// The pod's pinned IPC namespace file (unused with host IPC).
    pub ipc_ns: Option<PathBuf>,
    /// The pod's pinned UTS namespace file (unused with host network: UTS follows network).
    pub uts_ns: Option<PathBuf>,
    /// A process holding the pod's pid namespace (for pid mode Pod, unless host pid).
    pub pid_ns_holder: Option<u32>,
    /// The pod's pinned user namespace file (pods with their own user namespace).
    pub user_ns: Option<PathBuf>,
    /// The mappings of the pod's user namespace (recorded at RunPodSandbox).
    pub userns: Option<UserNamespace>,
    /// The init pid of the pid-Target container, resolved by the runtime from `target_id`.
    pub target_pid: Option<u32>,
    /// Host file bound at `/etc/hosts`.
    pub hosts_path: Option<PathBuf>,
    /// Host file bound at `/etc/hostname`.
    pub hostname_path: Option<PathBuf>,
    /// Host file bound at `/etc/resolv.conf`.
    pub resolv_conf_path: Option<PathBuf>,
    /// Host directory bound at `/dev/shm` (the pod's shm tmpfs).
    pub shm_path: Option<PathBuf>,
    /// LinuxPodSandboxConfig.cgroup_parent (informational: the caller computes cgroups_path).
    pub cgroup_parent: String,
    /// Pod sysctls; only namespaced ones are accepted.
    pub sysctls: BTreeMap<String, String>,
    /// The pod uses the host network (and UTS) namespace.
    pub host_network: bool,
    /// The pod uses the host IPC namespace.
    pub host_ipc: bool,
    /// The pod uses the host pid namespace.
    pub host_pid: bool,
    /// The pod's security context is privileged (required for privileged containers).
    pub privileged: bool,
}
