//! Domain → proto answers: sandbox and container statuses, list items, states, verbose info.

use std::collections::HashMap;

use super::container::mount_to_proto;
use super::resources::resources_to_proto;
use super::sandbox::{id_mappings_to_proto, namespace_mode_to_proto, pod_metadata, unsorted};
use super::signal::stop_signal_to_proto;
use crate::network::NetworkStatus;
use crate::oci::runc::{Handler, Handlers};
use crate::oci::HostFacts;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{
    ContainerMeta, ContainerState, ContainerStatus, SandboxMeta, SandboxState, SandboxStatus,
};

/// SANDBOX_READY only for Ready; every other state is NOTREADY.
pub fn sandbox_state_to_proto(state: SandboxState) -> pb::PodSandboxState {
    if state.is_ready() {
        pb::PodSandboxState::SandboxReady
    } else {
        pb::PodSandboxState::SandboxNotready
    }
}

/// The container state enum.
pub fn container_state_to_proto(state: ContainerState) -> pb::ContainerState {
    match state {
        ContainerState::Created => pb::ContainerState::ContainerCreated,
        ContainerState::Running => pb::ContainerState::ContainerRunning,
        ContainerState::Exited => pb::ContainerState::ContainerExited,
        ContainerState::Unknown => pb::ContainerState::ContainerUnknown,
    }
}

/// The pod's addresses while its network is attached: the first (IPv4 when there is one) as
/// `ip`, the others as `additional_ips`; empty for host network and after StopPodSandbox.
pub fn sandbox_network(status: &SandboxStatus) -> pb::PodSandboxNetworkStatus {
    if !status.network_attached {
        return pb::PodSandboxNetworkStatus::default();
    }
    let mut ips = status.ips.iter();
    pb::PodSandboxNetworkStatus {
        ip: ips.next().cloned().unwrap_or_default(),
        additional_ips: ips.map(|ip| pb::PodIp { ip: ip.clone() }).collect(),
    }
}

/// The Status RPC's NetworkReady condition. When ready the message names the network and
/// where its config comes from; when not, reason `NetworkPluginNotReady` and what is wrong.
pub fn network_condition(net: &NetworkStatus) -> pb::RuntimeCondition {
    pb::RuntimeCondition {
        r#type: "NetworkReady".into(),
        status: net.ready,
        reason: net.reason.clone(),
        message: net.message.clone(),
    }
}

/// PodSandboxStatus.
pub fn sandbox_status(
    id: &str,
    meta: &SandboxMeta,
    status: &SandboxStatus,
) -> pb::PodSandboxStatus {
    let req = &meta.request;
    pb::PodSandboxStatus {
        id: id.to_string(),
        metadata: Some(pod_metadata(&req.pod)),
        state: sandbox_state_to_proto(status.state()) as i32,
        created_at: status.created_ns,
        network: Some(sandbox_network(status)),
        linux: Some(pb::LinuxPodSandboxStatus {
            namespaces: Some(pb::Namespace {
                options: Some(pb::NamespaceOption {
                    network: namespace_mode_to_proto(req.network) as i32,
                    pid: namespace_mode_to_proto(req.pid) as i32,
                    ipc: namespace_mode_to_proto(req.ipc) as i32,
                    userns_options: req.userns.as_ref().map(|u| pb::UserNamespace {
                        mode: pb::NamespaceMode::Pod as i32,
                        uids: id_mappings_to_proto(&u.uids),
                        gids: id_mappings_to_proto(&u.gids),
                    }),
                    ..Default::default()
                }),
            }),
        }),
        labels: unsorted(&req.labels),
        annotations: unsorted(&req.annotations),
        runtime_handler: req.runtime_handler.clone(),
    }
}

/// Status's runtime handlers: the default "" and every usable handler, each with what it can
/// do here: recursive read-only mounts and user namespaces only when the probes at start found
/// them working for the node and that runtime (critest and the kubelet rely on these).
pub fn runtime_handlers(host: &HostFacts, handlers: &Handlers) -> Vec<pb::RuntimeHandler> {
    let features = |h: &Handler| pb::RuntimeHandlerFeatures {
        recursive_read_only_mounts: host.recursive_read_only && h.recursive_read_only,
        user_namespaces: host.user_namespaces && h.user_namespaces,
    };
    let default = handlers.default_handler();
    std::iter::once(("", default.as_ref()))
        .chain(
            handlers
                .iter()
                .filter(|h| h.unusable.is_none())
                .map(|h| (h.name.as_str(), h.as_ref())),
        )
        .map(|(name, h)| pb::RuntimeHandler {
            name: name.to_string(),
            features: Some(features(h)),
        })
        .collect()
}

/// Status verbose info `runtimeHandlers`: every configured handler, its binary, root,
/// version, features and, when it cannot run pods here, why.
pub fn runtime_handlers_info(handlers: &Handlers) -> String {
    let list: Vec<serde_json::Value> = handlers
        .iter()
        .map(|h| {
            serde_json::json!({
                "name": h.name,
                "binary": h.binary,
                "root": h.root,
                "options": h.options,
                "version": h.version,
                "recursiveReadOnlyMounts": h.recursive_read_only,
                "userNamespaces": h.user_namespaces,
                "podOverhead": h.overhead.map(|(cpu, mem)| serde_json::json!({
                    "cpuMillis": cpu, "memoryBytes": mem,
                })),
                "usable": h.unusable.is_none(),
                "reason": h.unusable.clone().unwrap_or_default(),
                "checkpoint": h.no_checkpoint.is_none(),
                "checkpointReason": h.no_checkpoint.clone().unwrap_or_default(),
            })
        })
        .collect();
    serde_json::Value::Array(list).to_string()
}

/// Status's runtime features: supplemental groups policies are resolved by bosun itself (from
/// the image's /etc/group), so always available; pods with their own user namespace cannot
/// use the host network.
pub fn runtime_features() -> pb::RuntimeFeatures {
    pb::RuntimeFeatures {
        supplemental_groups_policy: true,
        user_namespaces_host_network: false,
    }
}

/// A ListPodSandbox item.
pub fn sandbox_item(id: &str, meta: &SandboxMeta, status: &SandboxStatus) -> pb::PodSandbox {
    let req = &meta.request;
    pb::PodSandbox {
        id: id.to_string(),
        metadata: Some(pod_metadata(&req.pod)),
        state: sandbox_state_to_proto(status.state()) as i32,
        created_at: status.created_ns,
        labels: unsorted(&req.labels),
        annotations: unsorted(&req.annotations),
        runtime_handler: req.runtime_handler.clone(),
    }
}

/// PodSandboxStatus verbose info: `info` is a JSON object with the id, state, infra pid, the
/// recorded metadata and the status.
pub fn sandbox_info(
    id: &str,
    meta: &SandboxMeta,
    status: &SandboxStatus,
) -> HashMap<String, String> {
    let info = serde_json::json!({
        "id": id,
        "state": format!("{:?}", status.state()),
        "pid": status.pid,
        "meta": meta,
        "status": status,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}

fn container_metadata(meta: &ContainerMeta) -> pb::ContainerMetadata {
    pb::ContainerMetadata {
        name: meta.request.name.clone(),
        attempt: meta.attempt,
    }
}

fn image_spec(meta: &ContainerMeta) -> pb::ImageSpec {
    pb::ImageSpec {
        image: if meta.image_name.is_empty() {
            meta.request.image.clone()
        } else {
            meta.image_name.clone()
        },
        ..Default::default()
    }
}

/// ContainerStatus: timestamps, exit, image, the request's labels, annotations and mounts
/// unchanged, and the resources last applied (those of the create request until an update).
/// `user` is the identity resolved at create; `stop_signal` the one a stop sends (CRI's, else
/// the image's STOPSIGNAL, else SIGTERM).
pub fn container_status(
    id: &str,
    meta: &ContainerMeta,
    status: &ContainerStatus,
) -> pb::ContainerStatus {
    let req = &meta.request;
    let resources = status.resources.as_ref().unwrap_or(&req.linux.resources);
    pb::ContainerStatus {
        id: id.to_string(),
        metadata: Some(container_metadata(meta)),
        state: container_state_to_proto(status.state()) as i32,
        created_at: status.created_ns,
        started_at: status.started_ns,
        finished_at: status.finished_ns,
        exit_code: status.exit_code,
        image: Some(image_spec(meta)),
        image_ref: meta.image_ref.clone(),
        reason: status.reason.clone(),
        message: status.message.clone(),
        labels: unsorted(&req.labels),
        annotations: unsorted(&req.annotations),
        mounts: req.mounts.iter().map(mount_to_proto).collect(),
        log_path: meta.log_path.clone(),
        resources: Some(pb::ContainerResources {
            linux: Some(resources_to_proto(resources)),
            windows: None,
        }),
        image_id: meta.image_id.clone(),
        user: status.user.as_ref().map(|u| pb::ContainerUser {
            linux: Some(pb::LinuxContainerUser {
                uid: i64::from(u.uid),
                gid: i64::from(u.gid),
                supplemental_groups: u.groups.iter().map(|g| i64::from(*g)).collect(),
            }),
        }),
        stop_signal: stop_signal_to_proto(Some(meta.stop_signal())) as i32,
    }
}

/// A ListContainers item.
pub fn container_item(id: &str, meta: &ContainerMeta, status: &ContainerStatus) -> pb::Container {
    let req = &meta.request;
    pb::Container {
        id: id.to_string(),
        pod_sandbox_id: meta.sandbox_id.clone(),
        metadata: Some(container_metadata(meta)),
        image: Some(image_spec(meta)),
        image_ref: meta.image_ref.clone(),
        state: container_state_to_proto(status.state()) as i32,
        created_at: status.created_ns,
        labels: unsorted(&req.labels),
        annotations: unsorted(&req.annotations),
        image_id: meta.image_id.clone(),
    }
}

/// ContainerStatus verbose info: `info` is a JSON object with the id, sandbox id, state, init
/// pid, the recorded metadata (request, image, paths) and the status.
pub fn container_info(
    id: &str,
    meta: &ContainerMeta,
    status: &ContainerStatus,
) -> HashMap<String, String> {
    let info = serde_json::json!({
        "id": id,
        "sandboxID": meta.sandbox_id,
        "state": format!("{:?}", status.state()),
        "pid": status.pid,
        "meta": meta,
        "status": status,
    });
    HashMap::from([("info".to_string(), info.to_string())])
}
