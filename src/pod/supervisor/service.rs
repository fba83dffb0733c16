//! The supervisor as a pod service (the API and CLI's view) and as the CRI's pod status source.

use std::collections::BTreeMap;

use tokio::sync::broadcast;

use super::worker::Msg;
use super::{describe, lock, Supervisor};
use crate::error::{Error, Result};
use crate::pod::api::{
    ApplyOutcome, ApplyRequest, DeleteRequest, PodService, PodView, SetCondition, WatchEvent,
};

#[async_trait::async_trait]
impl PodService for Supervisor {
    async fn apply(&self, req: ApplyRequest) -> Result<ApplyOutcome> {
        let source = if req.source.is_empty() {
            "-"
        } else {
            &req.source
        };
        let (mut pods, warnings) = Self::check(&req.text, source)?;
        self.prioritize(&mut pods, source)?;
        let pods = self.apply_pods(pods, "api", None);
        Ok(ApplyOutcome { pods, warnings })
    }

    async fn node(&self) -> Result<crate::pod::api::NodeView> {
        Ok(describe::node_view(&self.sh))
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<PodView> {
        let (_, view) = self.handle(namespace, name)?;
        Ok((*view).clone())
    }

    async fn list(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<PodView>> {
        let live = lock(&self.sh.live);
        Ok(live
            .iter()
            .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
            .map(|(_, h)| h.view.borrow().clone())
            .filter(|v| {
                let have = v.pod.metadata.labels.as_ref();
                labels
                    .iter()
                    .all(|(k, val)| have.and_then(|l| l.get(k)) == Some(val))
            })
            .map(|v| (*v).clone())
            .collect())
    }

    async fn delete(&self, req: DeleteRequest) -> Result<PodView> {
        if req.grace_period.is_some_and(|g| g < 0) {
            return Err(Error::invalid(format!(
                "pod {}/{}: grace period must not be negative",
                req.namespace, req.name
            )));
        }
        self.ask(&req.namespace, &req.name, |reply| Msg::Delete {
            grace: req.grace_period,
            force: req.force,
            reply,
        })
        .await
    }

    fn watch(&self) -> broadcast::Receiver<WatchEvent> {
        self.sh.watch.subscribe()
    }

    async fn set_condition(&self, req: SetCondition) -> Result<PodView> {
        let (ns, name) = (req.namespace.clone(), req.name.clone());
        self.ask(&ns, &name, |reply| Msg::SetCondition { req, reply })
            .await
    }
}

impl crate::cri::PodStatusSource for Supervisor {
    fn pod_status_json(&self, uid: &str) -> Option<String> {
        let view = lock(&self.sh.workers)
            .get(uid)
            .map(|(_, v)| v.borrow().clone())?;
        serde_json::to_string(&view.pod).ok()
    }
}
