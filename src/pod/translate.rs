//! A Pod manifest turned into the runtime's sandbox and container requests, as the kubelet fills CRI.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::OnceLock;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, Pod, PodSecurityContext, PodSpec, SecurityContext,
};
use sha2::{Digest, Sha256};

use super::labels;
use super::resources;
use crate::error::{Error, Result};
use crate::oci::request::{
    CapabilityEdits, LinuxRequest, MountRequest, NamespaceMode, NamespaceOptions, Security,
    SecurityProfile, SupplementalGroupsPolicy,
};
use crate::runtime::{Dns, NewContainer, PodName, PortMapping, SandboxRequest};

/// Where the kubelet keeps seccomp profiles named `localhostProfile` (relative paths).
pub const SECCOMP_PROFILE_ROOT: &str = "/var/lib/kubelet/seccomp";

/// One pod as the translation needs it.
pub struct PodContext<'a> {
    /// The pod as applied (metadata filled by the supervisor: uid, creationTimestamp).
    pub pod: &'a Pod,
    /// The pod's uid.
    pub uid: &'a str,
    /// The sandbox attempt (bumped when a sandbox is re-created).
    pub attempt: u32,
    /// `[pod] log_dir`: the root of `<ns>_<name>_<uid>/<container>/<restart>.log`.
    pub log_dir: &'a Path,
    /// `kubernetes.io/config.source`: `api` or `file`.
    pub source: &'a str,
}

impl PodContext<'_> {
    /// `metadata.name`.
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
    /// `metadata.namespace` (default `default`).
    pub fn namespace(&self) -> &str {
        self.pod
            .metadata
            .namespace
            .as_deref()
            .filter(|s| !s.is_empty())
            .unwrap_or("default")
    }
    /// `namespace/name`, for messages.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }
    fn spec(&self) -> Result<&PodSpec> {
        self.pod
            .spec
            .as_ref()
            .ok_or_else(|| Error::invalid(format!("pod {}: no spec", self.key())))
    }
    /// The pod's log directory: `<log_dir>/<ns>_<name>_<uid>`.
    pub fn log_directory(&self) -> std::path::PathBuf {
        self.log_dir
            .join(format!("{}_{}_{}", self.namespace(), self.name(), self.uid))
    }
}

/// What a container is to the pod.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ContainerKind {
    /// An init container: runs to completion before the next one.
    Init,
    /// An init container with restartPolicy Always: runs beside the app containers.
    Sidecar,
    /// A regular container.
    App,
}

impl ContainerKind {
    /// The value of the `io.bosun.container.kind` label.
    pub fn as_str(self) -> &'static str {
        match self {
            ContainerKind::Init => "init",
            ContainerKind::Sidecar => "sidecar",
            ContainerKind::App => "app",
        }
    }
}

/// The kubelet's labels of everything in the pod, plus bosun's supervised marker.
fn pod_labels(ctx: &PodContext) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::POD_NAME.to_string(), ctx.name().to_string()),
        (
            labels::POD_NAMESPACE.to_string(),
            ctx.namespace().to_string(),
        ),
        (labels::POD_UID.to_string(), ctx.uid.to_string()),
        (
            labels::SUPERVISED.to_string(),
            labels::SUPERVISED_VALUE.to_string(),
        ),
    ])
}

/// The RunPodSandbox request of the pod.
pub fn sandbox_request(ctx: &PodContext) -> Result<SandboxRequest> {
    let spec = ctx.spec()?;
    let psc = spec.security_context.clone().unwrap_or_default();
    let host_network = spec.host_network.unwrap_or(false);
    let mut labels = ctx.pod.metadata.labels.clone().unwrap_or_default();
    labels.extend(pod_labels(ctx));
    let mut annotations = ctx.pod.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(labels::CONFIG_SOURCE.to_string(), ctx.source.to_string());
    if let Some(t) = &ctx.pod.metadata.creation_timestamp {
        annotations.insert(labels::CONFIG_SEEN.to_string(), t.0.to_string());
    }
    let port_mappings = spec
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .filter(|p| p.host_port.is_some_and(|h| h > 0))
        .map(|p| PortMapping {
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            container_port: p.container_port,
            host_port: p.host_port.unwrap_or_default(),
            host_ip: p.host_ip.clone().unwrap_or_default(),
        })
        .collect();
    let sysctls = psc
        .sysctls
        .iter()
        .flatten()
        .map(|s| (s.name.clone(), s.value.clone()))
        .collect();
    let privileged = all_containers(spec).any(|(_, c)| {
        c.security_context
            .as_ref()
            .and_then(|s| s.privileged)
            .unwrap_or(false)
    });
    Ok(SandboxRequest {
        pod: PodName {
            name: ctx.name().to_string(),
            namespace: ctx.namespace().to_string(),
            uid: ctx.uid.to_string(),
            attempt: ctx.attempt,
        },
        hostname: hostname(ctx, spec),
        log_directory: ctx.log_directory().to_string_lossy().into_owned(),
        dns: dns(spec, Path::new("/etc/resolv.conf"))?,
        port_mappings,
        labels,
        annotations,
        runtime_handler: spec.runtime_class_name.clone().unwrap_or_default(),
        cgroup_parent: String::new(),
        network: if host_network {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        },
        pid: pid_mode(spec),
        ipc: if spec.host_ipc.unwrap_or(false) {
            NamespaceMode::Node
        } else {
            NamespaceMode::Pod
        },
        sysctls,
        privileged,
        userns: None,
    })
}

/// Every container of the spec with its kind, init containers first.
pub fn all_containers(spec: &PodSpec) -> impl Iterator<Item = (ContainerKind, &Container)> {
    let inits = spec.init_containers.iter().flatten().map(|c| {
        let kind = if c.restart_policy.as_deref() == Some("Always") {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        (kind, c)
    });
    inits.chain(spec.containers.iter().map(|c| (ContainerKind::App, c)))
}

fn pid_mode(spec: &PodSpec) -> NamespaceMode {
    if spec.host_pid.unwrap_or(false) {
        NamespaceMode::Node
    } else if spec.share_process_namespace.unwrap_or(false) {
        NamespaceMode::Pod
    } else {
        NamespaceMode::Container
    }
}

/// spec.hostname (else the pod name), cut to 63 characters as the kubelet does; host-network
/// pods keep the node's (empty).
fn hostname(ctx: &PodContext, spec: &PodSpec) -> String {
    if spec.host_network.unwrap_or(false) {
        return String::new();
    }
    let h = spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| ctx.name().to_string());
    let mut h: String = h.chars().take(63).collect();
    while h.ends_with(['-', '.']) {
        h.pop();
    }
    h
}

/// The pod's resolv.conf. With no cluster DNS on a single node, ClusterFirst behaves like
/// Default (the host's, as the kubelet does when it has no clusterDNS); `None` means copy the
/// host's file unchanged. dnsConfig entries are merged in as the kubelet merges them.
pub fn dns(spec: &PodSpec, host_resolv: &Path) -> Result<Option<Dns>> {
    let policy = spec.dns_policy.as_deref().unwrap_or("ClusterFirst");
    let cfg = spec.dns_config.as_ref();
    let mut d = match policy {
        "None" => Dns::default(),
        "Default" | "ClusterFirst" | "ClusterFirstWithHostNet" => {
            if cfg.is_none() {
                return Ok(None);
            }
            parse_resolv(&std::fs::read_to_string(host_resolv).unwrap_or_default())
        }
        other => {
            return Err(Error::invalid(format!(
                "spec.dnsPolicy: unsupported value {other:?}"
            )))
        }
    };
    if let Some(cfg) = cfg {
        for s in cfg.nameservers.iter().flatten() {
            if !d.servers.contains(s) {
                d.servers.push(s.clone());
            }
        }
        for s in cfg.searches.iter().flatten() {
            if !d.searches.contains(s) {
                d.searches.push(s.clone());
            }
        }
        for o in cfg.options.iter().flatten() {
            let name = o.name.clone().unwrap_or_default();
            d.options
                .retain(|x| x.split(':').next().unwrap_or_default() != name);
            d.options.push(match &o.value {
                Some(v) => format!("{name}:{v}"),
                None => name,
            });
        }
    }
    // resolv.conf limits (the kubelet's validation): 3 servers, 32 search domains.
    d.servers.truncate(3);
    d.searches.truncate(32);
    Ok(Some(d))
}

/// nameserver/search/options of a resolv.conf text.
pub fn parse_resolv(text: &str) -> Dns {
    let mut d = Dns::default();
    for line in text.lines() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("nameserver") => d.servers.extend(f.next().map(str::to_string)),
            Some("search") | Some("domain") => d.searches = f.map(str::to_string).collect(),
            Some("options") => d.options.extend(f.map(str::to_string)),
            _ => {}
        }
    }
    d
}

/// The node's memory in bytes (MemTotal), for oom_score_adj of Burstable containers.
pub fn node_memory() -> u64 {
    static MEM: OnceLock<u64> = OnceLock::new();
    *MEM.get_or_init(|| {
        std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("MemTotal:"))
                    .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            })
            .map_or(1 << 30, |kib| kib * 1024)
    })
}

/// A short, stable hash of the container's spec (the kubelet's container hash label).
pub fn container_hash(c: &Container) -> String {
    let json = serde_json::to_vec(c).unwrap_or_default();
    hex::encode(&Sha256::digest(&json)[..4])
}

/// The CreateContainer request of container `c`, restart number `restart_count`.
pub fn container_request(
    ctx: &PodContext,
    kind: ContainerKind,
    c: &Container,
    restart_count: u32,
    mounts: Vec<MountRequest>,
    envs: Vec<(String, Vec<u8>)>,
    image_user: Option<&str>,
) -> Result<NewContainer> {
    let spec = ctx.spec()?;
    let what = || format!("pod {}: container {}", ctx.key(), c.name);
    let image = c
        .image
        .clone()
        .filter(|i| !i.is_empty())
        .ok_or_else(|| Error::invalid(format!("{}: no image", what())))?;
    let mut labels = pod_labels(ctx);
    labels.insert(labels::CONTAINER_NAME.to_string(), c.name.clone());
    labels.insert(
        labels::CONTAINER_KIND.to_string(),
        kind.as_str().to_string(),
    );
    let mut annotations = BTreeMap::from([
        (labels::CONTAINER_HASH.to_string(), container_hash(c)),
        (
            labels::CONTAINER_RESTART_COUNT.to_string(),
            restart_count.to_string(),
        ),
        (
            labels::TERMINATION_MESSAGE_PATH.to_string(),
            c.termination_message_path
                .clone()
                .unwrap_or_else(|| "/dev/termination-log".into()),
        ),
        (
            labels::TERMINATION_MESSAGE_POLICY.to_string(),
            c.termination_message_policy
                .clone()
                .unwrap_or_else(|| "File".into()),
        ),
        (
            labels::POD_TERMINATION_GRACE_PERIOD.to_string(),
            spec.termination_grace_period_seconds
                .unwrap_or(30)
                .to_string(),
        ),
    ]);
    if let Some(ports) = c.ports.as_ref().filter(|p| !p.is_empty()) {
        annotations.insert(
            labels::CONTAINER_PORTS.to_string(),
            serde_json::to_string(ports).unwrap_or_default(),
        );
    }
    if let Some(h) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        annotations.insert(
            labels::CONTAINER_PRE_STOP_HANDLER.to_string(),
            serde_json::to_string(h).unwrap_or_default(),
        );
    }
    let stop_signal = match c.lifecycle.as_ref().and_then(|l| l.stop_signal.as_deref()) {
        Some(s) => Some(
            crate::runtime::signal::parse(s)
                .map_err(|e| Error::invalid(format!("{}: lifecycle.stopSignal: {e}", what())))?,
        ),
        None => None,
    };
    let qos = resources::qos_class(ctx.pod);
    let security = security(
        spec,
        spec.security_context.as_ref(),
        c.security_context.as_ref(),
        image_user,
    )
    .map_err(|e| Error::invalid(format!("{}: {e}", what())))?;
    Ok(NewContainer {
        attempt: restart_count,
        log_path: format!("{}/{}.log", c.name, restart_count),
        request: crate::oci::request::ContainerRequest {
            name: c.name.clone(),
            image,
            command: expand_all(c.command.as_deref(), &envs),
            args: expand_all(c.args.as_deref(), &envs),
            working_dir: c.working_dir.clone().filter(|w| !w.is_empty()),
            envs,
            mounts,
            devices: Vec::new(),
            tty: c.tty.unwrap_or(false),
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
            labels,
            annotations,
            linux: LinuxRequest {
                resources: resources::container_resources(c, qos, node_memory()),
                security,
            },
            stop_signal,
        },
    })
}

/// command/args with `$(VAR)` references to the container's environment expanded, as the
/// kubelet does.
fn expand_all(words: Option<&[String]>, envs: &[(String, Vec<u8>)]) -> Vec<String> {
    let known: std::collections::HashMap<&str, &[u8]> = envs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_slice()))
        .collect();
    words
        .unwrap_or_default()
        .iter()
        .map(|w| String::from_utf8_lossy(&super::env::expand(w, &known)).into_owned())
        .collect()
}

/// The kubelet's runAsNonRoot check: with runAsNonRoot, a runAsUser of 0 is refused; without
/// runAsUser, the image's USER (`image_user`) decides: an image that runs as root (no USER,
/// `0`, `0:…`) or as a user name, which cannot be verified without the image's passwd, is
/// refused with the kubelet's messages and what to change.
pub fn verify_non_root(
    pod: Option<&PodSecurityContext>,
    c: Option<&SecurityContext>,
    image_user: Option<&str>,
) -> std::result::Result<(), String> {
    let non_root = c
        .and_then(|c| c.run_as_non_root)
        .or(pod.and_then(|p| p.run_as_non_root));
    let run_as_user = c
        .and_then(|c| c.run_as_user)
        .or(pod.and_then(|p| p.run_as_user));
    const FIX: &str = "set securityContext.runAsUser to a non-zero uid";
    match (non_root, run_as_user) {
        (Some(true), Some(0)) => {
            return Err(
                "securityContext.runAsNonRoot is true but runAsUser is 0 (root): refusing to run"
                    .into(),
            )
        }
        (Some(true), None) => {}
        _ => return Ok(()),
    }
    // As containerd reports it in ImageStatus: the part before ':', numeric or a name.
    let user = image_user.unwrap_or_default();
    let user = user.split(':').next().unwrap_or_default();
    match user.parse::<i64>() {
        Ok(uid) if uid != 0 => Ok(()),
        Err(_) if !user.is_empty() => Err(format!(
            "container has runAsNonRoot and image has non-numeric user ({user}), cannot verify \
             user is non-root: {FIX}"
        )),
        _ => Err(format!(
            "container has runAsNonRoot and image will run as root: {FIX}"
        )),
    }
}

/// The container's security settings: the pod's securityContext with the container's over it;
/// refused as [`verify_non_root`] says.
pub fn security(
    spec: &PodSpec,
    pod: Option<&PodSecurityContext>,
    c: Option<&SecurityContext>,
    image_user: Option<&str>,
) -> std::result::Result<Security, String> {
    verify_non_root(pod, c, image_user)?;
    let pod = pod.cloned().unwrap_or_default();
    let c = c.cloned().unwrap_or_default();
    let run_as_user = c.run_as_user.or(pod.run_as_user);
    let run_as_group = c.run_as_group.or(pod.run_as_group);
    let mut groups: Vec<i64> = pod.supplemental_groups.clone().unwrap_or_default();
    if let Some(fs) = pod.fs_group {
        if !groups.contains(&fs) {
            groups.push(fs);
        }
    }
    let privileged = c.privileged.unwrap_or(false);
    let caps = c.capabilities.clone().unwrap_or(Capabilities::default());
    let seccomp = match c.seccomp_profile.as_ref().or(pod.seccomp_profile.as_ref()) {
        None => SecurityProfile::Unconfined,
        Some(p) => match p.type_.as_str() {
            "RuntimeDefault" => SecurityProfile::RuntimeDefault,
            "Unconfined" => SecurityProfile::Unconfined,
            "Localhost" => {
                let rel = p.localhost_profile.clone().unwrap_or_default();
                let path = Path::new(SECCOMP_PROFILE_ROOT).join(&rel);
                SecurityProfile::Localhost(path.to_string_lossy().into_owned())
            }
            other => return Err(format!("seccompProfile.type: unsupported value {other:?}")),
        },
    };
    let apparmor = match c
        .app_armor_profile
        .as_ref()
        .or(pod.app_armor_profile.as_ref())
    {
        None => SecurityProfile::RuntimeDefault,
        Some(p) => match p.type_.as_str() {
            "RuntimeDefault" => SecurityProfile::RuntimeDefault,
            "Unconfined" => SecurityProfile::Unconfined,
            "Localhost" => {
                SecurityProfile::Localhost(p.localhost_profile.clone().unwrap_or_default())
            }
            other => return Err(format!("appArmorProfile.type: unsupported value {other:?}")),
        },
    };
    let unmasked = c.proc_mount.as_deref() == Some("Unmasked");
    let supplemental_groups_policy = match pod.supplemental_groups_policy.as_deref() {
        None | Some("Merge") => SupplementalGroupsPolicy::Merge,
        Some("Strict") => SupplementalGroupsPolicy::Strict,
        Some(other) => {
            return Err(format!(
                "securityContext.supplementalGroupsPolicy: unsupported value {other:?}"
            ))
        }
    };
    Ok(Security {
        capabilities: CapabilityEdits {
            add: caps.add.unwrap_or_default(),
            drop: caps.drop.unwrap_or_default(),
            add_ambient: Vec::new(),
        },
        privileged,
        namespaces: NamespaceOptions {
            network: if spec.host_network.unwrap_or(false) {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            },
            pid: pid_mode(spec),
            ipc: if spec.host_ipc.unwrap_or(false) {
                NamespaceMode::Node
            } else {
                NamespaceMode::Pod
            },
            target_id: String::new(),
            // Containers join the pod's user namespace (the sandbox's is the one that counts).
            user: None,
        },
        run_as_user,
        run_as_group,
        run_as_username: None,
        readonly_rootfs: c.read_only_root_filesystem.unwrap_or(false),
        supplemental_groups: groups,
        supplemental_groups_policy,
        no_new_privs: c.allow_privilege_escalation == Some(false),
        masked_paths: unmasked.then(Vec::new),
        readonly_paths: unmasked.then(Vec::new),
        seccomp,
        apparmor,
    })
}
