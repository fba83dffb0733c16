//! The supervisor's service interface: what bosun's gRPC `Pods` service (and tests) call.
//!
//! `pod::supervisor::Supervisor` implements [`PodService`]; `api/pods.rs` translates it to and
//! from `bosun.v1.Pods` and nothing else. Pods are Kubernetes `Pod` objects (k8s-openapi) with
//! their `status` filled in the way the kubelet fills it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::broadcast;

use crate::error::Result;

/// `bosun pod apply`: one manifest text (YAML or JSON, several documents allowed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyRequest {
    /// The manifest text.
    pub text: String,
    /// Where it came from, for messages and `kubernetes.io/config.source` (a file name, `-`).
    pub source: String,
}

/// What apply did to one pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApplyAction {
    /// No live pod had this namespace/name: a new one (new uid) was created.
    Created,
    /// A live pod with a different spec was terminated (full grace) and a new one (new uid)
    /// created in its place.
    Replaced,
    /// A live pod had the same spec: nothing changed.
    Unchanged,
}

impl ApplyAction {
    /// kubectl's word: `created`, `configured`, `unchanged`.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyAction::Created => "created",
            ApplyAction::Replaced => "configured",
            ApplyAction::Unchanged => "unchanged",
        }
    }
}

/// One pod's apply result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub action: ApplyAction,
}

/// The whole apply: every pod of the text, and the warnings (scheduling fields) once each.
/// An invalid text is an `InvalidArgument` error listing every field error; nothing is applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApplyOutcome {
    pub pods: Vec<Applied>,
    pub warnings: Vec<String>,
}

/// Normal or Warning, as Kubernetes events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One pod event, aggregated like the kubelet's recorder: the same type, reason, object and
/// message bump `count` and `last_ns` instead of adding a line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    pub kind: EventType,
    /// `Scheduled`, `Pulled`, `Created`, `Started`, `Killing`, `Unhealthy`, `BackOff`,
    /// `FailedPostStartHook`, `FailedPreStopHook`, `Failed`, ...
    pub reason: String,
    /// The field the event is about, kubelet style: `spec.containers{web}`, or empty for the pod.
    pub object: String,
    pub message: String,
    pub count: u32,
    pub first_ns: i64,
    pub last_ns: i64,
}

/// One admitted pod's requests and limits, for `bosun node describe`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePod {
    pub namespace: String,
    pub name: String,
    pub qos_class: String,
    pub priority: i32,
    pub cpu_requests_milli: i64,
    pub cpu_limits_milli: i64,
    pub memory_requests: i64,
    pub memory_limits: i64,
}

/// The node as the supervisor sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeView {
    /// Name, capacity, allocatable and conditions (Ready and the three pressures).
    pub node: k8s_openapi::api::core::v1::Node,
    /// Node events, oldest first.
    pub events: Vec<PodEvent>,
    /// The pods the node counts, sorted by namespace and name.
    pub pods: Vec<NodePod>,
}

/// The last result of one probe of one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeReport {
    pub container: String,
    /// `startup`, `liveness`, `readiness`.
    pub probe: String,
    /// `Success`, `Failure`, `Unknown` (the thresholded result).
    pub result: String,
    /// The last attempt's output or error (empty on success).
    pub message: String,
    /// When the last attempt finished (0: never ran).
    pub at_ns: i64,
}

impl ProbeReport {
    pub fn new(
        container: &str,
        kind: crate::pod::probe_result::ProbeKind,
        result: crate::pod::probe_result::Result,
        message: String,
        at_ns: i64,
    ) -> ProbeReport {
        ProbeReport {
            container: container.to_string(),
            probe: kind.as_str().to_string(),
            result: result.as_str().to_string(),
            message,
            at_ns,
        }
    }
}

/// Where a container's CRI log files are (for `bosun pod logs [--previous]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogRef {
    pub container: String,
    /// The current (newest) instance's log file, if the container was ever created.
    pub current: Option<String>,
    /// The instance before it (the kubelet keeps one dead container), if any.
    pub previous: Option<String>,
    /// The current instance's CRI container id.
    pub container_id: Option<String>,
}

/// Everything bosun knows of one pod.
#[derive(Debug, Clone)]
pub struct PodView {
    /// The pod as applied (uid, creationTimestamp, deletionTimestamp and
    /// deletionGracePeriodSeconds set by bosun) with `status` filled.
    pub pod: Pod,
    /// Events, oldest first.
    pub events: Vec<PodEvent>,
    /// Last probe results.
    pub probes: Vec<ProbeReport>,
    /// `kubernetes.io/config.source`: `api` (bosun pod apply) or `file` (static pod dir).
    pub source: String,
    /// The current CRI sandbox id (empty before it exists).
    pub sandbox_id: String,
    /// Log files by container name, in spec order (init containers first).
    pub logs: Vec<LogRef>,
    /// `hostUsers: false`: the pod's uid ranges as `inside host length` (gids alike); empty
    /// with the host's users.
    pub user_namespace: String,
}

/// `bosun pod delete`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeleteRequest {
    pub namespace: String,
    pub name: String,
    /// Seconds; `None`: the pod's terminationGracePeriodSeconds. A later delete may only shorten.
    pub grace_period: Option<i64>,
    /// With grace 0: remove the pod from the API at once (containers still get the minimum
    /// grace, as `kubectl delete --grace-period=0 --force`).
    pub force: bool,
}

/// What a watcher sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchKind {
    Added,
    Modified,
    Deleted,
}

/// One change of one pod.
#[derive(Debug, Clone)]
pub struct WatchEvent {
    pub kind: WatchKind,
    pub view: Arc<PodView>,
}

/// `bosun pod condition set`: a readiness gate's condition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetCondition {
    pub namespace: String,
    pub name: String,
    /// The condition type (a readinessGates conditionType, e.g. `example.com/feature-1`).
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// The standalone pod supervisor as its API sees it. Errors name the pod
/// (`pod default/web: not found`).
#[async_trait::async_trait]
pub trait PodService: Send + Sync + 'static {
    /// Validates the whole text, then creates/replaces/keeps each pod.
    async fn apply(&self, req: ApplyRequest) -> Result<ApplyOutcome>;
    /// One pod (NotFound when no live pod has that name).
    async fn get(&self, namespace: &str, name: &str) -> Result<PodView>;
    /// Every live pod, in one namespace or (`None`) all, sorted by namespace and name, filtered
    /// by a label selector of `key=value` pairs (all must match).
    async fn list(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<PodView>>;
    /// Starts (or shortens) termination and returns; the pod disappears when it is done (or
    /// at once with `force` and grace 0). NotFound for an unknown pod.
    async fn delete(&self, req: DeleteRequest) -> Result<PodView>;
    /// Every change of every pod from now on (a lagging watcher is told what it lost).
    fn watch(&self) -> broadcast::Receiver<WatchEvent>;
    /// Sets a condition of the pod's status (readiness gates).
    async fn set_condition(&self, req: SetCondition) -> Result<PodView>;
    /// The node: capacity, allocatable, conditions, admitted pods, node events.
    async fn node(&self) -> Result<NodeView>;
}
