//! CRI RuntimeService: each RPC answered through one wrapper, its handler in the file of its group.

use std::sync::Arc;

use tonic::Request;

use crate::config::Config;
use crate::cri::rpc::{list, serve, stream, Pages, Reply};
use crate::proto::runtime::v1 as pb;
use crate::runtime::Runtime;
use pb::runtime_service_server::RuntimeService;

mod container;
mod exec;
mod node;
mod sandbox;
mod stats;

/// The CRI RuntimeService over the runtime domain.
pub struct CriRuntime {
    config: Arc<Config>,
    runtime: Arc<Runtime>,
    streaming: Option<Arc<crate::stream::Server>>,
    pods: Option<Arc<dyn PodStatusSource>>,
}

/// The standalone supervisor's pod status by pod uid, for PodSandboxStatus verbose info.
pub trait PodStatusSource: Send + Sync + 'static {
    /// The Kubernetes Pod (with status) as JSON, if `uid` is a supervised pod.
    fn pod_status_json(&self, uid: &str) -> Option<String>;
}

impl CriRuntime {
    /// Serves `runtime` with `config`.
    pub fn new(config: Arc<Config>, runtime: Arc<Runtime>) -> Self {
        CriRuntime {
            config,
            runtime,
            streaming: None,
            pods: None,
        }
    }

    /// Adds the supervised pods' status to PodSandboxStatus verbose info.
    pub fn with_pods(mut self, pods: Arc<dyn PodStatusSource>) -> Self {
        self.pods = Some(pods);
        self
    }

    /// Serves Exec/Attach/PortForward through `server`.
    pub fn with_streaming(mut self, server: Arc<crate::stream::Server>) -> Self {
        self.streaming = Some(server);
        self
    }
}

/// The dispatch: every RPC's name, wrapper and handler; the handlers only translate.
#[tonic::async_trait]
impl RuntimeService for CriRuntime {
    // Status and config (node.rs)
    async fn version(&self, req: Request<pb::VersionRequest>) -> Reply<pb::VersionResponse> {
        serve("Version", node::version(req.into_inner())).await
    }

    async fn status(&self, req: Request<pb::StatusRequest>) -> Reply<pb::StatusResponse> {
        serve("Status", node::status(self, req.into_inner())).await
    }

    async fn runtime_config(
        &self,
        req: Request<pb::RuntimeConfigRequest>,
    ) -> Reply<pb::RuntimeConfigResponse> {
        serve(
            "RuntimeConfig",
            node::runtime_config(self, req.into_inner()),
        )
        .await
    }

    async fn update_runtime_config(
        &self,
        req: Request<pb::UpdateRuntimeConfigRequest>,
    ) -> Reply<pb::UpdateRuntimeConfigResponse> {
        serve(
            "UpdateRuntimeConfig",
            node::update_runtime_config(self, req.into_inner()),
        )
        .await
    }

    // Pod sandboxes (sandbox.rs)
    async fn run_pod_sandbox(
        &self,
        req: Request<pb::RunPodSandboxRequest>,
    ) -> Reply<pb::RunPodSandboxResponse> {
        serve("RunPodSandbox", sandbox::run(self, req.into_inner())).await
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<pb::StopPodSandboxRequest>,
    ) -> Reply<pb::StopPodSandboxResponse> {
        serve("StopPodSandbox", sandbox::stop(self, req.into_inner())).await
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<pb::RemovePodSandboxRequest>,
    ) -> Reply<pb::RemovePodSandboxResponse> {
        serve("RemovePodSandbox", sandbox::remove(self, req.into_inner())).await
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<pb::PodSandboxStatusRequest>,
    ) -> Reply<pb::PodSandboxStatusResponse> {
        serve("PodSandboxStatus", sandbox::status(self, req.into_inner())).await
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<pb::ListPodSandboxRequest>,
    ) -> Reply<pb::ListPodSandboxResponse> {
        list(
            "ListPodSandbox",
            sandbox::list(self, req.into_inner().filter),
        )
        .await
    }

    type StreamPodSandboxesStream = Pages<pb::StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        req: Request<pb::StreamPodSandboxesRequest>,
    ) -> Reply<Self::StreamPodSandboxesStream> {
        stream(
            "StreamPodSandboxes",
            sandbox::list(self, req.into_inner().filter),
        )
        .await
    }

    async fn update_pod_sandbox_resources(
        &self,
        req: Request<pb::UpdatePodSandboxResourcesRequest>,
    ) -> Reply<pb::UpdatePodSandboxResourcesResponse> {
        serve(
            "UpdatePodSandboxResources",
            sandbox::update_resources(self, req.into_inner()),
        )
        .await
    }

    // Containers (container.rs)
    async fn create_container(
        &self,
        req: Request<pb::CreateContainerRequest>,
    ) -> Reply<pb::CreateContainerResponse> {
        serve("CreateContainer", container::create(self, req.into_inner())).await
    }

    async fn start_container(
        &self,
        req: Request<pb::StartContainerRequest>,
    ) -> Reply<pb::StartContainerResponse> {
        serve("StartContainer", container::start(self, req.into_inner())).await
    }

    async fn stop_container(
        &self,
        req: Request<pb::StopContainerRequest>,
    ) -> Reply<pb::StopContainerResponse> {
        serve("StopContainer", container::stop(self, req.into_inner())).await
    }

    async fn remove_container(
        &self,
        req: Request<pb::RemoveContainerRequest>,
    ) -> Reply<pb::RemoveContainerResponse> {
        serve("RemoveContainer", container::remove(self, req.into_inner())).await
    }

    async fn list_containers(
        &self,
        req: Request<pb::ListContainersRequest>,
    ) -> Reply<pb::ListContainersResponse> {
        list(
            "ListContainers",
            container::list(self, req.into_inner().filter),
        )
        .await
    }

    type StreamContainersStream = Pages<pb::StreamContainersResponse>;

    async fn stream_containers(
        &self,
        req: Request<pb::StreamContainersRequest>,
    ) -> Reply<Self::StreamContainersStream> {
        stream(
            "StreamContainers",
            container::list(self, req.into_inner().filter),
        )
        .await
    }

    async fn container_status(
        &self,
        req: Request<pb::ContainerStatusRequest>,
    ) -> Reply<pb::ContainerStatusResponse> {
        serve("ContainerStatus", container::status(self, req.into_inner())).await
    }

    async fn update_container_resources(
        &self,
        req: Request<pb::UpdateContainerResourcesRequest>,
    ) -> Reply<pb::UpdateContainerResourcesResponse> {
        serve(
            "UpdateContainerResources",
            container::update_resources(self, req.into_inner()),
        )
        .await
    }

    async fn reopen_container_log(
        &self,
        req: Request<pb::ReopenContainerLogRequest>,
    ) -> Reply<pb::ReopenContainerLogResponse> {
        serve(
            "ReopenContainerLog",
            container::reopen_log(self, req.into_inner()),
        )
        .await
    }

    async fn checkpoint_container(
        &self,
        req: Request<pb::CheckpointContainerRequest>,
    ) -> Reply<pb::CheckpointContainerResponse> {
        serve(
            "CheckpointContainer",
            container::checkpoint(self, req.into_inner()),
        )
        .await
    }

    type GetContainerEventsStream = Pages<pb::ContainerEventResponse>;

    async fn get_container_events(
        &self,
        req: Request<pb::GetEventsRequest>,
    ) -> Reply<Self::GetContainerEventsStream> {
        serve(
            "GetContainerEvents",
            container::events(self, req.into_inner()),
        )
        .await
    }

    // Exec and streaming (exec.rs)
    async fn exec_sync(&self, req: Request<pb::ExecSyncRequest>) -> Reply<pb::ExecSyncResponse> {
        serve("ExecSync", exec::exec_sync(self, req.into_inner())).await
    }

    async fn exec(&self, req: Request<pb::ExecRequest>) -> Reply<pb::ExecResponse> {
        serve("Exec", exec::exec(self, req.into_inner())).await
    }

    async fn attach(&self, req: Request<pb::AttachRequest>) -> Reply<pb::AttachResponse> {
        serve("Attach", exec::attach(self, req.into_inner())).await
    }

    async fn port_forward(
        &self,
        req: Request<pb::PortForwardRequest>,
    ) -> Reply<pb::PortForwardResponse> {
        serve("PortForward", exec::port_forward(self, req.into_inner())).await
    }

    // Stats and metrics (stats.rs)
    async fn container_stats(
        &self,
        req: Request<pb::ContainerStatsRequest>,
    ) -> Reply<pb::ContainerStatsResponse> {
        serve("ContainerStats", stats::container(self, req.into_inner())).await
    }

    async fn list_container_stats(
        &self,
        req: Request<pb::ListContainerStatsRequest>,
    ) -> Reply<pb::ListContainerStatsResponse> {
        list(
            "ListContainerStats",
            stats::containers(self, req.into_inner().filter),
        )
        .await
    }

    type StreamContainerStatsStream = Pages<pb::StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        req: Request<pb::StreamContainerStatsRequest>,
    ) -> Reply<Self::StreamContainerStatsStream> {
        stream(
            "StreamContainerStats",
            stats::containers(self, req.into_inner().filter),
        )
        .await
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<pb::PodSandboxStatsRequest>,
    ) -> Reply<pb::PodSandboxStatsResponse> {
        serve("PodSandboxStats", stats::sandbox(self, req.into_inner())).await
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<pb::ListPodSandboxStatsRequest>,
    ) -> Reply<pb::ListPodSandboxStatsResponse> {
        list(
            "ListPodSandboxStats",
            stats::sandboxes(self, req.into_inner().filter),
        )
        .await
    }

    type StreamPodSandboxStatsStream = Pages<pb::StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        req: Request<pb::StreamPodSandboxStatsRequest>,
    ) -> Reply<Self::StreamPodSandboxStatsStream> {
        stream(
            "StreamPodSandboxStats",
            stats::sandboxes(self, req.into_inner().filter),
        )
        .await
    }

    async fn list_metric_descriptors(
        &self,
        req: Request<pb::ListMetricDescriptorsRequest>,
    ) -> Reply<pb::ListMetricDescriptorsResponse> {
        serve(
            "ListMetricDescriptors",
            stats::metric_descriptors(req.into_inner()),
        )
        .await
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<pb::ListPodSandboxMetricsRequest>,
    ) -> Reply<pb::ListPodSandboxMetricsResponse> {
        list("ListPodSandboxMetrics", stats::sandbox_metrics(self)).await
    }

    type StreamPodSandboxMetricsStream = Pages<pb::StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _req: Request<pb::StreamPodSandboxMetricsRequest>,
    ) -> Reply<Self::StreamPodSandboxMetricsStream> {
        stream("StreamPodSandboxMetrics", stats::sandbox_metrics(self)).await
    }
}

#[cfg(test)]
mod tests;
