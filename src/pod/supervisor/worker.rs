//! One pod's worker task: owns the pod's state, reacts to commands, exits, probes and timers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, watch};

use super::events::EventLog;
use super::record::Record;
use super::state::{containers_of, CState};
use super::terminate::Termination;
use super::Shared;
use crate::error::Result;
use crate::pod::api::{PodView, ProbeReport, SetCondition, WatchEvent, WatchKind};
use crate::pod::backoff::{Backoff, Policy};
use crate::pod::conditions::Tracked;
use crate::pod::prober::Update;
use crate::pod::volumes::PodVolumes;

/// A resync even when nothing woke the worker (a lost runtime event must not stall a pod).
const RESYNC: Duration = Duration::from_secs(5);

/// What a worker is told.
pub enum Msg {
    /// Delete with an optional grace (seconds) and force.
    Delete {
        grace: Option<i64>,
        force: bool,
        reply: oneshot::Sender<Result<Arc<PodView>>>,
    },
    SetCondition {
        req: SetCondition,
        reply: oneshot::Sender<Result<Arc<PodView>>>,
    },
    /// Something happened to one of the pod's containers or its sandbox.
    Wake,
    /// A postStart hook finished for instance `id` of container `name`.
    PostStartDone {
        name: String,
        id: String,
        result: std::result::Result<(), String>,
    },
    /// A kill the worker asked for finished.
    KillDone { name: String, id: String },
    /// A pod's termination finished (everything removed).
    Terminated,
    /// A finished pod's sidecars and sandbox are stopped.
    Finished,
    /// The node ends the pod (eviction, preemption): phase Failed with `reason`.
    Evict {
        reason: String,
        message: String,
        /// `None`: the pod's own grace.
        grace: Option<Duration>,
        /// Add the DisruptionTarget condition (eviction).
        disruption: bool,
    },
    /// An event from a task the worker started.
    Event {
        warning: bool,
        reason: String,
        object: String,
        message: String,
    },
}

/// The pod's live sandbox.
#[derive(Debug, Clone)]
pub struct Sandbox {
    pub id: String,
    pub ip: Option<String>,
    pub ready: bool,
    pub attempt: u32,
    /// The pod's own user namespace (`hostUsers: false`), kept when the sandbox is re-made.
    pub userns: Option<crate::oci::UserNamespace>,
}

/// One pod's state, owned by its task.
pub struct Worker {
    pub sh: Arc<Shared>,
    pub rec: Record,
    pub tx: mpsc::UnboundedSender<Msg>,
    pub sandbox: Option<Sandbox>,
    pub volumes: Option<PodVolumes>,
    pub cs: Vec<CState>,
    pub backoff: Backoff,
    pub events: EventLog,
    pub conditions: Vec<Tracked>,
    pub probe_reports: BTreeMap<(String, String), ProbeReport>,
    pub probe_tx: mpsc::UnboundedSender<Update>,
    /// All regular init containers completed (kept: a restarting sidecar does not undo it).
    pub initialized: bool,
    /// The next time the worker must look again (a back-off running out, a retry).
    pub wake_at: Option<Instant>,
    /// When probe results that changed nothing are next folded into the view (coalesced:
    /// rebuilding the view for every attempt of every probe costs more than the probes).
    pub quiet_due: Option<tokio::time::Instant>,
    pub termination: Option<Termination>,
    pub view_tx: watch::Sender<Arc<PodView>>,
    /// The pod left the API (force delete): no more watch events.
    pub gone: bool,
    /// Sandbox creation failures in a row (retried with back-off).
    pub sandbox_failures: u32,
}

impl Worker {
    pub fn new(
        sh: Arc<Shared>,
        rec: Record,
        tx: mpsc::UnboundedSender<Msg>,
        probe_tx: mpsc::UnboundedSender<Update>,
        view_tx: watch::Sender<Arc<PodView>>,
    ) -> Worker {
        let cs = containers_of(&rec.pod);
        let conditions = crate::pod::conditions::restore(
            rec.conditions
                .iter()
                .map(|(name, t)| (name.as_str(), t.status, t.at_s)),
        );
        let mut policy = Policy::with_max(Duration::from_secs(sh.config.pod.backoff_max_secs));
        policy.initial =
            Duration::from_secs(sh.config.pod.backoff_initial_secs.max(1)).min(policy.max);
        Worker {
            sh,
            rec,
            tx,
            sandbox: None,
            volumes: None,
            cs,
            backoff: Backoff::new(policy),
            events: EventLog::default(),
            conditions,
            probe_reports: BTreeMap::new(),
            probe_tx,
            initialized: false,
            wake_at: None,
            quiet_due: None,
            termination: None,
            view_tx,
            gone: false,
            sandbox_failures: 0,
        }
    }

    pub fn key(&self) -> String {
        self.rec.key()
    }

    /// Runs the pod until it is deleted and cleaned up.
    pub async fn run(
        mut self,
        mut rx: mpsc::UnboundedReceiver<Msg>,
        mut probe_rx: mpsc::UnboundedReceiver<Update>,
        predecessor: Option<watch::Receiver<bool>>,
    ) {
        if let Some(mut done) = predecessor {
            // At most one live instance per name: the pod it replaces must be gone first.
            let _ = done.wait_for(|d| *d).await;
        }
        self.recover();
        self.admit().await;
        if let Some(d) = self.rec.deletion {
            // A termination cut short by a daemon restart starts over with its full grace.
            self.begin_termination(Some(d.grace_secs as i64), d.force, true);
        }
        // Watchers see the pod as it is before anything starts, then every change.
        self.publish(WatchKind::Added);
        self.sync().await;
        self.publish(WatchKind::Modified);
        loop {
            let sleep_until = self
                .wake_at
                .map(tokio::time::Instant::from_std)
                .unwrap_or_else(|| tokio::time::Instant::now() + RESYNC)
                .min(tokio::time::Instant::now() + RESYNC);
            tokio::select! {
                msg = rx.recv() => {
                    let Some(msg) = msg else { break };
                    if self.handle(msg).await {
                        break;
                    }
                }
                Some(update) = probe_rx.recv() => {
                    if !self.on_probe(update) {
                        self.quiet_due.get_or_insert_with(|| {
                            tokio::time::Instant::now() + QUIET_PUBLISH_DELAY
                        });
                        continue;
                    }
                }
                _ = sleep_or_never(self.quiet_due) => {
                    self.publish_quiet();
                    continue;
                }
                _ = tokio::time::sleep_until(sleep_until) => {
                    self.wake_at = None;
                }
            }
            self.sync().await;
            self.publish(WatchKind::Modified);
        }
        self.publish(WatchKind::Deleted);
    }

    /// Handles one message; true when the worker is done.
    async fn handle(&mut self, msg: Msg) -> bool {
        match msg {
            Msg::Delete {
                grace,
                force,
                reply,
            } => {
                self.begin_termination(grace, force, false);
                let _ = reply.send(Ok(self.view()));
            }
            Msg::SetCondition { req, reply } => {
                let r = self.set_gate(req).map(|_| self.view());
                let _ = reply.send(r);
            }
            Msg::Wake => {}
            Msg::PostStartDone { name, id, result } => self.on_post_start(&name, &id, result),
            Msg::KillDone { name, id } => {
                if let Some(c) = self.cs.iter_mut().find(|c| c.name() == name) {
                    if c.killing.as_deref() == Some(id.as_str()) {
                        c.killing = None;
                    }
                }
            }
            Msg::Terminated => {
                self.release_node();
                return true;
            }
            Msg::Evict {
                reason,
                message,
                grace,
                disruption,
            } => self.evict(reason, message, grace, disruption),
            Msg::Finished => {
                self.rec.finished = true;
                self.release_node();
                if let Err(e) = self.rec.save(&self.sh.pods_dir) {
                    tracing::warn!(pod = %self.key(), error = %e, "record finished pod");
                }
                // A delete that began meanwhile keeps its own termination.
                if self.termination.as_ref().is_some_and(|t| !t.delete) {
                    self.termination = None;
                }
            }
            Msg::Event {
                warning,
                reason,
                object,
                message,
            } => {
                let kind = if warning {
                    crate::pod::api::EventType::Warning
                } else {
                    crate::pod::api::EventType::Normal
                };
                self.events.record(kind, &reason, &object, message);
            }
        }
        false
    }

    fn set_gate(&mut self, req: SetCondition) -> Result<()> {
        let status = match req.status.as_str() {
            "True" | "False" | "Unknown" => req.status.clone(),
            other => {
                return Err(crate::error::Error::invalid(format!(
                    "pod {}: condition {}: status {other:?} must be True, False or Unknown",
                    self.key(),
                    req.condition_type
                )))
            }
        };
        let now = crate::runtime::status::now_ns();
        let gate = self
            .rec
            .gates
            .entry(req.condition_type.clone())
            .or_default();
        if gate.status != status {
            gate.last_transition_ns = now;
        }
        gate.status = status;
        gate.reason = req.reason;
        gate.message = req.message;
        self.rec.save(&self.sh.pods_dir)
    }

    /// The current view, published to getters.
    pub fn view(&self) -> Arc<PodView> {
        self.view_tx.borrow().clone()
    }

    /// Rebuilds the view and tells watchers when the pod's status changed.
    fn publish(&mut self, kind: WatchKind) {
        self.quiet_due = None;
        let view = Arc::new(self.build_view());
        let changed = kind != WatchKind::Modified || self.view_tx.borrow().pod != view.pod;
        self.view_tx.send_replace(view.clone());
        if changed && !self.gone {
            let _ = self.sh.watch.send(WatchEvent { kind, view });
        }
    }

    /// Rebuilds the view (new probe results) without telling watchers.
    fn publish_quiet(&mut self) {
        self.quiet_due = None;
        let view = Arc::new(self.build_view());
        self.view_tx.send_replace(view);
    }
}

/// How long unchanged probe results may wait before the view shows them.
const QUIET_PUBLISH_DELAY: Duration = Duration::from_secs(2);

/// Sleeps until `at`, or for ever without one.
async fn sleep_or_never(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
