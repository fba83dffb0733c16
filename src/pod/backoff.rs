//! Restart back-off per container: 10 s doubling to a cap (300 s), forgotten after quiet time.
//!
//! The kubelet keys a back-off entry by pod and container; each restart doubles the delay up to
//! the cap, and an entry not touched for twice the cap (10 minutes with the default cap) starts
//! over at the initial delay: a container that ran that long without trouble is restarted
//! at once again. While the delay runs the container is Waiting with reason CrashLoopBackOff.

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The kubelet's initial restart delay.
pub const INITIAL: Duration = Duration::from_secs(10);
/// The kubelet's default cap (maxContainerRestartPeriod may lower it to 1 s).
pub const MAX: Duration = Duration::from_secs(300);

/// Back-off settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub initial: Duration,
    pub max: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            initial: INITIAL,
            max: MAX,
        }
    }
}

impl Policy {
    /// A policy with `max` as the cap, clamped to the kubelet's allowed 1 s–300 s; the
    /// initial delay never exceeds the cap.
    pub fn with_max(max: Duration) -> Policy {
        let max = max.clamp(Duration::from_secs(1), MAX);
        Policy {
            initial: INITIAL.min(max),
            max,
        }
    }

    /// After this long without a restart the entry is forgotten.
    pub fn reset_after(&self) -> Duration {
        self.max * 2
    }
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    delay: Duration,
    last: Instant,
}

/// Back-off state of many containers (keyed by the caller, e.g. "pod-uid/container").
#[derive(Debug, Default)]
pub struct Backoff {
    policy: Policy,
    entries: HashMap<String, Entry>,
}

impl Backoff {
    pub fn new(policy: Policy) -> Backoff {
        Backoff {
            policy,
            entries: HashMap::new(),
        }
    }

    /// Records a restart of `key` at `now` and returns how long to wait before it.
    pub fn next(&mut self, key: &str, now: Instant) -> Duration {
        let p = self.policy;
        let delay = match self.entries.get(key) {
            Some(e) if now.saturating_duration_since(e.last) <= p.reset_after() => {
                (e.delay * 2).min(p.max)
            }
            _ => p.initial,
        };
        self.entries
            .insert(key.to_string(), Entry { delay, last: now });
        delay
    }

    /// The time `key` may restart at, if it is backing off at `now`.
    pub fn until(&self, key: &str, now: Instant) -> Option<Instant> {
        let e = self.entries.get(key)?;
        let at = e.last + e.delay;
        (at > now).then_some(at)
    }

    /// Forgets `key` (its pod was deleted).
    pub fn forget(&mut self, key: &str) {
        self.entries.remove(key);
    }

    /// Drops entries quiet for longer than the reset time.
    pub fn gc(&mut self, now: Instant) {
        let reset = self.policy.reset_after();
        self.entries
            .retain(|_, e| now.saturating_duration_since(e.last) <= reset);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn doubles_from_ten_seconds_and_caps_at_five_minutes() {
        let mut b = Backoff::new(Policy::default());
        let mut now = Instant::now();
        let mut got = Vec::new();
        for _ in 0..8 {
            let d = b.next("p/c", now);
            got.push(d.as_secs());
            now += d; // restarted right when allowed, crashed at once again
        }
        assert_eq!(got, [10, 20, 40, 80, 160, 300, 300, 300]);
    }

    #[test]
    fn waiting_window_and_per_container_keys() {
        let mut b = Backoff::new(Policy::default());
        let t0 = Instant::now();
        assert_eq!(b.next("p/a", t0), S(10));
        assert_eq!(b.until("p/a", t0 + S(3)), Some(t0 + S(10)));
        assert_eq!(b.until("p/a", t0 + S(10)), None);
        assert_eq!(b.until("p/b", t0), None);
        assert_eq!(b.next("p/b", t0), S(10), "keys are independent");
    }

    #[test]
    fn resets_after_twice_the_cap_of_quiet() {
        let mut b = Backoff::new(Policy::default());
        let t0 = Instant::now();
        b.next("k", t0);
        assert_eq!(b.next("k", t0 + S(20)), S(20));
        // Ran 10 minutes (2 × 300 s) without a restart: back to the start.
        assert_eq!(
            b.next("k", t0 + S(20) + S(600)),
            S(40),
            "exactly 10 min still counts"
        );
        assert_eq!(b.next("k", t0 + S(20) + S(1201)), S(10));
        b.gc(t0 + S(20) + S(1201) + S(601));
        assert_eq!(b.until("k", t0), None);
    }

    #[test]
    fn configured_cap_is_clamped_and_bounds_the_initial_delay() {
        assert_eq!(Policy::with_max(S(0)).max, S(1));
        assert_eq!(Policy::with_max(S(900)).max, S(300));
        let p = Policy::with_max(S(4));
        assert_eq!(p.initial, S(4));
        let mut b = Backoff::new(Policy::with_max(S(30)));
        let t = Instant::now();
        let got: Vec<_> = (0..4).map(|i| b.next("k", t + S(i)).as_secs()).collect();
        assert_eq!(got, [10, 20, 30, 30]);
        assert_eq!(Policy::with_max(S(30)).reset_after(), S(60));
    }
}
