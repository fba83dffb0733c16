//! A pod's dealings with the node: admission (or adoption after a restart), preempting for a critical pod, being evicted, giving its resources and cgroup back.

use std::time::{Duration, Instant};

use super::record::Failure;
use super::worker::{Msg, Worker};
use crate::pod::node::{Admission, PREEMPTED_MESSAGE, PREEMPTING};
use crate::pod::resources;

/// The longest a preempting pod waits for its victims to stop.
const PREEMPT_WAIT_MAX: Duration = Duration::from_secs(120);

impl Worker {
    /// Before anything runs: a new pod is admitted (or refused: phase Failed with the
    /// kubelet's reason); one admitted before a daemon restart counts again as it is.
    pub async fn admit(&mut self) {
        if self.rec.deletion.is_some() || self.rec.finished || self.rec.failure.is_some() {
            return;
        }
        let (uid, key) = (self.rec.uid().to_string(), self.key());
        let node = self.sh.node.clone();
        if self.rec.admitted || self.sandbox.is_some() {
            node.adopt(&uid, &key, &self.rec.pod, self.rec.is_static());
            return;
        }
        match node.admit(&uid, &key, &self.rec.pod, self.rec.is_static()) {
            Admission::Admit => {}
            Admission::Reject { reason, message } => {
                tracing::info!(pod = %key, reason = %reason, message = %message, "pod rejected");
                self.events.warning(&reason, "", message.clone());
                self.rec.failure = Some(Failure {
                    reason,
                    message: format!("Pod was rejected: {message}"),
                    disruption: false,
                    at_ns: crate::runtime::status::now_ns(),
                });
                self.rec.finished = true;
                self.save_record("record the rejection");
                return;
            }
            Admission::Preempt { victims } => {
                let names: Vec<&str> = victims.iter().map(|(_, k)| k.as_str()).collect();
                tracing::info!(pod = %key, victims = ?names, "critical pod preempts");
                for (victim, _) in &victims {
                    self.sh.tell(
                        victim,
                        Msg::Evict {
                            reason: PREEMPTING.to_string(),
                            message: PREEMPTED_MESSAGE.to_string(),
                            grace: None,
                            disruption: false,
                        },
                    );
                }
                for (victim, vkey) in &victims {
                    if !node.wait_released(victim, PREEMPT_WAIT_MAX).await {
                        tracing::warn!(pod = %key, victim = %vkey, "preempted pod still stopping; starting anyway");
                    }
                }
            }
        }
        self.rec.admitted = true;
        self.save_record("record the admission");
        node.update_burstable();
    }

    pub fn save_record(&self, what: &str) {
        if let Err(e) = self.rec.save(&self.sh.pods_dir) {
            tracing::warn!(pod = %self.key(), error = %e, "{what}");
        }
    }

    /// The node ends the pod (eviction or preemption): a Warning event, phase Failed with
    /// `reason` and `message`, its containers stopped with `grace` (`None`: the pod's own).
    pub fn evict(
        &mut self,
        reason: String,
        message: String,
        grace: Option<Duration>,
        disruption: bool,
    ) {
        if self.rec.failure.is_some() || self.termination.as_ref().is_some_and(|t| t.delete) {
            return;
        }
        tracing::info!(pod = %self.key(), reason = %reason, message = %message, "pod ended by the node");
        self.sh.node.mark_leaving(self.rec.uid());
        self.events.warning(&reason, "", message.clone());
        self.rec.failure = Some(Failure {
            reason,
            message,
            disruption,
            at_ns: crate::runtime::status::now_ns(),
        });
        self.save_record("record the eviction");
        let grace = grace.unwrap_or_else(|| self.pod_grace());
        if self.termination.is_some() || self.rec.finished {
            // Already stopping or stopped: the release comes when it is done.
            if self.rec.finished {
                self.sh.node.release(self.rec.uid());
            }
            return;
        }
        self.start_stopping(Instant::now() + grace, false);
    }

    /// The pod stopped for good: its requests and its cgroup go back to the node.
    pub fn release_node(&mut self) {
        let uid = self.rec.uid().to_string();
        if let Some(q) = &self.sh.node.qos {
            let qos = resources::qos_class(&self.rec.pod);
            if let Err(e) = q.remove_pod(&uid, qos) {
                tracing::warn!(pod = %self.key(), error = %e, "remove the pod cgroup");
            }
        }
        self.sh.node.release(&uid);
    }

    /// The pod's cgroup (made now) as its sandbox's `cgroup_parent`; empty without pod cgroups.
    pub fn pod_cgroup_parent(&self) -> crate::error::Result<String> {
        match &self.sh.node.qos {
            Some(q) => Ok(q.ensure_pod(self.rec.uid(), &self.rec.pod)?.0),
            None => Ok(String::new()),
        }
    }
}
