//! bosun.v1.Pods: the supervisor's PodService over gRPC (decode, call, encode).

use std::collections::BTreeMap;
use std::pin::Pin;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use crate::cri::errors::to_status;
use crate::error::Error;
use crate::pod::api::{self, PodService, WatchKind};
use crate::proto::bosun::v1 as pb;
use pb::pods_server::Pods as PodsApi;

/// The bosun.v1.Pods service.
pub struct ApiPods {
    pods: Arc<dyn PodService>,
}

impl ApiPods {
    /// Serves `pods`.
    pub fn new(pods: Arc<dyn PodService>) -> Self {
        ApiPods { pods }
    }
}

/// An event as the wire carries it.
fn event_to_proto(e: &api::PodEvent) -> pb::PodEvent {
    pb::PodEvent {
        r#type: e.kind.as_str().to_string(),
        reason: e.reason.clone(),
        object: e.object.clone(),
        message: e.message.clone(),
        count: e.count,
        first_timestamp_ns: e.first_ns,
        last_timestamp_ns: e.last_ns,
    }
}

/// A PodView as the wire carries it.
pub fn view_to_proto(v: &api::PodView) -> pb::PodView {
    pb::PodView {
        pod_json: serde_json::to_string(&v.pod).unwrap_or_default(),
        events: v.events.iter().map(event_to_proto).collect(),
        probes: v
            .probes
            .iter()
            .map(|p| pb::ProbeReport {
                container: p.container.clone(),
                probe: p.probe.clone(),
                result: p.result.clone(),
                message: p.message.clone(),
                at_ns: p.at_ns,
            })
            .collect(),
        source: v.source.clone(),
        sandbox_id: v.sandbox_id.clone(),
        user_namespace: v.user_namespace.clone(),
        logs: v
            .logs
            .iter()
            .map(|l| pb::LogRef {
                container: l.container.clone(),
                current: l.current.clone().unwrap_or_default(),
                previous: l.previous.clone().unwrap_or_default(),
                container_id: l.container_id.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn namespace(ns: &str) -> &str {
    if ns.is_empty() {
        "default"
    } else {
        ns
    }
}

fn required(rpc: &'static str, what: &str, v: &str) -> Result<(), Status> {
    if v.is_empty() {
        return Err(to_status(
            rpc,
            Error::invalid(format!("{what} is required")),
        ));
    }
    Ok(())
}

type WatchStream = Pin<Box<dyn futures::Stream<Item = Result<pb::WatchPodsEvent, Status>> + Send>>;

#[tonic::async_trait]
impl PodsApi for ApiPods {
    async fn apply(
        &self,
        req: Request<pb::ApplyPodsRequest>,
    ) -> Result<Response<pb::ApplyPodsResponse>, Status> {
        let req = req.into_inner();
        let out = self
            .pods
            .apply(api::ApplyRequest {
                text: req.text,
                source: req.source,
            })
            .await
            .map_err(|e| to_status("Apply", e))?;
        Ok(Response::new(pb::ApplyPodsResponse {
            pods: out
                .pods
                .into_iter()
                .map(|p| pb::AppliedPod {
                    namespace: p.namespace,
                    name: p.name,
                    uid: p.uid,
                    action: p.action.as_str().to_string(),
                })
                .collect(),
            warnings: out.warnings,
        }))
    }

    async fn get(&self, req: Request<pb::GetPodRequest>) -> Result<Response<pb::PodView>, Status> {
        let req = req.into_inner();
        required("Get", "name", &req.name)?;
        let v = self
            .pods
            .get(namespace(&req.namespace), &req.name)
            .await
            .map_err(|e| to_status("Get", e))?;
        Ok(Response::new(view_to_proto(&v)))
    }

    async fn list(
        &self,
        req: Request<pb::ListPodsRequest>,
    ) -> Result<Response<pb::ListPodsResponse>, Status> {
        let req = req.into_inner();
        let labels: BTreeMap<String, String> = req.labels.into_iter().collect();
        let ns = (!req.namespace.is_empty()).then_some(req.namespace.as_str());
        let pods = self
            .pods
            .list(ns, &labels)
            .await
            .map_err(|e| to_status("List", e))?;
        Ok(Response::new(pb::ListPodsResponse {
            pods: pods.iter().map(view_to_proto).collect(),
        }))
    }

    async fn delete(
        &self,
        req: Request<pb::DeletePodRequest>,
    ) -> Result<Response<pb::PodView>, Status> {
        let req = req.into_inner();
        required("Delete", "name", &req.name)?;
        if req.grace_period.is_some_and(|g| g < 0) {
            return Err(to_status(
                "Delete",
                Error::invalid(format!(
                    "pod {}/{}: grace period must be ≥ 0",
                    namespace(&req.namespace),
                    req.name
                )),
            ));
        }
        let v = self
            .pods
            .delete(api::DeleteRequest {
                namespace: namespace(&req.namespace).to_string(),
                name: req.name,
                grace_period: req.grace_period,
                force: req.force,
            })
            .await
            .map_err(|e| to_status("Delete", e))?;
        Ok(Response::new(view_to_proto(&v)))
    }

    type WatchStream = WatchStream;

    async fn watch(
        &self,
        _req: Request<pb::WatchPodsRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let rx = self.pods.watch();
        let stream = futures::stream::unfold(rx, |mut rx| async move {
            use tokio::sync::broadcast::error::RecvError;
            let ev = match rx.recv().await {
                Ok(ev) => {
                    let kind = match ev.kind {
                        WatchKind::Added => "ADDED",
                        WatchKind::Modified => "MODIFIED",
                        WatchKind::Deleted => "DELETED",
                    };
                    pb::WatchPodsEvent {
                        r#type: kind.to_string(),
                        pod: Some(view_to_proto(&ev.view)),
                    }
                }
                // The reader fell behind: say so; it lists again.
                Err(RecvError::Lagged(_)) => pb::WatchPodsEvent {
                    r#type: "RESYNC".into(),
                    pod: None,
                },
                Err(RecvError::Closed) => return None,
            };
            Some((Ok(ev), rx))
        });
        Ok(Response::new(Box::pin(stream)))
    }

    async fn describe_node(
        &self,
        _req: Request<pb::DescribeNodeRequest>,
    ) -> Result<Response<pb::NodeView>, Status> {
        let v = self
            .pods
            .node()
            .await
            .map_err(|e| to_status("DescribeNode", e))?;
        Ok(Response::new(pb::NodeView {
            node_json: serde_json::to_string(&v.node).unwrap_or_default(),
            events: v.events.iter().map(event_to_proto).collect(),
            pods: v
                .pods
                .into_iter()
                .map(|p| pb::NodePod {
                    namespace: p.namespace,
                    name: p.name,
                    qos_class: p.qos_class,
                    priority: p.priority,
                    cpu_requests_milli: p.cpu_requests_milli,
                    cpu_limits_milli: p.cpu_limits_milli,
                    memory_requests: p.memory_requests,
                    memory_limits: p.memory_limits,
                })
                .collect(),
        }))
    }

    async fn set_condition(
        &self,
        req: Request<pb::SetPodConditionRequest>,
    ) -> Result<Response<pb::PodView>, Status> {
        let req = req.into_inner();
        required("SetCondition", "name", &req.name)?;
        required("SetCondition", "type", &req.r#type)?;
        if req.status != "True" && req.status != "False" {
            return Err(to_status(
                "SetCondition",
                Error::invalid(format!(
                    "condition {}: status must be True or False, not {:?}",
                    req.r#type, req.status
                )),
            ));
        }
        let v = self
            .pods
            .set_condition(api::SetCondition {
                namespace: namespace(&req.namespace).to_string(),
                name: req.name,
                condition_type: req.r#type,
                status: req.status,
                reason: req.reason,
                message: req.message,
            })
            .await
            .map_err(|e| to_status("SetCondition", e))?;
        Ok(Response::new(view_to_proto(&v)))
    }
}
