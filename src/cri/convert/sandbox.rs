//! RunPodSandbox: PodSandboxConfig → SandboxRequest, and namespace modes both ways.

use std::collections::BTreeMap;

use super::bad_enum;
use crate::error::{Error, Result};
use crate::oci::{IdMapping, NamespaceMode, UserNamespace, UserNamespaceMode};
use crate::proto::runtime::v1 as pb;
use crate::runtime::{Dns, PodName, PortMapping, SandboxRequest};

/// Converts a RunPodSandbox request's config and runtime handler, validating what CRI
/// requires (the handler is checked against the configured ones by the runtime).
pub fn sandbox_request(
    config: Option<pb::PodSandboxConfig>,
    runtime_handler: &str,
) -> Result<SandboxRequest> {
    let config = config.ok_or_else(|| Error::invalid("sandbox config is required"))?;
    let pod = pod_name(config.metadata)?;
    let linux = config.linux.unwrap_or_default();
    let security = linux.security_context.unwrap_or_default();
    let ns = security.namespace_options.unwrap_or_default();
    let userns = match userns("sandbox config", ns.userns_options)? {
        Some(UserNamespaceMode::Pod(u)) => Some(u),
        Some(UserNamespaceMode::Node) | None => None,
    };
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
        userns,
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

/// `userns_options` (`None` when unset): mode NODE (the host's users, no mappings allowed) or
/// POD with its mappings (checked by the runtime). CONTAINER and TARGET do not exist for user
/// namespaces (as in containerd and CRI-O): InvalidArgument naming the field.
pub fn userns(object: &str, u: Option<pb::UserNamespace>) -> Result<Option<UserNamespaceMode>> {
    let Some(u) = u else {
        return Ok(None);
    };
    let field = format!("{object}: namespace_options.userns_options");
    match pb::NamespaceMode::try_from(u.mode) {
        Ok(pb::NamespaceMode::Node) if u.uids.is_empty() && u.gids.is_empty() => {
            Ok(Some(UserNamespaceMode::Node))
        }
        Ok(pb::NamespaceMode::Node) => Err(Error::invalid(format!(
            "{field}: mode NODE takes no uids/gids mappings ({} and {} given)",
            u.uids.len(),
            u.gids.len()
        ))),
        Ok(pb::NamespaceMode::Pod) => Ok(Some(UserNamespaceMode::Pod(UserNamespace {
            uids: id_mappings(u.uids),
            gids: id_mappings(u.gids),
        }))),
        Ok(m) => Err(Error::invalid(format!(
            "{field}.mode {}: only POD and NODE are supported for user namespaces",
            m.as_str_name()
        ))),
        Err(_) => Err(bad_enum(&format!("{field}.mode"), u.mode)),
    }
}

/// Proto IDMappings as domain ID ranges.
pub fn id_mappings(map: Vec<pb::IdMapping>) -> Vec<IdMapping> {
    map.into_iter()
        .map(|m| IdMapping {
            container_id: m.container_id,
            host_id: m.host_id,
            length: m.length,
        })
        .collect()
}

/// Domain ID ranges as proto IDMappings.
pub fn id_mappings_to_proto(map: &[IdMapping]) -> Vec<pb::IdMapping> {
    map.iter()
        .map(|m| pb::IdMapping {
            host_id: m.host_id,
            container_id: m.container_id,
            length: m.length,
        })
        .collect()
}

/// A proto map as the domain's ordered map.
pub(crate) fn sorted(m: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    m.into_iter().collect()
}

/// A domain map as a proto map.
pub(crate) fn unsorted(m: &BTreeMap<String, String>) -> std::collections::HashMap<String, String> {
    m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()
}
