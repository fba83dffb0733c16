//! Pod conditions the kubelet owns: PodReadyToStartContainers, Initialized, ContainersReady, Ready.

use super::phase::{any_app_started, Container, Kind, Phase, State};

/// A condition's type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    PodReadyToStartContainers,
    Initialized,
    ContainersReady,
    Ready,
    /// A readinessGates condition, set by the user.
    Gate(String),
}

impl Type {
    pub fn as_str(&self) -> &str {
        match self {
            Type::PodReadyToStartContainers => "PodReadyToStartContainers",
            Type::Initialized => "Initialized",
            Type::ContainersReady => "ContainersReady",
            Type::Ready => "Ready",
            Type::Gate(name) => name,
        }
    }
}

/// A condition as computed now (the transition time is kept by [`Tracked`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: Type,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Condition {
    fn yes(kind: Type) -> Self {
        Condition {
            kind,
            status: true,
            reason: String::new(),
            message: String::new(),
        }
    }
    fn no(kind: Type, reason: &str, message: String) -> Self {
        Condition {
            kind,
            status: false,
            reason: reason.to_string(),
            message,
        }
    }
}

/// A condition with the time (unix seconds) its status last changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    pub condition: Condition,
    pub last_transition: i64,
}

/// The pod facts the conditions depend on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodFacts {
    /// The sandbox is ready and its network is set up.
    pub sandbox_ready: bool,
    pub phase: Phase,
}

/// The four kubelet-owned conditions, in the kubelet's order. `gates`: the pod's
/// readinessGates with the status of their condition (`None`: not set).
pub fn conditions(
    pod: PodFacts,
    containers: &[Container],
    gates: &[(String, Option<bool>)],
) -> Vec<Condition> {
    let ready_to_start = if pod.sandbox_ready {
        Condition::yes(Type::PodReadyToStartContainers)
    } else {
        Condition::no(Type::PodReadyToStartContainers, "", String::new())
    };
    let containers_ready = containers_ready(pod.phase, containers);
    vec![
        ready_to_start,
        initialized(pod.phase, containers),
        ready(&containers_ready, gates),
        containers_ready,
    ]
}

fn names(cs: &[&Container]) -> String {
    let n: Vec<_> = cs.iter().map(|c| c.name.as_str()).collect();
    format!("[{}]", n.join(" "))
}

/// Initialized: every init container exited 0 and every sidecar started (or an app container
/// has already run: restarting sidecars do not undo it).
fn initialized(phase: Phase, containers: &[Container]) -> Condition {
    let inits: Vec<_> = containers.iter().filter(|c| c.kind != Kind::App).collect();
    let unknown: Vec<_> = inits
        .iter()
        .copied()
        .filter(|c| c.state == State::Missing)
        .collect();
    let incomplete: Vec<_> = inits
        .iter()
        .copied()
        .filter(|c| c.state != State::Missing)
        .filter(|c| match (c.kind, c.state) {
            (Kind::Sidecar, State::Running { started, .. }) => !started,
            (Kind::Sidecar, _) => true,
            (_, State::Terminated { exit_code }) => exit_code != 0,
            _ => true,
        })
        .collect();
    if phase == Phase::Succeeded && unknown.is_empty() {
        return Condition {
            reason: "PodCompleted".into(),
            ..Condition::yes(Type::Initialized)
        };
    }
    if any_app_started(containers) {
        return Condition::yes(Type::Initialized);
    }
    let mut why = Vec::new();
    if !unknown.is_empty() {
        why.push(format!(
            "containers with unknown status: {}",
            names(&unknown)
        ));
    }
    if !incomplete.is_empty() {
        why.push(format!(
            "containers with incomplete status: {}",
            names(&incomplete)
        ));
    }
    if why.is_empty() {
        Condition::yes(Type::Initialized)
    } else {
        Condition::no(
            Type::Initialized,
            "ContainersNotInitialized",
            why.join(", "),
        )
    }
}

/// ContainersReady: every app container and sidecar is ready.
fn containers_ready(phase: Phase, containers: &[Container]) -> Condition {
    let relevant: Vec<_> = containers.iter().filter(|c| c.kind != Kind::Init).collect();
    let unknown: Vec<_> = relevant
        .iter()
        .copied()
        .filter(|c| c.state == State::Missing)
        .collect();
    let unready: Vec<_> = relevant
        .iter()
        .copied()
        .filter(|c| c.state != State::Missing)
        .filter(|c| !matches!(c.state, State::Running { ready: true, .. }))
        .collect();
    if phase == Phase::Succeeded && unknown.is_empty() {
        return Condition::no(Type::ContainersReady, "PodCompleted", String::new());
    }
    if phase == Phase::Failed {
        return Condition::no(Type::ContainersReady, "PodFailed", String::new());
    }
    let mut why = Vec::new();
    if !unknown.is_empty() {
        why.push(format!(
            "containers with unknown status: {}",
            names(&unknown)
        ));
    }
    if !unready.is_empty() {
        why.push(format!(
            "containers with unready status: {}",
            names(&unready)
        ));
    }
    if why.is_empty() {
        Condition::yes(Type::ContainersReady)
    } else {
        Condition::no(Type::ContainersReady, "ContainersNotReady", why.join(", "))
    }
}

/// Ready: ContainersReady and every readiness gate's condition True.
fn ready(containers_ready: &Condition, gates: &[(String, Option<bool>)]) -> Condition {
    if !containers_ready.status {
        return Condition {
            kind: Type::Ready,
            ..containers_ready.clone()
        };
    }
    let why: Vec<_> = gates
        .iter()
        .filter_map(|(name, status)| match status {
            None => Some(format!(
                "corresponding condition of pod readiness gate \"{name}\" does not exist."
            )),
            Some(false) => Some(format!(
                "the status of pod readiness gate \"{name}\" is not \"True\", but False"
            )),
            Some(true) => None,
        })
        .collect();
    if why.is_empty() {
        Condition::yes(Type::Ready)
    } else {
        Condition::no(Type::Ready, "ReadinessGatesNotReady", why.join(", "))
    }
}

/// Tracked conditions from saved `(type, status, unix seconds)` transitions (a daemon restart):
/// [`track`] keeps each time while the status stays the same.
pub fn restore<'a>(saved: impl IntoIterator<Item = (&'a str, bool, i64)>) -> Vec<Tracked> {
    saved
        .into_iter()
        .map(|(name, status, at)| {
            let kind = match name {
                "PodReadyToStartContainers" => Type::PodReadyToStartContainers,
                "Initialized" => Type::Initialized,
                "ContainersReady" => Type::ContainersReady,
                "Ready" => Type::Ready,
                other => Type::Gate(other.to_string()),
            };
            Tracked {
                condition: Condition {
                    kind,
                    status,
                    reason: String::new(),
                    message: String::new(),
                },
                last_transition: at,
            }
        })
        .collect()
}

/// `now`'s conditions with transition times carried over from `before` when the status did
/// not change.
pub fn track(before: &[Tracked], now: Vec<Condition>, at: i64) -> Vec<Tracked> {
    now.into_iter()
        .map(|c| {
            let last_transition = before
                .iter()
                .find(|b| b.condition.kind == c.kind && b.condition.status == c.status)
                .map_or(at, |b| b.last_transition);
            Tracked {
                condition: c,
                last_transition,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(name: &str, kind: Kind, state: State) -> Container {
        Container {
            name: name.into(),
            kind,
            state,
        }
    }
    const READY: State = State::Running {
        started: true,
        ready: true,
    };
    const UNREADY: State = State::Running {
        started: true,
        ready: false,
    };
    fn facts(phase: Phase) -> PodFacts {
        PodFacts {
            sandbox_ready: true,
            phase,
        }
    }
    fn get(cs: &[Condition], t: Type) -> Condition {
        cs.iter()
            .find(|c| c.kind == t)
            .cloned()
            .expect("condition present")
    }

    #[test]
    fn all_ready_pod() {
        let cs = [
            c("init", Kind::Init, State::Terminated { exit_code: 0 }),
            c("proxy", Kind::Sidecar, READY),
            c("web", Kind::App, READY),
        ];
        let got = conditions(facts(Phase::Running), &cs, &[]);
        let kinds: Vec<_> = got
            .iter()
            .map(|c| (c.kind.as_str().to_string(), c.status))
            .collect();
        assert_eq!(
            kinds,
            [
                ("PodReadyToStartContainers".to_string(), true),
                ("Initialized".to_string(), true),
                ("Ready".to_string(), true),
                ("ContainersReady".to_string(), true)
            ]
        );
    }

    #[test]
    fn initialization_incomplete_names_the_containers() {
        let cs = [
            c("a", Kind::Init, State::Terminated { exit_code: 0 }),
            c(
                "b",
                Kind::Init,
                State::Running {
                    started: true,
                    ready: false,
                },
            ),
            c("s", Kind::Sidecar, State::Missing),
            c("web", Kind::App, State::Missing),
        ];
        let i = get(
            &conditions(facts(Phase::Pending), &cs, &[]),
            Type::Initialized,
        );
        assert!(!i.status);
        assert_eq!(i.reason, "ContainersNotInitialized");
        assert_eq!(
            i.message,
            "containers with unknown status: [s], containers with incomplete status: [b]"
        );
        let r = get(&conditions(facts(Phase::Pending), &cs, &[]), Type::Ready);
        assert_eq!((r.status, r.reason.as_str()), (false, "ContainersNotReady"));
        assert_eq!(r.message, "containers with unknown status: [s web]");
    }

    #[test]
    fn unready_container_and_gates_hold_ready() {
        let cs = [c("web", Kind::App, UNREADY), c("db", Kind::App, READY)];
        let got = conditions(facts(Phase::Running), &cs, &[]);
        let cr = get(&got, Type::ContainersReady);
        assert_eq!(cr.message, "containers with unready status: [web]");
        assert!(!get(&got, Type::Ready).status);

        let cs = [c("web", Kind::App, READY)];
        let gates = vec![
            ("example.com/lb".to_string(), None),
            ("x/y".to_string(), Some(false)),
        ];
        let r = get(&conditions(facts(Phase::Running), &cs, &gates), Type::Ready);
        assert_eq!(r.reason, "ReadinessGatesNotReady");
        assert!(
            r.message.contains("\"example.com/lb\" does not exist"),
            "{}",
            r.message
        );
        assert!(
            r.message.contains("\"x/y\" is not \"True\""),
            "{}",
            r.message
        );
        let gates = vec![("example.com/lb".to_string(), Some(true))];
        assert!(get(&conditions(facts(Phase::Running), &cs, &gates), Type::Ready).status);
    }

    #[test]
    fn finished_pods() {
        let cs = [c("job", Kind::App, State::Terminated { exit_code: 0 })];
        let got = conditions(facts(Phase::Succeeded), &cs, &[]);
        assert_eq!(get(&got, Type::ContainersReady).reason, "PodCompleted");
        assert_eq!(get(&got, Type::Initialized).reason, "PodCompleted");
        assert!(get(&got, Type::Initialized).status);
        let cs = [c("job", Kind::App, State::Terminated { exit_code: 1 })];
        let got = conditions(facts(Phase::Failed), &cs, &[]);
        assert_eq!(get(&got, Type::Ready).reason, "PodFailed");
    }

    #[test]
    fn sandbox_not_ready() {
        let got = conditions(
            PodFacts {
                sandbox_ready: false,
                phase: Phase::Pending,
            },
            &[],
            &[],
        );
        assert!(!get(&got, Type::PodReadyToStartContainers).status);
    }

    #[test]
    fn transition_times_move_only_on_change() {
        let up = vec![Condition::yes(Type::Ready)];
        let t1 = track(&[], up.clone(), 100);
        assert_eq!(t1[0].last_transition, 100);
        let t2 = track(&t1, up, 200);
        assert_eq!(t2[0].last_transition, 100, "same status keeps its time");
        let down = vec![Condition::no(
            Type::Ready,
            "ContainersNotReady",
            String::new(),
        )];
        let t3 = track(&t2, down, 300);
        assert_eq!(t3[0].last_transition, 300);
    }
}
