//! The eviction manager's bookkeeping (the kubelet's synchronize): thresholds met, soft grace, minimum reclaim, pressure conditions with their transition period.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

use super::thresholds::Condition;
use crate::config::eviction::{Signal, Threshold};

/// One reading of a signal.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// What is left (bytes, inodes, pids).
    pub available: f64,
    /// The whole (percentages are of this).
    pub capacity: f64,
}

/// A reading of every signal that could be read.
pub type Observations = BTreeMap<Signal, Observation>;

/// What one pass decided.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Decision {
    /// The threshold to act on (memory first), its grace satisfied; `None`: nothing to do.
    pub act_on: Option<Threshold>,
    /// Every threshold met, grace or not (the kubelet's "thresholds met").
    pub met: Vec<Threshold>,
}

/// The eviction manager's memory between passes.
#[derive(Debug)]
pub struct Tracker {
    thresholds: Vec<Threshold>,
    transition: Duration,
    first_observed: HashMap<(Signal, bool), Instant>,
    /// Thresholds that drove eviction last time: kept until their minimum reclaim is met.
    acting: Vec<Threshold>,
    condition_seen: HashMap<Condition, Instant>,
}

impl Tracker {
    /// A tracker of `thresholds`; a condition stays reported for `transition` after its
    /// threshold last held.
    pub fn new(thresholds: Vec<Threshold>, transition: Duration) -> Tracker {
        Tracker {
            thresholds,
            transition,
            first_observed: HashMap::new(),
            acting: Vec::new(),
            condition_seen: HashMap::new(),
        }
    }

    /// The configured thresholds.
    pub fn thresholds(&self) -> &[Threshold] {
        &self.thresholds
    }

    /// Thresholds of `list` met by `obs` (with their minimum reclaim when `with_reclaim`).
    pub fn met_by(list: &[Threshold], obs: &Observations, with_reclaim: bool) -> Vec<Threshold> {
        list.iter()
            .filter(|t| {
                obs.get(&t.signal)
                    .is_some_and(|o| t.met(o.available, o.capacity, with_reclaim))
            })
            .copied()
            .collect()
    }

    /// One pass over `obs` at `now`.
    pub fn observe(&mut self, obs: &Observations, now: Instant) -> Decision {
        let mut met = Self::met_by(&self.thresholds, obs, false);
        for t in Self::met_by(&self.acting, obs, true) {
            if !met.iter().any(|m| m.key() == t.key()) {
                met.push(t);
            }
        }
        let first: HashMap<(Signal, bool), Instant> = met
            .iter()
            .map(|t| {
                let at = self.first_observed.get(&t.key()).copied().unwrap_or(now);
                (t.key(), at)
            })
            .collect();
        self.first_observed = first;
        for t in &met {
            self.condition_seen.insert(t.signal.condition(), now);
        }
        let mut ready: Vec<Threshold> = met
            .iter()
            .filter(|t| {
                self.first_observed
                    .get(&t.key())
                    .is_some_and(|at| now.saturating_duration_since(*at) >= t.grace)
            })
            .copied()
            .collect();
        // Memory before everything else (the kubelet's byEvictionPriority), hard before soft.
        ready.sort_by_key(|t| {
            (
                t.signal.resource() != super::thresholds::Resource::Memory,
                !t.is_hard(),
            )
        });
        self.acting = ready.clone();
        Decision {
            act_on: ready.first().copied(),
            met,
        }
    }

    /// The pressure conditions reported now: those whose threshold held within the
    /// transition period.
    pub fn conditions(&self, now: Instant) -> BTreeSet<Condition> {
        self.condition_seen
            .iter()
            .filter(|(_, at)| now.saturating_duration_since(**at) < self.transition)
            .map(|(c, _)| *c)
            .collect()
    }

    /// When threshold `t` was first seen met in the current stretch.
    pub fn first_observed(&self, t: &Threshold) -> Option<Instant> {
        self.first_observed.get(&t.key()).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::eviction::Value;

    fn obs(signal: Signal, available: f64) -> Observations {
        BTreeMap::from([(
            signal,
            Observation {
                available,
                capacity: 1000.0,
            },
        )])
    }

    fn t(signal: Signal, value: f64, grace: u64, reclaim: Option<f64>) -> Threshold {
        Threshold {
            signal,
            value: Value::Quantity(value),
            grace: Duration::from_secs(grace),
            min_reclaim: reclaim.map(Value::Quantity),
        }
    }

    #[test]
    fn hard_thresholds_act_at_once_and_soft_ones_after_their_grace() {
        let mut tr = Tracker::new(
            vec![
                t(Signal::MemoryAvailable, 100.0, 0, None),
                t(Signal::NodeFsAvailable, 300.0, 10, None),
            ],
            Duration::from_secs(30),
        );
        let t0 = Instant::now();
        let d = tr.observe(&obs(Signal::MemoryAvailable, 50.0), t0);
        assert_eq!(d.act_on.map(|t| t.signal), Some(Signal::MemoryAvailable));
        let d = tr.observe(&obs(Signal::NodeFsAvailable, 200.0), t0);
        assert_eq!(d.act_on, None, "soft: grace not yet over");
        assert_eq!(d.met.len(), 1);
        let d = tr.observe(
            &obs(Signal::NodeFsAvailable, 200.0),
            t0 + Duration::from_secs(9),
        );
        assert_eq!(d.act_on, None);
        let d = tr.observe(
            &obs(Signal::NodeFsAvailable, 200.0),
            t0 + Duration::from_secs(10),
        );
        assert_eq!(d.act_on.map(|t| t.signal), Some(Signal::NodeFsAvailable));
        // Relieved, then met again: the grace starts over.
        tr.observe(
            &obs(Signal::NodeFsAvailable, 900.0),
            t0 + Duration::from_secs(11),
        );
        let d = tr.observe(
            &obs(Signal::NodeFsAvailable, 200.0),
            t0 + Duration::from_secs(12),
        );
        assert_eq!(d.act_on, None);
    }

    #[test]
    fn minimum_reclaim_keeps_acting_until_value_plus_reclaim_is_free() {
        let mut tr = Tracker::new(
            vec![t(Signal::MemoryAvailable, 100.0, 0, Some(200.0))],
            Duration::from_secs(30),
        );
        let t0 = Instant::now();
        assert!(tr
            .observe(&obs(Signal::MemoryAvailable, 50.0), t0)
            .act_on
            .is_some());
        assert!(
            tr.observe(&obs(Signal::MemoryAvailable, 250.0), t0)
                .act_on
                .is_some(),
            "250 < 100 + 200"
        );
        assert!(tr
            .observe(&obs(Signal::MemoryAvailable, 350.0), t0)
            .act_on
            .is_none());
        assert!(
            tr.observe(&obs(Signal::MemoryAvailable, 250.0), t0)
                .act_on
                .is_none(),
            "not met anew"
        );
    }

    #[test]
    fn conditions_linger_for_the_transition_period() {
        let mut tr = Tracker::new(
            vec![t(Signal::PidAvailable, 100.0, 0, None)],
            Duration::from_secs(30),
        );
        let t0 = Instant::now();
        tr.observe(&obs(Signal::PidAvailable, 10.0), t0);
        assert!(tr.conditions(t0).contains(&Condition::PIDPressure));
        tr.observe(
            &obs(Signal::PidAvailable, 500.0),
            t0 + Duration::from_secs(1),
        );
        assert!(tr
            .conditions(t0 + Duration::from_secs(29))
            .contains(&Condition::PIDPressure));
        assert!(tr.conditions(t0 + Duration::from_secs(30)).is_empty());
    }
}
