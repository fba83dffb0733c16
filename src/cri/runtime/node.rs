//! RuntimeService's node-wide RPCs: Version, Status, RuntimeConfig, UpdateRuntimeConfig.

use std::collections::HashMap;

use super::CriRuntime;
use crate::config::CgroupDriver;
use crate::cri::convert::status as st;
use crate::proto::runtime::v1 as pb;
use crate::version;
use crate::Result;

/// Version.
pub(super) async fn version(_req: pb::VersionRequest) -> Result<pb::VersionResponse> {
    Ok(pb::VersionResponse {
        version: "0.1.0".into(), // the CRI "kubelet API version" field: fixed by the kubelet as 0.1.0
        runtime_name: version::RUNTIME_NAME.into(),
        runtime_version: version::long(),
        runtime_api_version: version::CRI_API_VERSION.into(),
    })
}

/// Status: the runtime and network conditions; verbose adds config, version, network, AppArmor
/// (`apparmor`: enabled, the runtime-default profile, how it was loaded), checkpoint (`criu
/// check` at start: available, CRIU's path, why not), streaming.
pub(super) async fn status(cri: &CriRuntime, req: pb::StatusRequest) -> Result<pb::StatusResponse> {
    let mut info = HashMap::new();
    if req.verbose {
        info.insert("config".to_string(), cri.config.to_toml());
        info.insert("version".to_string(), version::long());
        let net = cri.runtime.network_status();
        let network = serde_json::json!({
            "name": net.name, "ready": net.ready, "reason": net.reason, "message": net.message,
        });
        info.insert("network".to_string(), network.to_string());
        let host = cri.runtime.host();
        let apparmor = serde_json::json!({
            "enabled": host.apparmor,
            "defaultProfile": host.apparmor_default_profile.as_deref().unwrap_or(""),
            "message": host.apparmor_message,
        });
        info.insert("apparmor".to_string(), apparmor.to_string());
        let checkpoint = serde_json::json!({
            "available": host.criu.is_some(),
            "criu": host.criu.as_deref().map(|p| p.display().to_string()).unwrap_or_default(),
            "message": if host.criu.is_some() { "criu check passed" } else { host.criu_why.as_str() },
        });
        info.insert("checkpoint".to_string(), checkpoint.to_string());
        let handlers = st::runtime_handlers_info(cri.runtime.handlers());
        info.insert("runtimeHandlers".to_string(), handlers);
        if let Some(s) = &cri.streaming {
            info.insert("streamingAddress".to_string(), s.addr().to_string());
        }
    }
    Ok(pb::StatusResponse {
        status: Some(pb::RuntimeStatus {
            conditions: conditions(cri),
        }),
        info,
        runtime_handlers: st::runtime_handlers(cri.runtime.host(), cri.runtime.handlers()),
        features: Some(st::runtime_features()),
    })
}

/// RuntimeReady and NetworkReady, as the kubelet requires both to be present.
fn conditions(cri: &CriRuntime) -> Vec<pb::RuntimeCondition> {
    vec![
        pb::RuntimeCondition {
            r#type: "RuntimeReady".into(),
            status: true,
            reason: String::new(),
            message: String::new(),
        },
        st::network_condition(&cri.runtime.network_status()),
    ]
}

/// RuntimeConfig: the cgroup driver.
pub(super) async fn runtime_config(
    cri: &CriRuntime,
    _req: pb::RuntimeConfigRequest,
) -> Result<pb::RuntimeConfigResponse> {
    // Answer explicitly: the enum's zero value is SYSTEMD.
    let driver = match cri.config.cgroup_driver {
        CgroupDriver::Cgroupfs => pb::CgroupDriver::Cgroupfs,
        CgroupDriver::Systemd => pb::CgroupDriver::Systemd,
    };
    Ok(pb::RuntimeConfigResponse {
        linux: Some(pb::LinuxRuntimeConfiguration {
            cgroup_driver: driver as i32,
        }),
    })
}

/// UpdateRuntimeConfig: records the pod CIDR.
pub(super) async fn update_runtime_config(
    cri: &CriRuntime,
    req: pb::UpdateRuntimeConfigRequest,
) -> Result<pb::UpdateRuntimeConfigResponse> {
    let cidr = req
        .runtime_config
        .and_then(|c| c.network_config)
        .map(|n| n.pod_cidr)
        .unwrap_or_default();
    cri.runtime.set_pod_cidr(&cidr)?;
    Ok(pb::UpdateRuntimeConfigResponse {})
}
