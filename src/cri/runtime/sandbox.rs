//! RuntimeService's pod sandbox RPCs: run, stop, remove, status, list, update resources.

use std::collections::HashMap;

use super::CriRuntime;
use crate::cri::convert::resources::resources;
use crate::cri::convert::sandbox::sandbox_request;
use crate::cri::convert::{filter, status as st};
use crate::proto::runtime::v1 as pb;
use crate::Result;

/// RunPodSandbox.
pub(super) async fn run(
    cri: &CriRuntime,
    req: pb::RunPodSandboxRequest,
) -> Result<pb::RunPodSandboxResponse> {
    let new = sandbox_request(req.config, &req.runtime_handler)?;
    let pod_sandbox_id = cri.runtime.run_sandbox(new).await?;
    Ok(pb::RunPodSandboxResponse { pod_sandbox_id })
}

/// StopPodSandbox.
pub(super) async fn stop(
    cri: &CriRuntime,
    req: pb::StopPodSandboxRequest,
) -> Result<pb::StopPodSandboxResponse> {
    cri.runtime.stop_sandbox(&req.pod_sandbox_id).await?;
    Ok(pb::StopPodSandboxResponse {})
}

/// RemovePodSandbox.
pub(super) async fn remove(
    cri: &CriRuntime,
    req: pb::RemovePodSandboxRequest,
) -> Result<pb::RemovePodSandboxResponse> {
    cri.runtime.remove_sandbox(&req.pod_sandbox_id).await?;
    Ok(pb::RemovePodSandboxResponse {})
}

/// PodSandboxStatus; its verbose info carries the supervised pod's status, if it is one.
pub(super) async fn status(
    cri: &CriRuntime,
    req: pb::PodSandboxStatusRequest,
) -> Result<pb::PodSandboxStatusResponse> {
    let e = cri.runtime.sandbox(&req.pod_sandbox_id)?;
    let (meta, status) = (e.meta(), e.status());
    let mut info = HashMap::new();
    if req.verbose {
        info = st::sandbox_info(e.id(), meta, &status);
        let pods = cri.pods.as_ref();
        if let Some(pod) = pods.and_then(|p| p.pod_status_json(&meta.request.pod.uid)) {
            info.insert("pod".to_string(), pod);
        }
    }
    Ok(pb::PodSandboxStatusResponse {
        status: Some(st::sandbox_status(e.id(), meta, &status)),
        info,
        ..Default::default()
    })
}

/// ListPodSandbox / StreamPodSandboxes: the sandboxes `f` selects.
pub(super) async fn list(
    cri: &CriRuntime,
    f: Option<pb::PodSandboxFilter>,
) -> Result<Vec<pb::PodSandbox>> {
    let f = filter::sandbox_filter(f)?;
    let all = cri.runtime.list_sandboxes(&f);
    Ok(all
        .iter()
        .map(|e| st::sandbox_item(e.id(), e.meta(), &e.status()))
        .collect())
}

/// UpdatePodSandboxResources.
pub(super) async fn update_resources(
    cri: &CriRuntime,
    req: pb::UpdatePodSandboxResourcesRequest,
) -> Result<pb::UpdatePodSandboxResourcesResponse> {
    let overhead = req.overhead.map(resources).transpose()?;
    let limits = req.resources.map(resources).transpose()?;
    cri.runtime
        .update_sandbox_resources(&req.pod_sandbox_id, overhead, limits)?;
    Ok(pb::UpdatePodSandboxResourcesResponse {})
}
