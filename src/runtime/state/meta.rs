//! The immutable metadata of sandboxes and containers (`meta.json`) and the domain requests they come from.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::record::Meta;
use super::status::{ContainerStatus, SandboxStatus};
use super::table::Entry;
use crate::oci::{ContainerRequest, NamespaceMode, UserNamespace};

/// CRI PodSandboxMetadata.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodName {
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod uid.
    pub uid: String,
    /// Attempt number (the kubelet bumps it to recreate a sandbox).
    pub attempt: u32,
}

impl PodName {
    /// `name_namespace_uid_attempt`: containerd's sandbox name, the at-most-once key.
    pub fn key(&self) -> String {
        format!(
            "{}_{}_{}_{}",
            self.name, self.namespace, self.uid, self.attempt
        )
    }

    /// The hostname of a pod whose config names none (crictl, critest; the kubelet always sends
    /// one): its name with `_` as `-`, cut to a DNS label's 63 bytes, without a trailing `-` or
    /// `.` (critest's names are a prefix and a UUID, which the cut can end on a `-`).
    pub fn hostname(&self) -> String {
        let name: String = self.name.chars().take(63).collect();
        name.replace('_', "-")
            .trim_end_matches(['-', '.'])
            .to_string()
    }
}

/// CRI DNSConfig.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dns {
    /// Name servers.
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// resolv.conf options.
    pub options: Vec<String>,
}

/// A CRI PortMapping (recorded; served by networking).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PortMapping {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Port in the pod.
    pub container_port: i32,
    /// Port on the host.
    pub host_port: i32,
    /// Host address (empty: all).
    pub host_ip: String,
}

/// One RunPodSandbox request, reduced to the domain (`cri/` converts the proto into it).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxRequest {
    /// Metadata (required: name, namespace and uid non-empty).
    pub pod: PodName,
    /// Hostname; empty means the node's hostname (host network) or the pod name.
    pub hostname: String,
    /// Directory of the containers' log files (absolute; may be empty).
    pub log_directory: String,
    /// `None`: the host's resolv.conf is copied.
    pub dns: Option<Dns>,
    /// Port mappings.
    pub port_mappings: Vec<PortMapping>,
    /// Labels, returned unchanged.
    pub labels: BTreeMap<String, String>,
    /// Annotations, returned unchanged.
    pub annotations: BTreeMap<String, String>,
    /// The runtime handler asked for ("": the default, runc).
    pub runtime_handler: String,
    /// LinuxPodSandboxConfig.cgroup_parent.
    pub cgroup_parent: String,
    /// Network namespace: Pod (own) or Node (host).
    pub network: NamespaceMode,
    /// PID namespace: Pod (shared pod namespace with an init), Container or Node.
    pub pid: NamespaceMode,
    /// IPC namespace: Pod (own) or Node (host).
    pub ipc: NamespaceMode,
    /// Namespaced sysctls.
    pub sysctls: BTreeMap<String, String>,
    /// The pod's security context allows privileged containers.
    pub privileged: bool,
    /// The pod's own user namespace (CRI userns mode POD); `None`: the host's users.
    pub userns: Option<UserNamespace>,
}

/// `meta.json` of a sandbox.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxMeta {
    /// The request as accepted.
    pub request: SandboxRequest,
    /// The hostname the pod got (request's, or the node's for host network).
    pub hostname: String,
    /// The volatile directory: pinned namespaces, pod files, shm.
    pub state_dir: PathBuf,
}

impl Meta for SandboxMeta {
    fn name_key(&self) -> String {
        self.request.pod.key()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.request.labels.get(key).map(String::as_str)
    }
}

/// One CreateContainer request, reduced to the domain (`cri/` converts the proto into it).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewContainer {
    /// ContainerMetadata.attempt.
    pub attempt: u32,
    /// ContainerConfig.log_path, relative to the sandbox's log directory (may be empty).
    pub log_path: String,
    /// The container's configuration (name and image required).
    pub request: ContainerRequest,
}

/// `meta.json` of a container.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ContainerMeta {
    /// The owning sandbox's id.
    pub sandbox_id: String,
    /// The owning pod's key ([`PodName::key`]), part of the container's name key.
    pub pod_key: String,
    /// ContainerMetadata.attempt.
    pub attempt: u32,
    /// The request as accepted (name, image as asked, labels, annotations, config).
    pub request: ContainerRequest,
    /// The image id (config digest, `sha256:…`).
    pub image_id: String,
    /// The image's name as ContainerStatus reports it: its first repo tag at create (as
    /// containerd does), else the reference the request used.
    pub image_name: String,
    /// The image reference reported as `image_ref` (a repo digest when known, else the id).
    pub image_ref: String,
    /// The image's STOPSIGNAL as a number, recorded at create.
    pub image_stop_signal: Option<i32>,
    /// The CRI log file (absolute; empty: no log path given).
    pub log_path: String,
    /// `linux.cgroupsPath` as given to runc.
    pub cgroups_path: String,
    /// The overlay lower directories, top layer first.
    pub lower_dirs: Vec<PathBuf>,
    /// The volatile directory: bundle (config.json, rootfs mount point) and exit file.
    pub state_dir: PathBuf,
    /// The sandbox's runtime handler, by name ("": the default, as older metas say).
    pub runtime_handler: String,
}

impl ContainerMeta {
    /// The signal StopContainer sends first: CRI stop_signal, else STOPSIGNAL, else SIGTERM.
    pub fn stop_signal(&self) -> i32 {
        self.request
            .stop_signal
            .or(self.image_stop_signal)
            .unwrap_or(libc::SIGTERM)
    }
}

impl Meta for ContainerMeta {
    fn name_key(&self) -> String {
        format!("{}_{}_{}", self.request.name, self.pod_key, self.attempt)
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.request.labels.get(key).map(String::as_str)
    }
    fn pod_id(&self) -> Option<&str> {
        Some(&self.sandbox_id)
    }
}

/// A sandbox in the runtime's index.
pub type SandboxEntry = Entry<SandboxMeta, SandboxStatus>;
/// A container in the runtime's index.
pub type ContainerEntry = Entry<ContainerMeta, ContainerStatus>;
