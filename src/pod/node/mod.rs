//! Node resources for supervised pods (issue 14): capacity and allocatable, admission and critical preemption, priority, pod cgroups, node-pressure eviction.
//!
//! Only pods the standalone supervisor runs are counted, admitted, placed in the `kubepods`
//! hierarchy and evicted; CRI pods of a kubelet are never touched.

pub mod admission;
pub mod capacity;
pub mod eviction;
pub mod priority;
pub mod qos;
pub mod rank;
pub mod requests;
pub mod signals;
pub mod thresholds;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use self::admission::{Admitted, Insufficient};
use self::capacity::Allocation;
use self::eviction::{Decision, Observations, Tracker};
use self::qos::QosCgroups;
use self::signals::Source;
use self::thresholds::Condition;
use crate::config::eviction::Threshold;
use crate::config::Config;
use crate::pod::resources::{self, QosClass};

/// The kubelet's reason for pods refused or removed under pressure.
pub const EVICTED: &str = "Evicted";
/// The kubelet's reason (and event) for pods preempted by a critical pod.
pub const PREEMPTING: &str = "Preempting";
/// The kubelet's message for them.
pub const PREEMPTED_MESSAGE: &str = "Preempted in order to admit critical pod";
/// How long eviction waits for an evicted pod to be gone before looking again.
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);

/// The node's settings: `[node]` as checked at load, and the machine's capacity.
#[derive(Debug, Clone)]
pub struct Settings {
    pub thresholds: Vec<Threshold>,
    pub allocation: Allocation,
    pub housekeeping: Duration,
    pub transition: Duration,
    /// evictionMaxPodGracePeriod; `None`: the pod's own.
    pub max_pod_grace: Option<Duration>,
}

/// The settings of `[node]` (checked when the config was loaded) on this machine.
pub fn settings(config: &Config) -> Settings {
    let cfg = &config.node;
    let capacity = capacity::machine(&config.root, cfg.max_pods);
    Settings {
        thresholds: cfg.eviction.clone(),
        allocation: capacity::allocation(capacity, cfg),
        housekeeping: cfg.housekeeping_interval,
        transition: cfg.eviction_pressure_transition_period,
        max_pod_grace: cfg.eviction_max_pod_grace_period,
    }
}

/// What admission decided for a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// It runs.
    Admit,
    /// It does not: phase Failed with this reason and message.
    Reject { reason: String, message: String },
    /// It runs once these pods (uid, `namespace/name`) are gone (a critical pod preempting).
    Preempt { victims: Vec<(String, String)> },
}

/// A pressure condition's state for `node describe`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConditionState {
    pub status: bool,
    /// When it last changed (unix ns).
    pub since_ns: i64,
}

/// A node event (the kubelet records these on the Node object).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEvent {
    pub warning: bool,
    pub reason: String,
    pub message: String,
    pub at_ns: i64,
}

/// Node state shared by the supervisor's workers and its eviction loop.
pub struct Node {
    pub settings: Settings,
    pub qos: Option<QosCgroups>,
    source: Box<dyn Source>,
    admitted: Mutex<BTreeMap<String, Admitted>>,
    /// Pods being evicted or preempted: not candidates again, still counted until released.
    leaving: Mutex<BTreeSet<String>>,
    tracker: Mutex<Tracker>,
    conditions: Mutex<BTreeMap<Condition, ConditionState>>,
    last: Mutex<Observations>,
    events: Mutex<Vec<NodeEvent>>,
    released: tokio::sync::Notify,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Whether the pod tolerates the memory-pressure taint (BestEffort pods are admitted under
/// memory pressure then).
fn tolerates_memory_pressure(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .any(|t| {
            let key_ok = match t.key.as_deref() {
                None | Some("") => t.operator.as_deref() == Some("Exists"),
                Some(k) => k == "node.kubernetes.io/memory-pressure",
            };
            let effect_ok = matches!(t.effect.as_deref(), None | Some("") | Some("NoSchedule"));
            let value_ok = t.operator.as_deref() == Some("Exists")
                || t.value.as_deref().unwrap_or_default().is_empty();
            key_ok && effect_ok && value_ok
        })
}

impl Node {
    /// The node with `settings`, reading signals from `source`, with pod cgroups when `qos`.
    pub fn new(settings: Settings, qos: Option<QosCgroups>, source: Box<dyn Source>) -> Node {
        let tracker = Tracker::new(settings.thresholds.clone(), settings.transition);
        let now = crate::runtime::status::now_ns();
        let conditions = Condition::ALL
            .into_iter()
            .map(|c| {
                (
                    c,
                    ConditionState {
                        status: false,
                        since_ns: now,
                    },
                )
            })
            .collect();
        Node {
            settings,
            qos,
            source,
            admitted: Mutex::new(BTreeMap::new()),
            leaving: Mutex::new(BTreeSet::new()),
            tracker: Mutex::new(tracker),
            conditions: Mutex::new(conditions),
            last: Mutex::new(Observations::new()),
            events: Mutex::new(Vec::new()),
            released: tokio::sync::Notify::new(),
        }
    }

    fn entry(uid: &str, key: &str, pod: &Pod, is_static: bool) -> Admitted {
        Admitted {
            uid: uid.to_string(),
            key: key.to_string(),
            requests: requests::pod_requests(pod),
            qos: resources::qos_class(pod),
            priority: priority::of(pod),
            critical: priority::is_critical(pod, is_static),
        }
    }

    /// Admits a pod as the kubelet does: refused under pressure unless critical (BestEffort
    /// only under memory pressure alone), else it must fit what is left of allocatable; a
    /// critical pod that may preempt and does not fit takes the room of others.
    pub fn admit(&self, uid: &str, key: &str, pod: &Pod, is_static: bool) -> Admission {
        let new = Self::entry(uid, key, pod, is_static);
        let conds: Vec<Condition> = lock(&self.conditions)
            .iter()
            .filter(|(_, s)| s.status)
            .map(|(c, _)| *c)
            .collect();
        if !conds.is_empty() && !new.critical {
            let memory_only = conds == [Condition::MemoryPressure];
            let refused = !memory_only
                || (new.qos == QosClass::BestEffort && !tolerates_memory_pressure(pod));
            if refused {
                let names: Vec<&str> = conds.iter().map(|c| c.as_str()).collect();
                return Admission::Reject {
                    reason: EVICTED.to_string(),
                    message: format!("The node had condition: [{}]. ", names.join(" ")),
                };
            }
        }
        let mut admitted = lock(&self.admitted);
        admitted.remove(uid);
        let others: Vec<Admitted> = admitted.values().cloned().collect();
        let missing = admission::fit(
            &new.requests,
            &others,
            &self.settings.allocation.allocatable,
        );
        if missing.is_empty() {
            admitted.insert(uid.to_string(), new);
            return Admission::Admit;
        }
        let reject = |m: &Insufficient| Admission::Reject {
            reason: m.reason(),
            message: m.message(),
        };
        if !new.critical || !priority::may_preempt(pod) {
            return reject(&missing[0]);
        }
        let leaving = lock(&self.leaving);
        let candidates: Vec<&Admitted> = others
            .iter()
            .filter(|o| !leaving.contains(&o.uid))
            .filter(|o| !o.critical || o.priority < new.priority)
            .collect();
        // Room already being freed by pods on their way out counts as free.
        let freeing: Vec<Admitted> = others
            .iter()
            .filter(|o| !leaving.contains(&o.uid))
            .cloned()
            .collect();
        let still = admission::fit(
            &new.requests,
            &freeing,
            &self.settings.allocation.allocatable,
        );
        if still.is_empty() {
            drop(leaving);
            admitted.insert(uid.to_string(), new);
            return Admission::Admit;
        }
        match admission::victims(&still, &candidates) {
            Some(v) => {
                let victims: Vec<(String, String)> =
                    v.iter().map(|p| (p.uid.clone(), p.key.clone())).collect();
                drop(leaving);
                let mut leaving = lock(&self.leaving);
                leaving.extend(victims.iter().map(|(u, _)| u.clone()));
                admitted.insert(uid.to_string(), new);
                Admission::Preempt { victims }
            }
            None => reject(&missing[0]),
        }
    }

    /// Counts a pod that was running before the daemon restarted (no admission again).
    pub fn adopt(&self, uid: &str, key: &str, pod: &Pod, is_static: bool) {
        lock(&self.admitted).insert(uid.to_string(), Self::entry(uid, key, pod, is_static));
    }

    /// The pod stopped (finished, evicted, deleted): its requests are free again.
    pub fn release(&self, uid: &str) {
        let was = lock(&self.admitted).remove(uid);
        lock(&self.leaving).remove(uid);
        if was.is_some_and(|a| a.qos == QosClass::Burstable) {
            self.update_burstable();
        }
        self.released.notify_waiters();
    }

    /// Marks a pod as on its way out (not chosen again).
    pub fn mark_leaving(&self, uid: &str) {
        lock(&self.leaving).insert(uid.to_string());
    }

    /// Whether the pod still counts.
    pub fn is_admitted(&self, uid: &str) -> bool {
        lock(&self.admitted).contains_key(uid)
    }

    /// Waits until `uid` is released or `timeout` passes.
    pub async fn wait_released(&self, uid: &str, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let notified = self.released.notified();
            if !self.is_admitted(uid) {
                return true;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return !self.is_admitted(uid);
            }
        }
    }

    /// Admitted pods that are not leaving.
    pub fn active(&self) -> Vec<Admitted> {
        let leaving = lock(&self.leaving);
        lock(&self.admitted)
            .values()
            .filter(|a| !leaving.contains(&a.uid))
            .cloned()
            .collect()
    }

    /// Every admitted pod.
    pub fn admitted(&self) -> Vec<Admitted> {
        lock(&self.admitted).values().cloned().collect()
    }

    /// Sets the burstable cgroup's shares from the admitted burstable pods' cpu requests.
    pub fn update_burstable(&self) {
        let Some(q) = &self.qos else { return };
        let total: i64 = lock(&self.admitted)
            .values()
            .filter(|a| a.qos == QosClass::Burstable)
            .map(|a| a.requests.cpu_milli)
            .sum();
        if let Err(e) = q.set_burstable(total) {
            tracing::warn!(error = %e, "set the burstable cgroup's shares");
        }
    }

    /// Reads every signal now.
    pub fn observe(&self) -> Observations {
        self.source.observe()
    }

    /// One eviction pass over `obs`: thresholds, conditions (with node events on changes).
    pub fn track(&self, obs: &Observations) -> Decision {
        let now = Instant::now();
        let mut tracker = lock(&self.tracker);
        let d = tracker.observe(obs, now);
        let reported = tracker.conditions(now);
        drop(tracker);
        *lock(&self.last) = obs.clone();
        let ns = crate::runtime::status::now_ns();
        let mut conds = lock(&self.conditions);
        for c in Condition::ALL {
            let on = reported.contains(&c);
            let st = conds.entry(c).or_insert(ConditionState {
                status: false,
                since_ns: ns,
            });
            if st.status != on {
                st.status = on;
                st.since_ns = ns;
                let (reason, msg) = condition_words(c, on);
                // The kubelet records these as Normal events.
                self.event(false, reason, msg.to_string());
            }
        }
        d
    }

    /// The latest readings.
    pub fn last_observations(&self) -> Observations {
        lock(&self.last).clone()
    }

    /// The pressure conditions now.
    pub fn conditions(&self) -> BTreeMap<Condition, ConditionState> {
        lock(&self.conditions).clone()
    }

    /// Thresholds met by `obs` counting their minimum reclaim (after a reclaim: is more needed?).
    pub fn still_met(&self, obs: &Observations) -> Vec<Threshold> {
        Tracker::met_by(&self.settings.thresholds, obs, true)
    }

    /// Records a node event (the newest 100 are kept).
    pub fn event(&self, warning: bool, reason: &str, message: String) {
        let mut ev = lock(&self.events);
        if ev.len() >= 100 {
            ev.remove(0);
        }
        ev.push(NodeEvent {
            warning,
            reason: reason.to_string(),
            message,
            at_ns: crate::runtime::status::now_ns(),
        });
    }

    /// The node's events, oldest first.
    pub fn events(&self) -> Vec<NodeEvent> {
        lock(&self.events).clone()
    }

    /// The grace an evicted pod gets: 1 s for a hard threshold (the kubelet's
    /// immediateEvictionGracePeriodSeconds), for a soft one its own capped at
    /// evictionMaxPodGracePeriod (0: its own).
    pub fn eviction_grace(&self, t: &Threshold, pod_grace: Duration) -> Duration {
        if t.is_hard() {
            return Duration::from_secs(1);
        }
        match self.settings.max_pod_grace {
            None => pod_grace,
            Some(max) => pod_grace.min(max),
        }
    }
}

/// The kubelet's node condition reasons and messages.
fn condition_words(c: Condition, on: bool) -> (&'static str, &'static str) {
    match (c, on) {
        (Condition::MemoryPressure, true) => (
            "NodeHasInsufficientMemory",
            "kubelet has insufficient memory available",
        ),
        (Condition::MemoryPressure, false) => (
            "NodeHasSufficientMemory",
            "kubelet has sufficient memory available",
        ),
        (Condition::DiskPressure, true) => ("NodeHasDiskPressure", "kubelet has disk pressure"),
        (Condition::DiskPressure, false) => {
            ("NodeHasNoDiskPressure", "kubelet has no disk pressure")
        }
        (Condition::PIDPressure, true) => (
            "NodeHasInsufficientPID",
            "kubelet has insufficient PID available",
        ),
        (Condition::PIDPressure, false) => (
            "NodeHasSufficientPID",
            "kubelet has sufficient PID available",
        ),
    }
}

/// The reason and message of a pressure condition in its current state.
pub fn condition_reason(c: Condition, on: bool) -> (&'static str, &'static str) {
    condition_words(c, on)
}

/// The pods a disk-pressure pass or `node describe` sees: the admitted pod with its spec.
pub type PodRef = (Admitted, Arc<Pod>);
