//! CRI RuntimeService: Version, Status and RuntimeConfig; pod and container RPCs arrive with later issues.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::config::{CgroupDriver, Config};
use crate::cri::status::unimplemented;
use crate::proto::runtime::v1 as pb;
use crate::version;
use pb::runtime_service_server::RuntimeService;

/// A server stream type for RPCs that are not served yet.
type Unimplemented<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// The CRI RuntimeService.
pub struct CriRuntime {
    config: Arc<Config>,
}

impl CriRuntime {
    /// Serves the runtime with `config`.
    pub fn new(config: Arc<Config>) -> Self {
        CriRuntime { config }
    }

    /// RuntimeReady and NetworkReady, as the kubelet requires both to be present.
    fn conditions(&self) -> Vec<pb::RuntimeCondition> {
        vec![
            pb::RuntimeCondition {
                r#type: "RuntimeReady".into(),
                status: true,
                reason: String::new(),
                message: String::new(),
            },
            // Pod networking (CNI) lands with the networking issue; until then only hostNetwork
            // pods are admissible, which is exactly what NetworkReady=false tells the kubelet.
            pb::RuntimeCondition {
                r#type: "NetworkReady".into(),
                status: false,
                reason: "NetworkPluginNotReady".into(),
                message: "bosun: pod networking (CNI) is not available in this version".into(),
            },
        ]
    }
}

#[tonic::async_trait]
impl RuntimeService for CriRuntime {
    async fn version(
        &self,
        _req: Request<pb::VersionRequest>,
    ) -> Result<Response<pb::VersionResponse>, Status> {
        Ok(Response::new(pb::VersionResponse {
            version: "0.1.0".into(), // the CRI "kubelet API version" field: fixed by the kubelet as 0.1.0
            runtime_name: version::RUNTIME_NAME.into(),
            runtime_version: version::long(),
            runtime_api_version: version::CRI_API_VERSION.into(),
        }))
    }

    async fn status(
        &self,
        req: Request<pb::StatusRequest>,
    ) -> Result<Response<pb::StatusResponse>, Status> {
        let mut info = HashMap::new();
        if req.into_inner().verbose {
            info.insert("config".to_string(), self.config.to_toml());
            info.insert("version".to_string(), version::long());
        }
        Ok(Response::new(pb::StatusResponse {
            status: Some(pb::RuntimeStatus {
                conditions: self.conditions(),
            }),
            info,
            runtime_handlers: vec![pb::RuntimeHandler {
                name: String::new(),
                features: Some(pb::RuntimeHandlerFeatures::default()),
            }],
            features: Some(pb::RuntimeFeatures::default()),
        }))
    }

    async fn runtime_config(
        &self,
        _req: Request<pb::RuntimeConfigRequest>,
    ) -> Result<Response<pb::RuntimeConfigResponse>, Status> {
        // Answer explicitly: the enum's zero value is SYSTEMD.
        let driver = match self.config.cgroup_driver {
            CgroupDriver::Cgroupfs => pb::CgroupDriver::Cgroupfs,
            CgroupDriver::Systemd => pb::CgroupDriver::Systemd,
        };
        Ok(Response::new(pb::RuntimeConfigResponse {
            linux: Some(pb::LinuxRuntimeConfiguration {
                cgroup_driver: driver as i32,
            }),
        }))
    }

    async fn run_pod_sandbox(
        &self,
        _req: Request<pb::RunPodSandboxRequest>,
    ) -> Result<Response<pb::RunPodSandboxResponse>, Status> {
        Err(unimplemented("RunPodSandbox"))
    }

    async fn stop_pod_sandbox(
        &self,
        _req: Request<pb::StopPodSandboxRequest>,
    ) -> Result<Response<pb::StopPodSandboxResponse>, Status> {
        Err(unimplemented("StopPodSandbox"))
    }

    async fn remove_pod_sandbox(
        &self,
        _req: Request<pb::RemovePodSandboxRequest>,
    ) -> Result<Response<pb::RemovePodSandboxResponse>, Status> {
        Err(unimplemented("RemovePodSandbox"))
    }

    async fn pod_sandbox_status(
        &self,
        _req: Request<pb::PodSandboxStatusRequest>,
    ) -> Result<Response<pb::PodSandboxStatusResponse>, Status> {
        Err(unimplemented("PodSandboxStatus"))
    }

    async fn list_pod_sandbox(
        &self,
        _req: Request<pb::ListPodSandboxRequest>,
    ) -> Result<Response<pb::ListPodSandboxResponse>, Status> {
        Err(unimplemented("ListPodSandbox"))
    }

    type StreamPodSandboxesStream = Unimplemented<pb::StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        _req: Request<pb::StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        Err(unimplemented("StreamPodSandboxes"))
    }

    async fn create_container(
        &self,
        _req: Request<pb::CreateContainerRequest>,
    ) -> Result<Response<pb::CreateContainerResponse>, Status> {
        Err(unimplemented("CreateContainer"))
    }

    async fn start_container(
        &self,
        _req: Request<pb::StartContainerRequest>,
    ) -> Result<Response<pb::StartContainerResponse>, Status> {
        Err(unimplemented("StartContainer"))
    }

    async fn stop_container(
        &self,
        _req: Request<pb::StopContainerRequest>,
    ) -> Result<Response<pb::StopContainerResponse>, Status> {
        Err(unimplemented("StopContainer"))
    }

    async fn remove_container(
        &self,
        _req: Request<pb::RemoveContainerRequest>,
    ) -> Result<Response<pb::RemoveContainerResponse>, Status> {
        Err(unimplemented("RemoveContainer"))
    }

    async fn list_containers(
        &self,
        _req: Request<pb::ListContainersRequest>,
    ) -> Result<Response<pb::ListContainersResponse>, Status> {
        Err(unimplemented("ListContainers"))
    }

    type StreamContainersStream = Unimplemented<pb::StreamContainersResponse>;

    async fn stream_containers(
        &self,
        _req: Request<pb::StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        Err(unimplemented("StreamContainers"))
    }

    async fn container_status(
        &self,
        _req: Request<pb::ContainerStatusRequest>,
    ) -> Result<Response<pb::ContainerStatusResponse>, Status> {
        Err(unimplemented("ContainerStatus"))
    }

    async fn update_container_resources(
        &self,
        _req: Request<pb::UpdateContainerResourcesRequest>,
    ) -> Result<Response<pb::UpdateContainerResourcesResponse>, Status> {
        Err(unimplemented("UpdateContainerResources"))
    }

    async fn reopen_container_log(
        &self,
        _req: Request<pb::ReopenContainerLogRequest>,
    ) -> Result<Response<pb::ReopenContainerLogResponse>, Status> {
        Err(unimplemented("ReopenContainerLog"))
    }

    async fn exec_sync(
        &self,
        _req: Request<pb::ExecSyncRequest>,
    ) -> Result<Response<pb::ExecSyncResponse>, Status> {
        Err(unimplemented("ExecSync"))
    }

    async fn exec(
        &self,
        _req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        Err(unimplemented("Exec"))
    }

    async fn attach(
        &self,
        _req: Request<pb::AttachRequest>,
    ) -> Result<Response<pb::AttachResponse>, Status> {
        Err(unimplemented("Attach"))
    }

    async fn port_forward(
        &self,
        _req: Request<pb::PortForwardRequest>,
    ) -> Result<Response<pb::PortForwardResponse>, Status> {
        Err(unimplemented("PortForward"))
    }

    async fn container_stats(
        &self,
        _req: Request<pb::ContainerStatsRequest>,
    ) -> Result<Response<pb::ContainerStatsResponse>, Status> {
        Err(unimplemented("ContainerStats"))
    }

    async fn list_container_stats(
        &self,
        _req: Request<pb::ListContainerStatsRequest>,
    ) -> Result<Response<pb::ListContainerStatsResponse>, Status> {
        Err(unimplemented("ListContainerStats"))
    }

    type StreamContainerStatsStream = Unimplemented<pb::StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        _req: Request<pb::StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        Err(unimplemented("StreamContainerStats"))
    }

    async fn pod_sandbox_stats(
        &self,
        _req: Request<pb::PodSandboxStatsRequest>,
    ) -> Result<Response<pb::PodSandboxStatsResponse>, Status> {
        Err(unimplemented("PodSandboxStats"))
    }

    async fn list_pod_sandbox_stats(
        &self,
        _req: Request<pb::ListPodSandboxStatsRequest>,
    ) -> Result<Response<pb::ListPodSandboxStatsResponse>, Status> {
        Err(unimplemented("ListPodSandboxStats"))
    }

    type StreamPodSandboxStatsStream = Unimplemented<pb::StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        _req: Request<pb::StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        Err(unimplemented("StreamPodSandboxStats"))
    }

    async fn update_runtime_config(
        &self,
        _req: Request<pb::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<pb::UpdateRuntimeConfigResponse>, Status> {
        Err(unimplemented("UpdateRuntimeConfig"))
    }

    async fn checkpoint_container(
        &self,
        _req: Request<pb::CheckpointContainerRequest>,
    ) -> Result<Response<pb::CheckpointContainerResponse>, Status> {
        Err(unimplemented("CheckpointContainer"))
    }

    type GetContainerEventsStream = Unimplemented<pb::ContainerEventResponse>;

    async fn get_container_events(
        &self,
        _req: Request<pb::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        Err(unimplemented("GetContainerEvents"))
    }

    async fn list_metric_descriptors(
        &self,
        _req: Request<pb::ListMetricDescriptorsRequest>,
    ) -> Result<Response<pb::ListMetricDescriptorsResponse>, Status> {
        Err(unimplemented("ListMetricDescriptors"))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<pb::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<pb::ListPodSandboxMetricsResponse>, Status> {
        Err(unimplemented("ListPodSandboxMetrics"))
    }

    type StreamPodSandboxMetricsStream = Unimplemented<pb::StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _req: Request<pb::StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        Err(unimplemented("StreamPodSandboxMetrics"))
    }

    async fn update_pod_sandbox_resources(
        &self,
        _req: Request<pb::UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<pb::UpdatePodSandboxResourcesResponse>, Status> {
        Err(unimplemented("UpdatePodSandboxResources"))
    }
}
