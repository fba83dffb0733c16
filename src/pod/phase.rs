//! Pod phase from container states, as the kubelet computes it (Pending/Running/Succeeded/Failed).

/// A container's role in the pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular init container: runs to completion, in order, before the rest.
    Init,
    /// An init container with restartPolicy Always: started before the app containers and
    /// kept running beside them.
    Sidecar,
    /// A regular (app) container.
    App,
}

/// What the supervisor knows of a container's current state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Not created yet: no status at all.
    Missing,
    /// Waiting to be (re)started; `last_exit` is the exit code of its previous run, if any.
    Waiting { last_exit: Option<i32> },
    /// Running; `started` once its startup probe (if any) passed and postStart completed,
    /// `ready` per its readiness probe.
    Running { started: bool, ready: bool },
    /// Exited with `exit_code` and will not be restarted (or not yet).
    Terminated { exit_code: i32 },
}

/// One container's kind and state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Container {
    pub name: String,
    pub kind: Kind,
    pub state: State,
}

/// The pod's restartPolicy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RestartPolicy {
    #[default]
    Always,
    OnFailure,
    Never,
}

impl RestartPolicy {
    /// Whether an app container that exited with `code` is restarted.
    pub fn restarts(self, code: i32) -> bool {
        match self {
            RestartPolicy::Always => true,
            RestartPolicy::OnFailure => code != 0,
            RestartPolicy::Never => false,
        }
    }
}

/// The pod phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Running,
    Succeeded,
    Failed,
    Unknown,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Running => "Running",
            Phase::Succeeded => "Succeeded",
            Phase::Failed => "Failed",
            Phase::Unknown => "Unknown",
        }
    }

    /// Succeeded and Failed are final: a pod never leaves them.
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Succeeded | Phase::Failed)
    }
}

/// Whether an app container has run at all (the pod got past initialization before).
pub fn any_app_started(containers: &[Container]) -> bool {
    containers.iter().any(|c| {
        c.kind == Kind::App
            && matches!(
                c.state,
                State::Running { .. }
                    | State::Terminated { .. }
                    | State::Waiting { last_exit: Some(_) }
            )
    })
}

/// The phase of a pod with `policy` whose containers are in `containers`. `terminal`: the
/// pod is being finished (deleted) and nothing will restart, so all-exited means
/// Succeeded or Failed whatever the policy.
pub fn phase(policy: RestartPolicy, containers: &[Container], terminal: bool) -> Phase {
    let mut pending_init = 0;
    let mut failed_init = 0;
    let (mut unknown, mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0, 0);
    for c in containers {
        match (c.kind, c.state) {
            (Kind::Init, State::Terminated { exit_code }) => {
                failed_init += (exit_code != 0) as usize
            }
            (
                Kind::Init,
                State::Waiting {
                    last_exit: Some(code),
                },
            ) => failed_init += (code != 0) as usize,
            (Kind::Init, _) => pending_init += 1,
            (Kind::Sidecar, State::Missing) => {
                pending_init += 1;
                unknown += 1;
            }
            (Kind::Sidecar, State::Running { started, .. }) => {
                pending_init += (!started) as usize;
                running += 1;
            }
            // An exited or restarting sidecar does not count for the phase.
            (Kind::Sidecar, State::Terminated { .. } | State::Waiting { last_exit: Some(_) }) => {}
            (Kind::Sidecar, State::Waiting { last_exit: None }) => {
                pending_init += 1;
                waiting += 1;
            }
            (Kind::App, State::Missing) => unknown += 1,
            (Kind::App, State::Running { .. }) => running += 1,
            (Kind::App, State::Terminated { exit_code }) => {
                stopped += 1;
                succeeded += (exit_code == 0) as usize;
            }
            (Kind::App, State::Waiting { last_exit: Some(_) }) => stopped += 1,
            (Kind::App, State::Waiting { last_exit: None }) => waiting += 1,
        }
    }
    if failed_init > 0 && policy == RestartPolicy::Never {
        return Phase::Failed;
    }
    if (pending_init > 0 && !any_app_started(containers)) || waiting > 0 {
        return Phase::Pending;
    }
    if running > 0 && unknown == 0 {
        return Phase::Running;
    }
    if running == 0 && stopped > 0 && unknown == 0 {
        if terminal {
            return if stopped == succeeded {
                Phase::Succeeded
            } else {
                Phase::Failed
            };
        }
        return match policy {
            RestartPolicy::Always => Phase::Running,
            _ if stopped == succeeded => Phase::Succeeded,
            RestartPolicy::Never => Phase::Failed,
            RestartPolicy::OnFailure => Phase::Running,
        };
    }
    Phase::Pending
}

#[cfg(test)]
mod tests {
    use super::*;
    use Kind::*;
    use RestartPolicy::*;

    fn c(kind: Kind, state: State) -> Container {
        Container {
            name: format!("{kind:?}"),
            kind,
            state,
        }
    }
    const RUN: State = State::Running {
        started: true,
        ready: true,
    };
    const STARTING: State = State::Running {
        started: false,
        ready: false,
    };
    const NEW: State = State::Waiting { last_exit: None };
    const fn exited(code: i32) -> State {
        State::Terminated { exit_code: code }
    }
    const fn backing_off(code: i32) -> State {
        State::Waiting {
            last_exit: Some(code),
        }
    }

    #[test]
    fn initialization_keeps_the_pod_pending() {
        assert_eq!(
            phase(Always, &[c(Init, NEW), c(App, State::Missing)], false),
            Phase::Pending
        );
        assert_eq!(
            phase(Always, &[c(Init, RUN), c(App, State::Missing)], false),
            Phase::Pending
        );
        assert_eq!(
            phase(Always, &[c(Init, exited(0)), c(App, NEW)], false),
            Phase::Pending
        );
        // A failed init container restarts (Pending) unless the policy is Never.
        assert_eq!(
            phase(
                OnFailure,
                &[c(Init, backing_off(1)), c(App, State::Missing)],
                false
            ),
            Phase::Pending
        );
        assert_eq!(
            phase(Never, &[c(Init, exited(1)), c(App, State::Missing)], false),
            Phase::Failed
        );
        // A sidecar not yet started (startup probe) holds initialization.
        assert_eq!(
            phase(
                Always,
                &[c(Sidecar, STARTING), c(App, State::Missing)],
                false
            ),
            Phase::Pending
        );
    }

    #[test]
    fn running_once_every_container_started_and_one_runs() {
        assert_eq!(
            phase(
                Always,
                &[c(Init, exited(0)), c(Sidecar, RUN), c(App, RUN)],
                false
            ),
            Phase::Running
        );
        assert_eq!(
            phase(Never, &[c(App, RUN), c(App, exited(1))], false),
            Phase::Running
        );
        // A sidecar restarting after the apps ran does not take the pod back to Pending.
        assert_eq!(
            phase(Always, &[c(Sidecar, backing_off(1)), c(App, RUN)], false),
            Phase::Running
        );
        assert_eq!(
            phase(Always, &[c(Sidecar, STARTING), c(App, RUN)], false),
            Phase::Running
        );
    }

    #[test]
    fn all_exited_depends_on_the_restart_policy() {
        let ok = [c(App, exited(0)), c(App, exited(0))];
        let bad = [c(App, exited(0)), c(App, exited(2))];
        assert_eq!(
            phase(Always, &ok, false),
            Phase::Running,
            "Always restarts them"
        );
        assert_eq!(phase(OnFailure, &ok, false), Phase::Succeeded);
        assert_eq!(phase(Never, &ok, false), Phase::Succeeded);
        assert_eq!(
            phase(OnFailure, &bad, false),
            Phase::Running,
            "the failed one restarts"
        );
        assert_eq!(phase(Never, &bad, false), Phase::Failed);
        // CrashLoopBackOff counts as stopped, not waiting.
        assert_eq!(
            phase(Always, &[c(App, backing_off(1))], false),
            Phase::Running
        );
        // Exited sidecars do not matter once the apps are done.
        assert_eq!(
            phase(Never, &[c(Sidecar, exited(143)), c(App, exited(0))], false),
            Phase::Succeeded
        );
    }

    #[test]
    fn a_terminal_pod_ends_succeeded_or_failed_whatever_the_policy() {
        assert_eq!(phase(Always, &[c(App, exited(0))], true), Phase::Succeeded);
        assert_eq!(phase(Always, &[c(App, exited(137))], true), Phase::Failed);
        assert_eq!(
            phase(Always, &[c(App, RUN)], true),
            Phase::Running,
            "still stopping"
        );
    }

    #[test]
    fn unknown_containers_keep_it_pending() {
        assert_eq!(
            phase(Always, &[c(App, RUN), c(App, State::Missing)], false),
            Phase::Pending
        );
        assert_eq!(phase(Always, &[], false), Phase::Pending);
    }

    #[test]
    fn restart_policy_decisions() {
        assert!(Always.restarts(0) && Always.restarts(1));
        assert!(!OnFailure.restarts(0) && OnFailure.restarts(1));
        assert!(!Never.restarts(1));
        assert!(Phase::Failed.is_terminal() && !Phase::Running.is_terminal());
    }
}
