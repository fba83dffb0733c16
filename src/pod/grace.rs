//! Termination grace arithmetic: the pod's grace, probe-level grace, preStop time, the 2 s floor.
//!
//! Rules (pod-lifecycle and pod-safety documents, the kubelet's pod workers):
//! - the pod's grace is its terminationGracePeriodSeconds (default 30 s) unless a delete asks
//!   for less; a later request can only shorten it, and it is never below 1 s (a forced delete
//!   with 0 still gives the containers a moment);
//! - a liveness or startup probe kill uses the probe's terminationGracePeriodSeconds when set;
//! - preStop runs first when the grace is positive and its time is subtracted; whatever is
//!   left is floored at 2 s, so a preStop that overruns the grace gets the stop signal with a
//!   one-time 2 s window before SIGKILL.

use std::time::Duration;

/// terminationGracePeriodSeconds when the spec leaves it out.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);
/// The least a pod termination gets, even when forced with 0.
pub const POD_MINIMUM: Duration = Duration::from_secs(1);
/// The least a container gets after its preStop hook.
pub const CONTAINER_MINIMUM: Duration = Duration::from_secs(2);

/// Why a container is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillReason {
    /// The pod is being deleted (or its manifest removed).
    PodDeleted,
    /// The liveness probe failed.
    Liveness,
    /// The startup probe failed.
    Startup,
    /// A postStart hook failed.
    PostStartFailed,
}

/// The pod's grace: `spec` (the pod's terminationGracePeriodSeconds), shortened by
/// `requested` (a delete's grace), never longer than `current` (an earlier request's). At least
/// [`POD_MINIMUM`]. Returns the grace and whether it changed from `current`.
pub fn pod_grace(
    spec: Option<Duration>,
    current: Option<Duration>,
    requested: Option<Duration>,
) -> (Duration, bool) {
    let mut g = current.unwrap_or(spec.unwrap_or(DEFAULT_GRACE));
    if let Some(r) = requested {
        g = g.min(r);
    }
    let g = g.max(POD_MINIMUM);
    (g, current.is_some_and(|c| c != g))
}

/// The grace a container gets for `reason`: the probe's own grace for probe kills when set,
/// else the pod's.
pub fn container_grace(pod: Duration, reason: KillReason, probe: Option<Duration>) -> Duration {
    match (reason, probe) {
        (KillReason::Liveness | KillReason::Startup, Some(p)) => p,
        _ => pod,
    }
}

/// How long the container's stop (signal, then SIGKILL) gets after a preStop hook that took
/// `hook` of the container's `grace`; at least [`CONTAINER_MINIMUM`].
pub fn after_pre_stop(grace: Duration, hook: Duration) -> Duration {
    grace.saturating_sub(hook).max(CONTAINER_MINIMUM)
}

/// Whether a preStop hook runs at all: only with a positive grace.
pub fn runs_pre_stop(grace: Duration) -> bool {
    !grace.is_zero()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn pod_grace_defaults_and_only_shortens() {
        assert_eq!(pod_grace(None, None, None), (S(30), false));
        assert_eq!(pod_grace(Some(S(60)), None, None), (S(60), false));
        assert_eq!(pod_grace(Some(S(60)), None, Some(S(10))), (S(10), false));
        // A request longer than the spec does not lengthen it.
        assert_eq!(pod_grace(Some(S(60)), None, Some(S(90))), (S(60), false));
        // A second delete can shorten, never lengthen.
        assert_eq!(
            pod_grace(Some(S(60)), Some(S(10)), Some(S(5))),
            (S(5), true)
        );
        assert_eq!(
            pod_grace(Some(S(60)), Some(S(10)), Some(S(30))),
            (S(10), false)
        );
        assert_eq!(pod_grace(Some(S(60)), Some(S(10)), None), (S(10), false));
    }

    #[test]
    fn forced_zero_still_gives_one_second() {
        assert_eq!(pod_grace(Some(S(30)), None, Some(S(0))), (S(1), false));
        assert_eq!(pod_grace(Some(S(0)), None, None), (S(1), false));
    }

    #[test]
    fn probe_grace_applies_to_probe_kills_only() {
        let pod = S(30);
        assert_eq!(container_grace(pod, KillReason::Liveness, Some(S(3))), S(3));
        assert_eq!(container_grace(pod, KillReason::Startup, Some(S(4))), S(4));
        assert_eq!(container_grace(pod, KillReason::Liveness, None), pod);
        assert_eq!(
            container_grace(pod, KillReason::PodDeleted, Some(S(3))),
            pod
        );
        assert_eq!(
            container_grace(pod, KillReason::PostStartFailed, Some(S(3))),
            pod
        );
    }

    #[test]
    fn pre_stop_time_is_subtracted_and_floored_at_two_seconds() {
        assert_eq!(after_pre_stop(S(30), S(5)), S(25));
        assert_eq!(after_pre_stop(S(30), S(29)), S(2));
        // Overran the whole grace: the one-time 2 s window.
        assert_eq!(after_pre_stop(S(10), S(12)), S(2));
        assert_eq!(after_pre_stop(S(1), S(0)), S(2));
        assert!(runs_pre_stop(S(1)));
        assert!(!runs_pre_stop(S(0)));
    }
}
