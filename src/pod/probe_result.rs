//! A probe's result over time: initial values per kind, success/failure thresholds (the kubelet's worker rules).

/// Which probe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeKind {
    Startup,
    Liveness,
    Readiness,
}

impl ProbeKind {
    pub const ALL: [ProbeKind; 3] = [
        ProbeKind::Startup,
        ProbeKind::Liveness,
        ProbeKind::Readiness,
    ];

    /// `startup`, `liveness`, `readiness`.
    pub fn as_str(self) -> &'static str {
        match self {
            ProbeKind::Startup => "startup",
            ProbeKind::Liveness => "liveness",
            ProbeKind::Readiness => "readiness",
        }
    }
}

/// A probe's current result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Result {
    Success,
    Failure,
    Unknown,
}

impl Result {
    /// `Success`, `Failure`, `Unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Result::Success => "Success",
            Result::Failure => "Failure",
            Result::Unknown => "Unknown",
        }
    }
}

/// Thresholds from the probe spec (defaults 1 and 3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Thresholds {
    pub success: u32,
    pub failure: u32,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            success: 1,
            failure: 3,
        }
    }
}

/// The result of one probe of one container.
#[derive(Debug, Clone)]
pub struct Tracker {
    thresholds: Thresholds,
    result: Result,
    last: Option<bool>,
    run: u32,
}

impl Tracker {
    /// A new container's tracker: readiness starts as Failure (not ready until a probe
    /// passes), liveness as Success, startup as Unknown.
    pub fn new(kind: ProbeKind, thresholds: Thresholds) -> Tracker {
        let result = match kind {
            ProbeKind::Readiness => Result::Failure,
            ProbeKind::Liveness => Result::Success,
            ProbeKind::Startup => Result::Unknown,
        };
        Tracker {
            thresholds: Thresholds {
                success: thresholds.success.max(1),
                failure: thresholds.failure.max(1),
            },
            result,
            last: None,
            run: 0,
        }
    }

    pub fn result(&self) -> Result {
        self.result
    }

    /// Records one attempt (`ok`: success); the result flips only after `success`
    /// consecutive successes or `failure` consecutive failures. Returns the new result when
    /// it changed.
    pub fn record(&mut self, ok: bool) -> Option<Result> {
        if self.last == Some(ok) {
            self.run = self.run.saturating_add(1);
        } else {
            self.last = Some(ok);
            self.run = 1;
        }
        let (want, needed) = if ok {
            (Result::Success, self.thresholds.success)
        } else {
            (Result::Failure, self.thresholds.failure)
        };
        if self.run < needed || self.result == want {
            return None;
        }
        self.result = want;
        Some(want)
    }

    /// After a liveness or startup failure restarted the container: counting starts over
    /// (the new container's probe begins from its initial result).
    pub fn reset(&mut self, kind: ProbeKind) {
        *self = Tracker::new(kind, self.thresholds);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_results_per_kind() {
        let t = Thresholds::default();
        assert_eq!(
            Tracker::new(ProbeKind::Readiness, t).result(),
            Result::Failure
        );
        assert_eq!(
            Tracker::new(ProbeKind::Liveness, t).result(),
            Result::Success
        );
        assert_eq!(
            Tracker::new(ProbeKind::Startup, t).result(),
            Result::Unknown
        );
    }

    #[test]
    fn failure_threshold_needs_consecutive_failures() {
        let mut t = Tracker::new(
            ProbeKind::Liveness,
            Thresholds {
                success: 1,
                failure: 3,
            },
        );
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(true), None, "a success breaks the run");
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), Some(Result::Failure));
        assert_eq!(t.record(false), None, "reported once");
        assert_eq!(t.record(true), Some(Result::Success));
    }

    #[test]
    fn success_threshold_for_readiness() {
        let mut t = Tracker::new(
            ProbeKind::Readiness,
            Thresholds {
                success: 2,
                failure: 1,
            },
        );
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(true), Some(Result::Success));
        assert_eq!(t.record(false), Some(Result::Failure));
        assert_eq!(t.record(true), None);
        assert_eq!(t.record(true), Some(Result::Success));
    }

    #[test]
    fn startup_succeeds_once_and_reset_starts_over() {
        let mut t = Tracker::new(
            ProbeKind::Startup,
            Thresholds {
                success: 1,
                failure: 2,
            },
        );
        assert_eq!(t.record(false), None);
        assert_eq!(t.record(false), Some(Result::Failure));
        t.reset(ProbeKind::Startup);
        assert_eq!(t.result(), Result::Unknown);
        assert_eq!(t.record(true), Some(Result::Success));
        let mut zero = Tracker::new(
            ProbeKind::Liveness,
            Thresholds {
                success: 0,
                failure: 0,
            },
        );
        assert_eq!(
            zero.record(false),
            Some(Result::Failure),
            "thresholds are at least 1"
        );
    }
}
