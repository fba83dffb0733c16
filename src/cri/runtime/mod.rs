//! CRI RuntimeService: sandbox and container RPCs translated to `runtime::Runtime`; streaming, stats and events later.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::config::{CgroupDriver, Config};
use crate::cri::convert::stream as streaming;
use crate::cri::convert::{
    container, event, exec, filter, resources, sandbox, stats, status as st,
};
use crate::cri::errors::{checkpoint_unavailable, reply, to_status};
use crate::proto::runtime::v1 as pb;
use crate::runtime::Runtime;
use crate::version;
use pb::runtime_service_server::RuntimeService;

/// Listings streamed in pages of this many items.
const STREAM_PAGE: usize = 256;

/// A listing served as a stream of pages.
type Pages<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send>>;

/// `items` in pages of [`STREAM_PAGE`], each wrapped by `page`.
fn pages<I: Clone + Send + 'static, T: Send + 'static>(
    items: Vec<I>,
    page: impl Fn(Vec<I>) -> T,
) -> Pages<T> {
    let pages: Vec<_> = items
        .chunks(STREAM_PAGE)
        .map(|c| Ok(page(c.to_vec())))
        .collect();
    Box::pin(futures::stream::iter(pages))
}

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

    /// The streaming server, or Unavailable when the daemon runs without one.
    fn streaming(&self, rpc: &str) -> crate::Result<&crate::stream::Server> {
        self.streaming
            .as_deref()
            .ok_or_else(|| crate::Error::unavailable(format!("{rpc}: no streaming server")))
    }

    /// ListPodSandbox / StreamPodSandboxes items.
    fn sandboxes(&self, f: Option<pb::PodSandboxFilter>) -> crate::Result<Vec<pb::PodSandbox>> {
        let f = filter::sandbox_filter(f)?;
        Ok(self
            .runtime
            .list_sandboxes(&f)
            .iter()
            .map(|e| st::sandbox_item(e.id(), e.meta(), &e.status()))
            .collect())
    }

    /// ListContainers / StreamContainers items.
    fn containers(&self, f: Option<pb::ContainerFilter>) -> crate::Result<Vec<pb::Container>> {
        let mut f = filter::container_filter(f)?;
        // A sandbox id prefix is resolved to the full id, as containerd does.
        if let Some(full) = f
            .pod_id
            .as_deref()
            .and_then(|p| self.runtime.sandbox(p).ok())
        {
            f.pod_id = Some(full.id().to_string());
        }
        Ok(self
            .runtime
            .list_containers(&f)
            .iter()
            .map(|e| st::container_item(e.id(), e.meta(), &e.status()))
            .collect())
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
            st::network_condition(&self.runtime.network_status()),
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
            let net = self.runtime.network_status();
            let network = serde_json::json!({
                "name": net.name, "ready": net.ready, "reason": net.reason, "message": net.message,
            });
            info.insert("network".to_string(), network.to_string());
            if let Some(s) = &self.streaming {
                info.insert("streamingAddress".to_string(), s.addr().to_string());
            }
        }
        Ok(Response::new(pb::StatusResponse {
            status: Some(pb::RuntimeStatus {
                conditions: self.conditions(),
            }),
            info,
            runtime_handlers: st::runtime_handlers(self.runtime.host()),
            features: Some(st::runtime_features()),
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
        req: Request<pb::RunPodSandboxRequest>,
    ) -> Result<Response<pb::RunPodSandboxResponse>, Status> {
        let req = req.into_inner();
        let r = async {
            let new = sandbox::sandbox_request(req.config, &req.runtime_handler)?;
            let pod_sandbox_id = self.runtime.run_sandbox(new).await?;
            Ok(pb::RunPodSandboxResponse { pod_sandbox_id })
        };
        reply("RunPodSandbox", r.await)
    }

    async fn stop_pod_sandbox(
        &self,
        req: Request<pb::StopPodSandboxRequest>,
    ) -> Result<Response<pb::StopPodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        let r = self.runtime.stop_sandbox(&id).await;
        reply("StopPodSandbox", r.map(|()| pb::StopPodSandboxResponse {}))
    }

    async fn remove_pod_sandbox(
        &self,
        req: Request<pb::RemovePodSandboxRequest>,
    ) -> Result<Response<pb::RemovePodSandboxResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        let r = self.runtime.remove_sandbox(&id).await;
        reply(
            "RemovePodSandbox",
            r.map(|()| pb::RemovePodSandboxResponse {}),
        )
    }

    async fn pod_sandbox_status(
        &self,
        req: Request<pb::PodSandboxStatusRequest>,
    ) -> Result<Response<pb::PodSandboxStatusResponse>, Status> {
        let req = req.into_inner();
        let r = self.runtime.sandbox(&req.pod_sandbox_id).map(|e| {
            let (meta, status) = (e.meta(), e.status());
            pb::PodSandboxStatusResponse {
                status: Some(st::sandbox_status(e.id(), meta, &status)),
                info: if req.verbose {
                    let mut info = st::sandbox_info(e.id(), meta, &status);
                    if let Some(pod) = self
                        .pods
                        .as_ref()
                        .and_then(|p| p.pod_status_json(&meta.request.pod.uid))
                    {
                        info.insert("pod".to_string(), pod);
                    }
                    info
                } else {
                    HashMap::new()
                },
                ..Default::default()
            }
        });
        reply("PodSandboxStatus", r)
    }

    async fn list_pod_sandbox(
        &self,
        req: Request<pb::ListPodSandboxRequest>,
    ) -> Result<Response<pb::ListPodSandboxResponse>, Status> {
        let r = self.sandboxes(req.into_inner().filter);
        reply(
            "ListPodSandbox",
            r.map(|items| pb::ListPodSandboxResponse { items }),
        )
    }

    type StreamPodSandboxesStream = Pages<pb::StreamPodSandboxesResponse>;

    async fn stream_pod_sandboxes(
        &self,
        req: Request<pb::StreamPodSandboxesRequest>,
    ) -> Result<Response<Self::StreamPodSandboxesStream>, Status> {
        let items = self
            .sandboxes(req.into_inner().filter)
            .map_err(|e| to_status("StreamPodSandboxes", e))?;
        Ok(Response::new(pages(items, |pod_sandboxes| {
            pb::StreamPodSandboxesResponse { pod_sandboxes }
        })))
    }

    async fn create_container(
        &self,
        req: Request<pb::CreateContainerRequest>,
    ) -> Result<Response<pb::CreateContainerResponse>, Status> {
        let req = req.into_inner();
        let r = async {
            let new = container::new_container(req.config)?;
            let container_id = self
                .runtime
                .create_container(&req.pod_sandbox_id, new)
                .await?;
            Ok(pb::CreateContainerResponse { container_id })
        };
        reply("CreateContainer", r.await)
    }

    async fn start_container(
        &self,
        req: Request<pb::StartContainerRequest>,
    ) -> Result<Response<pb::StartContainerResponse>, Status> {
        let id = req.into_inner().container_id;
        let r = self.runtime.start_container(&id).await;
        reply("StartContainer", r.map(|()| pb::StartContainerResponse {}))
    }

    async fn stop_container(
        &self,
        req: Request<pb::StopContainerRequest>,
    ) -> Result<Response<pb::StopContainerResponse>, Status> {
        let req = req.into_inner();
        let r = self
            .runtime
            .stop_container(&req.container_id, req.timeout)
            .await;
        reply("StopContainer", r.map(|()| pb::StopContainerResponse {}))
    }

    async fn remove_container(
        &self,
        req: Request<pb::RemoveContainerRequest>,
    ) -> Result<Response<pb::RemoveContainerResponse>, Status> {
        let id = req.into_inner().container_id;
        let r = self.runtime.remove_container(&id).await;
        reply(
            "RemoveContainer",
            r.map(|()| pb::RemoveContainerResponse {}),
        )
    }

    async fn list_containers(
        &self,
        req: Request<pb::ListContainersRequest>,
    ) -> Result<Response<pb::ListContainersResponse>, Status> {
        let r = self.containers(req.into_inner().filter);
        reply(
            "ListContainers",
            r.map(|containers| pb::ListContainersResponse { containers }),
        )
    }

    type StreamContainersStream = Pages<pb::StreamContainersResponse>;

    async fn stream_containers(
        &self,
        req: Request<pb::StreamContainersRequest>,
    ) -> Result<Response<Self::StreamContainersStream>, Status> {
        let items = self
            .containers(req.into_inner().filter)
            .map_err(|e| to_status("StreamContainers", e))?;
        Ok(Response::new(pages(items, |containers| {
            pb::StreamContainersResponse { containers }
        })))
    }

    async fn container_status(
        &self,
        req: Request<pb::ContainerStatusRequest>,
    ) -> Result<Response<pb::ContainerStatusResponse>, Status> {
        let req = req.into_inner();
        let r = self.runtime.container(&req.container_id).map(|e| {
            let (meta, status) = (e.meta(), e.status());
            pb::ContainerStatusResponse {
                status: Some(st::container_status(e.id(), meta, &status)),
                info: if req.verbose {
                    st::container_info(e.id(), meta, &status)
                } else {
                    HashMap::new()
                },
            }
        });
        reply("ContainerStatus", r)
    }

    async fn update_container_resources(
        &self,
        req: Request<pb::UpdateContainerResourcesRequest>,
    ) -> Result<Response<pb::UpdateContainerResourcesResponse>, Status> {
        let req = req.into_inner();
        let r = async {
            let resources = resources::update_resources(req.linux)?;
            self.runtime
                .update_container(&req.container_id, resources)
                .await?;
            Ok(pb::UpdateContainerResourcesResponse {})
        };
        reply("UpdateContainerResources", r.await)
    }

    async fn reopen_container_log(
        &self,
        req: Request<pb::ReopenContainerLogRequest>,
    ) -> Result<Response<pb::ReopenContainerLogResponse>, Status> {
        let r = self
            .runtime
            .reopen_log(&req.into_inner().container_id)
            .await;
        reply(
            "ReopenContainerLog",
            r.map(|()| pb::ReopenContainerLogResponse {}),
        )
    }

    async fn exec_sync(
        &self,
        req: Request<pb::ExecSyncRequest>,
    ) -> Result<Response<pb::ExecSyncResponse>, Status> {
        let req = req.into_inner();
        let r = async {
            let (cmd, timeout) = exec::exec_args(req.cmd, req.timeout)?;
            let out = self
                .runtime
                .exec_sync(&req.container_id, cmd, timeout)
                .await?;
            Ok(exec::exec_response(out))
        };
        reply("ExecSync", r.await)
    }

    async fn exec(
        &self,
        req: Request<pb::ExecRequest>,
    ) -> Result<Response<pb::ExecResponse>, Status> {
        let r = streaming::exec_request(req.into_inner()).and_then(|(id, cmd, s)| {
            self.streaming("exec")?
                .exec_url(&id, cmd, s)
                .map(streaming::exec_response)
        });
        reply("Exec", r)
    }

    async fn attach(
        &self,
        req: Request<pb::AttachRequest>,
    ) -> Result<Response<pb::AttachResponse>, Status> {
        let r = streaming::attach_request(req.into_inner()).and_then(|(id, s)| {
            let url = self.streaming("attach")?.attach_url(&id, s)?;
            Ok(pb::AttachResponse { url })
        });
        reply("Attach", r)
    }

    async fn port_forward(
        &self,
        req: Request<pb::PortForwardRequest>,
    ) -> Result<Response<pb::PortForwardResponse>, Status> {
        let r = streaming::port_forward_request(req.into_inner()).and_then(|id| {
            let url = self.streaming("port forward")?.port_forward_url(&id)?;
            Ok(pb::PortForwardResponse { url })
        });
        reply("PortForward", r)
    }

    async fn container_stats(
        &self,
        req: Request<pb::ContainerStatsRequest>,
    ) -> Result<Response<pb::ContainerStatsResponse>, Status> {
        let id = req.into_inner().container_id;
        let r = self.runtime.container_stats(&id).await;
        let r = r.map(|s| pb::ContainerStatsResponse {
            stats: Some(stats::container_stats(&s)),
        });
        reply("ContainerStats", r)
    }

    async fn list_container_stats(
        &self,
        req: Request<pb::ListContainerStatsRequest>,
    ) -> Result<Response<pb::ListContainerStatsResponse>, Status> {
        let f = stats::container_filter(req.into_inner().filter);
        let r = self.runtime.list_container_stats(&f).await;
        let r = r.map(|all| pb::ListContainerStatsResponse {
            stats: all.iter().map(stats::container_stats).collect(),
        });
        reply("ListContainerStats", r)
    }

    type StreamContainerStatsStream = Pages<pb::StreamContainerStatsResponse>;

    async fn stream_container_stats(
        &self,
        req: Request<pb::StreamContainerStatsRequest>,
    ) -> Result<Response<Self::StreamContainerStatsStream>, Status> {
        let f = stats::container_filter(req.into_inner().filter);
        let all = self.runtime.list_container_stats(&f).await;
        let all = all.map_err(|e| to_status("StreamContainerStats", e))?;
        let items: Vec<_> = all.iter().map(stats::container_stats).collect();
        Ok(Response::new(pages(items, |container_stats| {
            pb::StreamContainerStatsResponse { container_stats }
        })))
    }

    async fn pod_sandbox_stats(
        &self,
        req: Request<pb::PodSandboxStatsRequest>,
    ) -> Result<Response<pb::PodSandboxStatsResponse>, Status> {
        let id = req.into_inner().pod_sandbox_id;
        let r = self.runtime.sandbox_stats(&id).await;
        let r = r.map(|s| pb::PodSandboxStatsResponse {
            stats: Some(stats::sandbox_stats(&s)),
        });
        reply("PodSandboxStats", r)
    }

    async fn list_pod_sandbox_stats(
        &self,
        req: Request<pb::ListPodSandboxStatsRequest>,
    ) -> Result<Response<pb::ListPodSandboxStatsResponse>, Status> {
        let f = stats::sandbox_filter(req.into_inner().filter);
        let r = self.runtime.list_sandbox_stats(&f).await;
        let r = r.map(|all| pb::ListPodSandboxStatsResponse {
            stats: all.iter().map(stats::sandbox_stats).collect(),
        });
        reply("ListPodSandboxStats", r)
    }

    type StreamPodSandboxStatsStream = Pages<pb::StreamPodSandboxStatsResponse>;

    async fn stream_pod_sandbox_stats(
        &self,
        req: Request<pb::StreamPodSandboxStatsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxStatsStream>, Status> {
        let f = stats::sandbox_filter(req.into_inner().filter);
        let all = self.runtime.list_sandbox_stats(&f).await;
        let all = all.map_err(|e| to_status("StreamPodSandboxStats", e))?;
        let items: Vec<_> = all.iter().map(stats::sandbox_stats).collect();
        Ok(Response::new(pages(items, |pod_sandbox_stats| {
            pb::StreamPodSandboxStatsResponse { pod_sandbox_stats }
        })))
    }

    async fn update_runtime_config(
        &self,
        req: Request<pb::UpdateRuntimeConfigRequest>,
    ) -> Result<Response<pb::UpdateRuntimeConfigResponse>, Status> {
        let cidr = req
            .into_inner()
            .runtime_config
            .and_then(|c| c.network_config)
            .map(|n| n.pod_cidr)
            .unwrap_or_default();
        let r = self.runtime.set_pod_cidr(&cidr);
        reply(
            "UpdateRuntimeConfig",
            r.map(|()| pb::UpdateRuntimeConfigResponse {}),
        )
    }

    async fn checkpoint_container(
        &self,
        _req: Request<pb::CheckpointContainerRequest>,
    ) -> Result<Response<pb::CheckpointContainerResponse>, Status> {
        Err(Status::unimplemented(checkpoint_unavailable(
            crate::oci::host::find_in_path("criu").as_deref(),
        )))
    }

    type GetContainerEventsStream = Pages<pb::ContainerEventResponse>;

    async fn get_container_events(
        &self,
        _req: Request<pb::GetEventsRequest>,
    ) -> Result<Response<Self::GetContainerEventsStream>, Status> {
        let rx = self.runtime.subscribe_events();
        Ok(Response::new(Box::pin(event::stream(rx))))
    }

    async fn list_metric_descriptors(
        &self,
        _req: Request<pb::ListMetricDescriptorsRequest>,
    ) -> Result<Response<pb::ListMetricDescriptorsResponse>, Status> {
        Ok(Response::new(pb::ListMetricDescriptorsResponse {
            descriptors: stats::metric_descriptors(),
        }))
    }

    async fn list_pod_sandbox_metrics(
        &self,
        _req: Request<pb::ListPodSandboxMetricsRequest>,
    ) -> Result<Response<pb::ListPodSandboxMetricsResponse>, Status> {
        let r = self.runtime.list_sandbox_stats(&Default::default()).await;
        let r = r.map(|all| pb::ListPodSandboxMetricsResponse {
            pod_metrics: all.iter().map(stats::sandbox_metrics).collect(),
        });
        reply("ListPodSandboxMetrics", r)
    }

    type StreamPodSandboxMetricsStream = Pages<pb::StreamPodSandboxMetricsResponse>;

    async fn stream_pod_sandbox_metrics(
        &self,
        _req: Request<pb::StreamPodSandboxMetricsRequest>,
    ) -> Result<Response<Self::StreamPodSandboxMetricsStream>, Status> {
        let all = self.runtime.list_sandbox_stats(&Default::default()).await;
        let all = all.map_err(|e| to_status("StreamPodSandboxMetrics", e))?;
        let items: Vec<_> = all.iter().map(stats::sandbox_metrics).collect();
        Ok(Response::new(pages(items, |pod_sandbox_metrics| {
            pb::StreamPodSandboxMetricsResponse {
                pod_sandbox_metrics,
            }
        })))
    }

    async fn update_pod_sandbox_resources(
        &self,
        req: Request<pb::UpdatePodSandboxResourcesRequest>,
    ) -> Result<Response<pb::UpdatePodSandboxResourcesResponse>, Status> {
        let req = req.into_inner();
        let r = (|| {
            let overhead = req.overhead.map(resources::resources).transpose()?;
            let limits = req.resources.map(resources::resources).transpose()?;
            self.runtime
                .update_sandbox_resources(&req.pod_sandbox_id, overhead, limits)?;
            Ok(pb::UpdatePodSandboxResourcesResponse {})
        })();
        reply("UpdatePodSandboxResources", r)
    }
}

#[cfg(test)]
mod tests;
