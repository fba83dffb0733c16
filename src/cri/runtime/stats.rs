//! RuntimeService's stats and metrics RPCs: container and sandbox stats (one, list, stream),
//! metric descriptors, sandbox metrics (list, stream).

use super::CriRuntime;
use crate::cri::convert::stats;
use crate::proto::runtime::v1 as pb;
use crate::Result;

/// ContainerStats.
pub(super) async fn container(
    cri: &CriRuntime,
    req: pb::ContainerStatsRequest,
) -> Result<pb::ContainerStatsResponse> {
    let s = cri.runtime.container_stats(&req.container_id).await?;
    Ok(pb::ContainerStatsResponse {
        stats: Some(stats::container_stats(&s)),
    })
}

/// ListContainerStats / StreamContainerStats: the stats of the containers `f` selects.
pub(super) async fn containers(
    cri: &CriRuntime,
    f: Option<pb::ContainerStatsFilter>,
) -> Result<Vec<pb::ContainerStats>> {
    let f = stats::container_filter(f);
    let all = cri.runtime.list_container_stats(&f).await?;
    Ok(all.iter().map(stats::container_stats).collect())
}

/// PodSandboxStats.
pub(super) async fn sandbox(
    cri: &CriRuntime,
    req: pb::PodSandboxStatsRequest,
) -> Result<pb::PodSandboxStatsResponse> {
    let s = cri.runtime.sandbox_stats(&req.pod_sandbox_id).await?;
    Ok(pb::PodSandboxStatsResponse {
        stats: Some(stats::sandbox_stats(&s)),
    })
}

/// ListPodSandboxStats / StreamPodSandboxStats: the stats of the sandboxes `f` selects.
pub(super) async fn sandboxes(
    cri: &CriRuntime,
    f: Option<pb::PodSandboxStatsFilter>,
) -> Result<Vec<pb::PodSandboxStats>> {
    let f = stats::sandbox_filter(f);
    let all = cri.runtime.list_sandbox_stats(&f).await?;
    Ok(all.iter().map(stats::sandbox_stats).collect())
}

/// ListMetricDescriptors.
pub(super) async fn metric_descriptors(
    _req: pb::ListMetricDescriptorsRequest,
) -> Result<pb::ListMetricDescriptorsResponse> {
    Ok(pb::ListMetricDescriptorsResponse {
        descriptors: stats::metric_descriptors(),
    })
}

/// ListPodSandboxMetrics / StreamPodSandboxMetrics: every sandbox's metrics.
pub(super) async fn sandbox_metrics(cri: &CriRuntime) -> Result<Vec<pb::PodSandboxMetrics>> {
    let all = cri.runtime.list_sandbox_stats(&Default::default()).await?;
    Ok(all.iter().map(stats::sandbox_metrics).collect())
}
