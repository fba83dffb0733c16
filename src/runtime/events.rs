//! Container lifecycle events (GetContainerEvents): a broadcast that never blocks the runtime.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::state::meta::{ContainerEntry, SandboxEntry};
use super::state::status::{now_ns, ContainerStatus, SandboxStatus};
use super::state::table::Filter;
use super::Runtime;

/// Events kept for a subscriber that has not read them yet; beyond this the slowest
/// subscriber loses the oldest ones (and is told how many), the runtime never waits.
const BACKLOG: usize = 1024;

/// What happened to a container (or to a sandbox: its events carry the sandbox id as the
/// container id, as containerd does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
    Created,
    Started,
    Stopped,
    Deleted,
}

/// One event with the pod's state at the moment it happened.
#[derive(Debug)]
pub struct ContainerEvent {
    pub container_id: String,
    pub kind: EventKind,
    pub at_ns: i64,
    /// The pod sandbox and its status; `None` once the sandbox is removed.
    pub sandbox: Option<(Arc<SandboxEntry>, SandboxStatus)>,
    /// Every container of the pod that still exists, with its status.
    pub containers: Vec<(Arc<ContainerEntry>, ContainerStatus)>,
}

/// The runtime's event fan-out.
#[derive(Debug)]
pub struct Events {
    tx: broadcast::Sender<Arc<ContainerEvent>>,
}

impl Default for Events {
    fn default() -> Self {
        Events {
            tx: broadcast::channel(BACKLOG).0,
        }
    }
}

impl Runtime {
    /// A new subscriber: sees every event from now on (a lagging one is told what it lost).
    pub fn subscribe_events(&self) -> broadcast::Receiver<Arc<ContainerEvent>> {
        self.events.tx.subscribe()
    }

    /// Publishes `kind` for `container_id` of sandbox `sandbox_id`, with the pod's current
    /// state. Costs nothing when nobody listens.
    pub(super) fn emit(&self, kind: EventKind, container_id: &str, sandbox_id: &str) {
        if self.events.tx.receiver_count() == 0 {
            return;
        }
        let sandbox = self.state.sandboxes.get(sandbox_id).ok().map(|e| {
            let s = e.status();
            (e, s)
        });
        let filter = Filter {
            pod_id: Some(sandbox_id.to_string()),
            ..Filter::default()
        };
        let containers = self
            .state
            .containers
            .list(&filter)
            .into_iter()
            .map(|e| {
                let s = e.status();
                (e, s)
            })
            .collect();
        // An error only means every subscriber left meanwhile.
        let _ = self.events.tx.send(Arc::new(ContainerEvent {
            container_id: container_id.to_string(),
            kind,
            at_ns: now_ns(),
            sandbox,
            containers,
        }));
    }
}
