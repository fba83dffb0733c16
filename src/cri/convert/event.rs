//! Runtime lifecycle events as CRI ContainerEventResponses.

use super::status as st;
use crate::proto::runtime::v1 as pb;
use crate::runtime::events::{ContainerEvent, EventKind};

/// The CRI event type of `kind`.
pub fn event_type(kind: EventKind) -> pb::ContainerEventType {
    match kind {
        EventKind::Created => pb::ContainerEventType::ContainerCreatedEvent,
        EventKind::Started => pb::ContainerEventType::ContainerStartedEvent,
        EventKind::Stopped => pb::ContainerEventType::ContainerStoppedEvent,
        EventKind::Deleted => pb::ContainerEventType::ContainerDeletedEvent,
    }
}

/// `ev` with the pod sandbox status and the statuses of the pod's containers.
pub fn container_event(ev: &ContainerEvent) -> pb::ContainerEventResponse {
    pb::ContainerEventResponse {
        container_id: ev.container_id.clone(),
        container_event_type: event_type(ev.kind) as i32,
        created_at: ev.at_ns,
        pod_sandbox_status: ev
            .sandbox
            .as_ref()
            .map(|(e, s)| st::sandbox_status(e.id(), e.meta(), s)),
        containers_statuses: ev
            .containers
            .iter()
            .map(|(e, s)| st::container_status(e.id(), e.meta(), s))
            .collect(),
    }
}

/// A subscriber's events as a CRI response stream. A subscriber that fell behind by more
/// than the runtime's backlog skips what it lost (logged), as containerd drops events; it
/// never slows the runtime down. The stream ends when the client goes away.
pub fn stream(
    rx: tokio::sync::broadcast::Receiver<std::sync::Arc<ContainerEvent>>,
) -> impl futures::Stream<Item = Result<pb::ContainerEventResponse, tonic::Status>> + Send {
    use tokio::sync::broadcast::error::RecvError;
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(ev) => return Some((Ok(container_event(&ev)), rx)),
                Err(RecvError::Lagged(n)) => {
                    tracing::warn!(
                        lost = n,
                        "GetContainerEvents: a slow subscriber lost events"
                    );
                }
                Err(RecvError::Closed) => return None,
            }
        }
    })
}
