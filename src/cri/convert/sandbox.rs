//! RunPodSandbox: PodSandboxConfig → SandboxRequest, and namespace modes both ways.

use std::collections::BTreeMap;

use super::bad_enum;
use crate::error::{echo, Error, Result};
use crate::oci::NamespaceMode;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{Dns, PodName, PortMapping, SandboxRequest};

/// The runtime handlers bosun answers to ("" is the default, which is runc).
pub const RUNTIME_HANDLERS: [&str; 2] = ["", "runc"];

/// Converts a RunPodSandbox request's config and runtime handler, validating what CRI requires.
pub fn sandbox_request(
    config: Option<pb::PodSandboxConfig>,
    runtime_handler: &str,
) -> Result<SandboxRequest> {
    let config = config.ok_or_else(|| Error::invalid("sandbox config is required"))?;
    if !RUNTIME_HANDLERS.contains(&runtime_handler) {
        return Err(Error::invalid(format!(
            "runtime handler {:?} is not supported (bosun has \"runc\")",
            echo(runtime_handler)
        )));
    }
    let pod = pod_name(config.metadata)?;
    let linux = config.linux.unwrap_or_default();
    let security = linux.security_context.unwrap_or_default();
    let ns = security.namespace_options.unwrap_or_default();
    check_userns("sandbox config", ns.userns_options.as_ref())?;
    let field = |f: &str| format!("sandbox config: linux.security_context.namespace_options.{f}");
    Ok(SandboxRequest {
        pod,
        hostname: config.hostname,
        log_directory: config.log_directory,
        dns: config.dns_config.map(|d| Dns {
            servers: d.servers,
            searches: d.searches,
            options: d.options,
        }),
        port_mappings: config
            .port_mappings
            .into_iter()
            .enumerate()
            .map(|(i, p)| port_mapping(i, p))
            .collect::<Result<_>>()?,
        labels: sorted(config.labels),
        annotations: sorted(config.annotations),
        runtime_handler: runtime_handler.to_string(),
        cgroup_parent: linux.cgroup_parent,
        network: namespace_mode(&field("network"), ns.network)?,
        pid: namespace_mode(&field("pid"), ns.pid)?,
        ipc: namespace_mode(&field("ipc"), ns.ipc)?,
        sysctls: sorted(linux.sysctls),
        privileged: security.privileged,
    })
}

/// PodSandboxMetadata → PodName; name, namespace and uid are required.
fn pod_name(metadata: Option<pb::PodSandboxMetadata>) -> Result<PodName> {
    let m = metadata.ok_or_else(|| Error::invalid("sandbox config: metadata is required"))?;
    for (field, v) in [
        ("name", &m.name),
        ("namespace", &m.namespace),
        ("uid", &m.uid),
    ] {
        if v.is_empty() {
            return Err(Error::invalid(format!(
                "sandbox config: metadata.{field} is required"
            )));
        }
    }
    Ok(PodName {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        attempt: m.attempt,
    })
}

/// PodSandboxMetadata of a pod (for status and list answers).
pub fn pod_metadata(pod: &PodName) -> pb::PodSandboxMetadata {
    pb::PodSandboxMetadata {
        name: pod.name.clone(),
        uid: pod.uid.clone(),
        namespace: pod.namespace.clone(),
        attempt: pod.attempt,
    }
}

fn port_mapping(i: usize, p: pb::PortMapping) -> Result<PortMapping> {
    let protocol = pb::Protocol::try_from(p.protocol).map_err(|_| {
        bad_enum(
            &format!("sandbox config: port_mappings[{i}].protocol"),
            p.protocol,
        )
    })?;
    Ok(PortMapping {
        protocol: protocol.as_str_name().to_string(),
        container_port: p.container_port,
        host_port: p.host_port,
        host_ip: p.host_ip,
    })
}

/// A proto NamespaceMode value → the domain mode; `field` names it in the error.
pub fn namespace_mode(field: &str, value: i32) -> Result<NamespaceMode> {
    match pb::NamespaceMode::try_from(value) {
        Ok(pb::NamespaceMode::Pod) => Ok(NamespaceMode::Pod),
        Ok(pb::NamespaceMode::Container) => Ok(NamespaceMode::Container),
        Ok(pb::NamespaceMode::Node) => Ok(NamespaceMode::Node),
        Ok(pb::NamespaceMode::Target) => Ok(NamespaceMode::Target),
        Err(_) => Err(bad_enum(field, value)),
    }
}

/// The domain namespace mode → the proto enum.
pub fn namespace_mode_to_proto(mode: NamespaceMode) -> pb::NamespaceMode {
    match mode {
        NamespaceMode::Pod => pb::NamespaceMode::Pod,
        NamespaceMode::Container => pb::NamespaceMode::Container,
        NamespaceMode::Node => pb::NamespaceMode::Node,
        NamespaceMode::Target => pb::NamespaceMode::Target,
    }
}

/// Refuses a user namespace request (mode POD): bosun runs pods with the host's users only, and
/// silently ignoring `hostUsers: false` would weaken the isolation the pod asked for.
pub fn check_userns(object: &str, userns: Option<&pb::UserNamespace>) -> Result<()> {
    match userns.map(|u| u.mode) {
        None => Ok(()),
        Some(m) if m == pb::NamespaceMode::Node as i32 => Ok(()),
        Some(m) => Err(Error::invalid(format!(
            "{object}: namespace_options.userns_options.mode {}: user namespaces are not supported",
            pb::NamespaceMode::try_from(m)
                .map_or_else(|_| m.to_string(), |m| m.as_str_name().to_string())
        ))),
    }
}

/// A proto map as the domain's ordered map.
pub(crate) fn sorted(m: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

/// A domain map as a proto map.
pub(crate) fn unsorted(m: &BTreeMap<String, String>) -> std::collections::HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}
