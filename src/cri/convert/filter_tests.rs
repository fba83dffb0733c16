//! Tests of the list filters: id prefix, states, sandbox id, label selector.

use std::collections::HashMap;

use super::assert_invalid;
use super::filter::*;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{ContainerState, SandboxState};

#[test]
fn absent_or_empty_filters_match_everything() {
    for f in [None, Some(pb::PodSandboxFilter::default())] {
        let f = sandbox_filter(f).expect("valid");
        assert!(f.id_prefix.is_none() && f.states.is_empty() && f.labels.is_empty());
        assert!(f.pod_id.is_none());
    }
    for f in [None, Some(pb::ContainerFilter::default())] {
        let f = container_filter(f).expect("valid");
        assert!(f.id_prefix.is_none() && f.states.is_empty() && f.labels.is_empty());
        assert!(f.pod_id.is_none());
    }
}

#[test]
fn sandbox_states_cover_every_domain_state() {
    let table = [
        (pb::PodSandboxState::SandboxReady, vec![SandboxState::Ready]),
        (
            pb::PodSandboxState::SandboxNotready,
            vec![
                SandboxState::Created,
                SandboxState::NotReady,
                SandboxState::Unknown,
            ],
        ),
    ];
    for (wire, want) in table {
        let f = sandbox_filter(Some(pb::PodSandboxFilter {
            id: "ab".into(),
            state: Some(pb::PodSandboxStateValue { state: wire as i32 }),
            label_selector: HashMap::from([("app".into(), "web".into())]),
        }))
        .expect("valid");
        assert_eq!(f.states, want, "{wire:?}");
        assert_eq!(f.id_prefix.as_deref(), Some("ab"));
        assert_eq!(f.labels.get("app").map(String::as_str), Some("web"));
    }
    assert_invalid(
        sandbox_filter(Some(pb::PodSandboxFilter {
            state: Some(pb::PodSandboxStateValue { state: 2 }),
            ..Default::default()
        })),
        &["pod sandbox filter: state", "2"],
    );
}

#[test]
fn container_states_and_sandbox_id() {
    let table = [
        (
            pb::ContainerState::ContainerCreated,
            ContainerState::Created,
        ),
        (
            pb::ContainerState::ContainerRunning,
            ContainerState::Running,
        ),
        (pb::ContainerState::ContainerExited, ContainerState::Exited),
        (
            pb::ContainerState::ContainerUnknown,
            ContainerState::Unknown,
        ),
    ];
    for (wire, want) in table {
        let f = container_filter(Some(pb::ContainerFilter {
            id: "c0".into(),
            state: Some(pb::ContainerStateValue { state: wire as i32 }),
            pod_sandbox_id: "s1".into(),
            label_selector: HashMap::from([("k".into(), "v".into())]),
        }))
        .expect("valid");
        assert_eq!(f.states, vec![want], "{wire:?}");
        assert_eq!(f.id_prefix.as_deref(), Some("c0"));
        assert_eq!(f.pod_id.as_deref(), Some("s1"));
        assert_eq!(f.labels.get("k").map(String::as_str), Some("v"));
    }
    assert_invalid(
        container_filter(Some(pb::ContainerFilter {
            state: Some(pb::ContainerStateValue { state: 4 }),
            ..Default::default()
        })),
        &["container filter: state", "4"],
    );
}
