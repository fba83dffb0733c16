//! A pod's event log, aggregated like the kubelet's recorder (same event → count and last time).

use crate::pod::api::{EventType, PodEvent};
use crate::runtime::status::now_ns;

/// Events kept per pod; the oldest go first.
const LIMIT: usize = 100;

/// The events of one pod.
#[derive(Debug, Default, Clone)]
pub struct EventLog {
    events: Vec<PodEvent>,
}

impl EventLog {
    /// Records an event; an identical one (type, reason, object, message) is bumped instead.
    pub fn record(&mut self, kind: EventType, reason: &str, object: &str, message: String) {
        let now = now_ns();
        tracing::debug!(reason, object, message = %message, "pod event");
        if let Some(e) = self.events.iter_mut().find(|e| {
            e.kind == kind && e.reason == reason && e.object == object && e.message == message
        }) {
            e.count += 1;
            e.last_ns = now;
            return;
        }
        if self.events.len() >= LIMIT {
            self.events.remove(0);
        }
        self.events.push(PodEvent {
            kind,
            reason: reason.to_string(),
            object: object.to_string(),
            message,
            count: 1,
            first_ns: now,
            last_ns: now,
        });
    }

    pub fn normal(&mut self, reason: &str, object: &str, message: String) {
        self.record(EventType::Normal, reason, object, message);
    }

    pub fn warning(&mut self, reason: &str, object: &str, message: String) {
        self.record(EventType::Warning, reason, object, message);
    }

    /// Oldest first (by last occurrence).
    pub fn list(&self) -> Vec<PodEvent> {
        let mut v = self.events.clone();
        v.sort_by_key(|e| e.last_ns);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identical_events_aggregate_and_the_log_is_bounded() {
        let mut log = EventLog::default();
        log.warning("BackOff", "spec.containers{a}", "back-off".into());
        log.warning("BackOff", "spec.containers{a}", "back-off".into());
        log.normal(
            "Started",
            "spec.containers{a}",
            "Started container a".into(),
        );
        let l = log.list();
        assert_eq!(l.len(), 2);
        assert_eq!(
            l.iter().find(|e| e.reason == "BackOff").map(|e| e.count),
            Some(2)
        );
        for i in 0..(LIMIT + 5) {
            log.normal("X", "", format!("{i}"));
        }
        assert_eq!(log.list().len(), LIMIT);
    }
}
