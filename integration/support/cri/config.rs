//! Pod and container configs like the kubelet's, unique per test.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use bosun::proto::runtime::v1 as pb;

use super::{ContainerBuilder, Pod, PodBuilder};
use crate::support::Daemon;

static SEQ: AtomicU32 = AtomicU32::new(0);

/// `<prefix>-<pid>-<n>`: unique in this test process (pod names, uids).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The namespace options the kubelet sends for an ordinary pod: own network and IPC, one pid
/// namespace per container (`pid`: CONTAINER) or per pod (POD: shareProcessNamespace).
pub fn namespaces(pid: pb::NamespaceMode) -> pb::NamespaceOption {
    pb::NamespaceOption {
        network: pb::NamespaceMode::Pod as i32,
        pid: pid as i32,
        ipc: pb::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A pod config like the kubelet's, unique per call: name/uid from [`unique`], namespace
/// [`NAMESPACE`], log directory in the test's scratch dir, the test's cgroup parent, pid
/// namespace per container. [`PodBuilder`] adds to it.
pub fn pod_config(d: &Daemon, name: &str) -> pb::PodSandboxConfig {
    PodBuilder::new(d, name).build()
}

/// Makes the pod share one pid namespace (shareProcessNamespace: a pod init is PID 1). Apply
/// before creating containers: [`container_config`] copies the pod's namespace options.
pub fn share_pid(pod: &mut pb::PodSandboxConfig) {
    if let Some(sc) = pod.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.namespace_options = Some(namespaces(pb::NamespaceMode::Pod));
    }
}

/// A container config like the kubelet's: metadata `name`, `image`, log path `<name>.log`
/// (relative to the pod's log directory), the pod's namespace options, the image's command.
/// [`ContainerBuilder`] adds to it.
pub fn container_config(pod: &Pod, name: &str, image: &str) -> pb::ContainerConfig {
    ContainerBuilder::new(pod, name, image).build()
}

/// [`container_config`] running `sh -c script`.
pub fn sh_config(pod: &Pod, name: &str, image: &str, script: &str) -> pb::ContainerConfig {
    ContainerBuilder::new(pod, name, image).sh(script).build()
}

/// The container's security context (created if missing).
pub fn security(c: &mut pb::ContainerConfig) -> &mut pb::LinuxContainerSecurityContext {
    c.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

/// The container's resources (created if missing).
pub fn resources(c: &mut pb::ContainerConfig) -> &mut pb::LinuxContainerResources {
    c.linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default)
}

/// A `KeyValue` env entry.
pub fn env(key: &str, value: &str) -> pb::KeyValue {
    pb::KeyValue {
        key: key.into(),
        value: value.as_bytes().to_vec(),
    }
}

/// A string map from pairs.
pub fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Host uid/gid of the pods' root in [`userns_pod`] (inside ids 0..65536 map to this and up).
pub const USERNS_BASE: u32 = 300_000;
/// How many ids [`userns_pod`] maps.
pub const USERNS_LEN: u32 = 65_536;

/// `length` ids from `container_id` inside mapped to `host_id` and up.
pub fn range(container_id: u32, host_id: u32, length: u32) -> pb::IdMapping {
    pb::IdMapping {
        host_id,
        container_id,
        length,
    }
}

/// `userns_options` with mode `mode` and `map` for both uids and gids.
pub fn userns(mode: pb::NamespaceMode, map: Vec<pb::IdMapping>) -> pb::UserNamespace {
    pb::UserNamespace {
        mode: mode as i32,
        uids: map.clone(),
        gids: map,
    }
}

/// The pod's namespace options (created if missing).
pub fn ns_options(pod: &mut pb::PodSandboxConfig) -> &mut pb::NamespaceOption {
    pod.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default)
}

/// A pod config with its own user namespace mapping 0..[`USERNS_LEN`] to [`USERNS_BASE`].. (the
/// kubelet's shape).
pub fn userns_pod(d: &Daemon, name: &str) -> pb::PodSandboxConfig {
    let mut config = pod_config(d, name);
    ns_options(&mut config).userns_options = Some(userns(
        pb::NamespaceMode::Pod,
        vec![range(0, USERNS_BASE, USERNS_LEN)],
    ));
    config
}
