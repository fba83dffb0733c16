//! ListPodSandbox / ListContainers filters → `runtime::Filter`.

use super::bad_enum;
use crate::error::Result;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{ContainerState, Filter, SandboxState};

fn nonempty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The domain states a CRI sandbox state stands for: READY is Ready; NOTREADY is every other.
pub fn sandbox_states(state: pb::PodSandboxState) -> Vec<SandboxState> {
    match state {
        pb::PodSandboxState::SandboxReady => vec![SandboxState::Ready],
        pb::PodSandboxState::SandboxNotready => vec![
            SandboxState::Created,
            SandboxState::NotReady,
            SandboxState::Unknown,
        ],
    }
}

/// The domain state of a CRI container state.
pub fn container_state(state: pb::ContainerState) -> ContainerState {
    match state {
        pb::ContainerState::ContainerCreated => ContainerState::Created,
        pb::ContainerState::ContainerRunning => ContainerState::Running,
        pb::ContainerState::ContainerExited => ContainerState::Exited,
        pb::ContainerState::ContainerUnknown => ContainerState::Unknown,
    }
}

/// A PodSandboxFilter (absent: everything): id prefix, state, label selector.
pub fn sandbox_filter(f: Option<pb::PodSandboxFilter>) -> Result<Filter<SandboxState>> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
    let states = match f.state {
        None => Vec::new(),
        Some(v) => sandbox_states(
            pb::PodSandboxState::try_from(v.state)
                .map_err(|_| bad_enum("pod sandbox filter: state", v.state))?,
        ),
    };
    Ok(Filter {
        id_prefix: nonempty(f.id),
        states,
        labels: f.label_selector,
        pod_id: None,
    })
}

/// A ContainerFilter (absent: everything): id prefix, state, sandbox id, label selector.
pub fn container_filter(f: Option<pb::ContainerFilter>) -> Result<Filter<ContainerState>> {
    let Some(f) = f else {
        return Ok(Filter::default());
    };
    let states = match f.state {
        None => Vec::new(),
        Some(v) => vec![container_state(
            pb::ContainerState::try_from(v.state)
                .map_err(|_| bad_enum("container filter: state", v.state))?,
        )],
    };
    Ok(Filter {
        id_prefix: nonempty(f.id),
        states,
        labels: f.label_selector,
        pod_id: nonempty(f.pod_sandbox_id),
    })
}
