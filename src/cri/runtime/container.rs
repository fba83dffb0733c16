//! RuntimeService's container RPCs: create, start, stop, remove, status, list, update resources,
//! reopen log, checkpoint, events.

use super::CriRuntime;
use crate::cri::convert::container::new_container;
use crate::cri::convert::{event, filter, resources, status as st};
use crate::cri::rpc::Pages;
use crate::proto::runtime::v1 as pb;
use crate::Result;
use std::collections::HashMap;

/// CreateContainer.
pub(super) async fn create(
    cri: &CriRuntime,
    req: pb::CreateContainerRequest,
) -> Result<pb::CreateContainerResponse> {
    let new = new_container(req.config)?;
    let container_id = cri
        .runtime
        .create_container(&req.pod_sandbox_id, new)
        .await?;
    Ok(pb::CreateContainerResponse { container_id })
}

/// StartContainer.
pub(super) async fn start(
    cri: &CriRuntime,
    req: pb::StartContainerRequest,
) -> Result<pb::StartContainerResponse> {
    cri.runtime.start_container(&req.container_id).await?;
    Ok(pb::StartContainerResponse {})
}

/// StopContainer.
pub(super) async fn stop(
    cri: &CriRuntime,
    req: pb::StopContainerRequest,
) -> Result<pb::StopContainerResponse> {
    cri.runtime
        .stop_container(&req.container_id, req.timeout)
        .await?;
    Ok(pb::StopContainerResponse {})
}

/// RemoveContainer.
pub(super) async fn remove(
    cri: &CriRuntime,
    req: pb::RemoveContainerRequest,
) -> Result<pb::RemoveContainerResponse> {
    cri.runtime.remove_container(&req.container_id).await?;
    Ok(pb::RemoveContainerResponse {})
}

/// ContainerStatus.
pub(super) async fn status(
    cri: &CriRuntime,
    req: pb::ContainerStatusRequest,
) -> Result<pb::ContainerStatusResponse> {
    let e = cri.runtime.container(&req.container_id)?;
    let (meta, status) = (e.meta(), e.status());
    Ok(pb::ContainerStatusResponse {
        status: Some(st::container_status(e.id(), meta, &status)),
        info: if req.verbose {
            st::container_info(e.id(), meta, &status)
        } else {
            HashMap::new()
        },
    })
}

/// ListContainers / StreamContainers: the containers `f` selects.
pub(super) async fn list(
    cri: &CriRuntime,
    f: Option<pb::ContainerFilter>,
) -> Result<Vec<pb::Container>> {
    let mut f = filter::container_filter(f)?;
    // A sandbox id prefix is resolved to the full id, as containerd does.
    if let Some(full) = f
        .pod_id
        .as_deref()
        .and_then(|p| cri.runtime.sandbox(p).ok())
    {
        f.pod_id = Some(full.id().to_string());
    }
    let all = cri.runtime.list_containers(&f);
    Ok(all
        .iter()
        .map(|e| st::container_item(e.id(), e.meta(), &e.status()))
        .collect())
}

/// UpdateContainerResources.
pub(super) async fn update_resources(
    cri: &CriRuntime,
    req: pb::UpdateContainerResourcesRequest,
) -> Result<pb::UpdateContainerResourcesResponse> {
    let resources = resources::update_resources(req.linux)?;
    cri.runtime
        .update_container(&req.container_id, resources)
        .await?;
    Ok(pb::UpdateContainerResourcesResponse {})
}

/// ReopenContainerLog.
pub(super) async fn reopen_log(
    cri: &CriRuntime,
    req: pb::ReopenContainerLogRequest,
) -> Result<pb::ReopenContainerLogResponse> {
    cri.runtime.reopen_log(&req.container_id).await?;
    Ok(pb::ReopenContainerLogResponse {})
}

/// GetContainerEvents: every container event from now on.
pub(super) async fn events(
    cri: &CriRuntime,
    _req: pb::GetEventsRequest,
) -> Result<Pages<pb::ContainerEventResponse>> {
    Ok(Box::pin(event::stream(cri.runtime.subscribe_events())))
}

/// CheckpointContainer: CRIU through the container's runtime handler; the archive at
/// `location` (see [`crate::runtime::checkpoint_archive`]).
pub(super) async fn checkpoint(
    cri: &CriRuntime,
    req: pb::CheckpointContainerRequest,
) -> Result<pb::CheckpointContainerResponse> {
    cri.runtime
        .checkpoint_container(&req.container_id, &req.location, req.timeout)
        .await?;
    Ok(pb::CheckpointContainerResponse {})
}
