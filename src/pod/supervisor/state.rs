//! What the supervisor knows of each container of a pod: spec, runtime instances, probes, back-off.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Container, Pod};

use crate::pod::phase::{self, Kind};
use crate::pod::prober::Probes;
use crate::pod::translate::ContainerKind;
use crate::runtime::{ContainerEntry, ContainerState, ContainerStatus, Filter, Runtime};

use crate::pod::labels;

/// One runtime instance (CRI container) of a pod's container.
#[derive(Debug, Clone)]
pub struct Inst {
    pub id: String,
    pub attempt: u32,
    pub log_path: String,
    pub image_id: String,
    pub status: ContainerStatus,
    /// The mounts as created (recursive read-only resolved).
    pub mounts: Vec<crate::oci::MountRequest>,
}

impl Inst {
    fn of(e: &Arc<ContainerEntry>) -> Inst {
        let m = e.meta();
        Inst {
            id: e.id().to_string(),
            attempt: m.attempt,
            log_path: m.log_path.clone(),
            image_id: m.image_ref.clone(),
            status: e.status(),
            mounts: m.request.mounts.clone(),
        }
    }

    pub fn state(&self) -> ContainerState {
        self.status.state()
    }

    pub fn exited(&self) -> Option<i32> {
        (self.state() == ContainerState::Exited).then_some(self.status.exit_code)
    }

    pub fn running(&self) -> bool {
        self.state() == ContainerState::Running
    }
}

/// A postStart hook's progress for one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PostStart {
    /// No hook, or it succeeded.
    Done,
    Running,
    Failed(String),
}

/// One container of the pod.
pub struct CState {
    pub spec: Container,
    pub kind: ContainerKind,
    /// The newest instance.
    pub current: Option<Inst>,
    /// The one before it (kept for `logs --previous`, like the kubelet's last dead container).
    pub previous: Option<Inst>,
    /// Instance the probes run for.
    pub probes: Option<(String, Option<Probes>)>,
    /// postStart state of the current instance.
    pub post_start: PostStart,
    /// Startup probe passed (or none) for the current instance.
    pub started: bool,
    /// Readiness of the current instance.
    pub ready: bool,
    /// The instance whose exit was counted by the back-off, and when it may restart.
    pub backoff: Option<(String, Instant)>,
    /// Why it is waiting (CrashLoopBackOff, ErrImagePull, CreateContainerError...).
    pub waiting: Option<(String, String)>,
    /// An instance being killed by the supervisor (probe failure, postStart failure).
    pub killing: Option<String>,
    /// A regular init container finished with 0 (survives its instance being removed).
    pub completed: bool,
}

impl CState {
    pub fn new(spec: Container, kind: ContainerKind) -> CState {
        CState {
            spec,
            kind,
            current: None,
            previous: None,
            probes: None,
            post_start: PostStart::Done,
            started: false,
            ready: false,
            backoff: None,
            waiting: None,
            killing: None,
            completed: false,
        }
    }

    pub fn name(&self) -> &str {
        &self.spec.name
    }

    /// The kubelet's object path for events: `spec.containers{name}`.
    pub fn object(&self) -> String {
        match self.kind {
            ContainerKind::App => format!("spec.containers{{{}}}", self.spec.name),
            _ => format!("spec.initContainers{{{}}}", self.spec.name),
        }
    }

    pub fn restart_count(&self) -> u32 {
        self.current.as_ref().map_or(0, |i| i.attempt)
    }

    /// Running, postStart done and startup probe passed.
    pub fn is_started(&self) -> bool {
        self.current.as_ref().is_some_and(Inst::running)
            && self.post_start == PostStart::Done
            && self.started
    }

    pub fn phase_kind(&self) -> Kind {
        match self.kind {
            ContainerKind::Init => Kind::Init,
            ContainerKind::Sidecar => Kind::Sidecar,
            ContainerKind::App => Kind::App,
        }
    }

    /// The container's state for the phase and condition rules.
    pub fn phase_state(&self, will_restart: bool) -> phase::State {
        match &self.current {
            None if self.completed => phase::State::Terminated { exit_code: 0 },
            None => match &self.waiting {
                Some(_) => phase::State::Waiting { last_exit: None },
                None => phase::State::Missing,
            },
            Some(i) => match i.state() {
                ContainerState::Running if self.post_start == PostStart::Done => {
                    phase::State::Running {
                        started: self.started,
                        ready: self.ready,
                    }
                }
                ContainerState::Running | ContainerState::Created => phase::State::Waiting {
                    last_exit: self.previous.as_ref().and_then(Inst::exited),
                },
                ContainerState::Exited if will_restart => phase::State::Waiting {
                    last_exit: Some(i.status.exit_code),
                },
                ContainerState::Exited => phase::State::Terminated {
                    exit_code: i.status.exit_code,
                },
                ContainerState::Unknown => phase::State::Waiting { last_exit: None },
            },
        }
    }
}

/// The containers of `pod` in spec order: init containers (regular or sidecar), then apps.
pub fn containers_of(pod: &Pod) -> Vec<CState> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let inits = spec.init_containers.iter().flatten().map(|c| {
        let kind = if c.restart_policy.as_deref() == Some("Always") {
            ContainerKind::Sidecar
        } else {
            ContainerKind::Init
        };
        CState::new(c.clone(), kind)
    });
    let apps = spec
        .containers
        .iter()
        .map(|c| CState::new(c.clone(), ContainerKind::App));
    inits.chain(apps).collect()
}

/// The pod container name a runtime container was made for (its label).
pub fn container_name(e: &ContainerEntry) -> String {
    e.meta()
        .request
        .labels
        .get(labels::CONTAINER_NAME)
        .cloned()
        .unwrap_or_default()
}

/// Every runtime instance of the pod `uid`, newest attempt last, grouped by container name.
pub fn instances(runtime: &Runtime, uid: &str) -> Vec<(String, Vec<Inst>)> {
    let filter: Filter<ContainerState> = Filter {
        labels: super::owned_by(Some(uid)),
        ..Default::default()
    };
    let mut by_name: Vec<(String, Vec<Inst>)> = Vec::new();
    for e in runtime.list_containers(&filter) {
        let name = container_name(&e);
        let inst = Inst::of(&e);
        match by_name.iter_mut().find(|(n, _)| *n == name) {
            Some((_, v)) => v.push(inst),
            None => by_name.push((name, vec![inst])),
        }
    }
    for (_, v) in &mut by_name {
        v.sort_by_key(|i| (i.attempt, i.status.created_ns));
    }
    by_name
}
