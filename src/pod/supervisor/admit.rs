//! A pod's dealings with the node: admission (or adoption after a restart), preempting for a critical pod, being evicted, giving its resources and cgroup back.

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::record::Failure;
use super::worker::{Msg, Worker};
use crate::pod::node::{Admission, PREEMPTED_MESSAGE, PREEMPTING};
use crate::pod::resources;

/// The longest a preempting pod waits for its victims to stop.
const PREEMPT_WAIT_MAX: Duration = Duration::from_secs(120);

type Amounts = std::collections::BTreeMap<String, Quantity>;

/// A handler's declared overhead as `spec.overhead`.
fn overhead(cpu_milli: u64, memory: u64) -> Amounts {
    Amounts::from([
        ("cpu".to_string(), Quantity(format!("{cpu_milli}m"))),
        ("memory".to_string(), Quantity(memory.to_string())),
    ])
}

/// The same cpu and memory, however written.
fn same_amounts(a: &Amounts, b: &Amounts) -> bool {
    let of = |m: &Amounts| {
        crate::pod::node::requests::container_limits(Some(&ResourceRequirements {
            limits: Some(m.clone()),
            ..Default::default()
        }))
    };
    of(a) == of(b)
}

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
        if let Err(message) = self.runtime_class_overhead() {
            return self.reject("PodOverhead".to_string(), message);
        }
        match node.admit(&uid, &key, &self.rec.pod, self.rec.is_static()) {
            Admission::Admit => {}
            Admission::Reject { reason, message } => return self.reject(reason, message),
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

    /// Refused at admission: phase Failed with the kubelet's `reason` and message.
    fn reject(&mut self, reason: String, message: String) {
        tracing::info!(pod = %self.key(), reason = %reason, message = %message, "pod rejected");
        self.events.warning(&reason, "", message.clone());
        self.rec.failure = Some(Failure {
            reason,
            message: format!("Pod was rejected: {message}"),
            disruption: false,
            at_ns: crate::runtime::status::now_ns(),
        });
        self.rec.finished = true;
        self.save_record("record the rejection");
    }

    /// What the RuntimeClass admission plugin does, the handler standing for the RuntimeClass
    /// (none exist without an API server): a pod on a handler declaring `pod_overhead` gets
    /// it as `spec.overhead`, so admission, QoS and the pod cgroup count it as the kubelet
    /// does; a pod whose own `spec.overhead` differs is refused. An unknown or unusable handler
    /// is left to the sandbox's creation (FailedCreatePodSandBox, retried, as the kubelet does).
    fn runtime_class_overhead(&mut self) -> Result<(), String> {
        let handlers = self.sh.runtime.handlers();
        let Some(spec) = self.rec.pod.spec.as_mut() else {
            return Ok(());
        };
        let Some(name) = spec.runtime_class_name.as_deref() else {
            return Ok(());
        };
        let Some((cpu, memory)) = handlers.select(name).ok().and_then(|h| h.overhead) else {
            return Ok(());
        };
        let want = overhead(cpu, memory);
        match &spec.overhead {
            None => {
                spec.overhead = Some(want);
                Ok(())
            }
            Some(have) if same_amounts(have, &want) => Ok(()),
            Some(_) => Err(format!(
                "spec.overhead differs from the pod overhead of runtime handler {name:?} \
                 (runtimeClassName): cpu {cpu}m, memory {memory}"
            )),
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handlers_overhead_matches_the_same_amounts_however_written() {
        let declared = overhead(50, 16 << 20);
        let q = |cpu: &str, mem: &str| {
            Amounts::from([
                ("cpu".to_string(), Quantity(cpu.to_string())),
                ("memory".to_string(), Quantity(mem.to_string())),
            ])
        };
        assert!(same_amounts(&declared, &q("0.05", "16Mi")));
        assert!(!same_amounts(&declared, &q("50m", "32Mi")));
        assert!(!same_amounts(&declared, &q("100m", "16Mi")));
    }
}
