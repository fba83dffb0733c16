//! Which pod goes first under pressure (the kubelet's rank functions) and the eviction message it gets.

use std::cmp::Ordering;

use super::eviction::Observation;
use super::thresholds::Resource;
use crate::config::eviction::Threshold;
use crate::config::quantity::{format_binary, format_decimal};

/// One container's usage of the starved resource, for the message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub usage: i64,
    pub request: i64,
}

/// A pod the node may evict, with its usage of the starved resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub uid: String,
    pub priority: i32,
    /// Usage (memory working set, disk bytes, inodes or processes); `None`: no stats.
    pub usage: Option<i64>,
    /// What the pod requests of that resource (0 for pids and inodes).
    pub request: i64,
    /// Per container, for the message.
    pub containers: Vec<ContainerUsage>,
}

fn no_stats_first(a: &Candidate, b: &Candidate) -> Option<Ordering> {
    match (a.usage, b.usage) {
        (None, Some(_)) => Some(Ordering::Less),
        (Some(_), None) => Some(Ordering::Greater),
        (None, None) => Some(Ordering::Equal),
        _ => None,
    }
}

fn exceeds(c: &Candidate) -> bool {
    c.usage.unwrap_or(0) > c.request
}

/// Sorts `pods` most-evictable first for `resource`: for memory and disk, pods using more than
/// they request first, then lower priority, then larger usage above request; for pids, lower
/// priority, then more processes.
pub fn rank(resource: Resource, pods: &mut [Candidate]) {
    pods.sort_by(|a, b| {
        let by_priority = a.priority.cmp(&b.priority);
        if resource == Resource::Pids {
            return by_priority
                .then_with(|| no_stats_first(a, b).unwrap_or_else(|| b.usage.cmp(&a.usage)));
        }
        if let Some(o) = no_stats_first(a, b).filter(|o| *o != Ordering::Equal) {
            return o;
        }
        exceeds(b).cmp(&exceeds(a)).then(by_priority).then_with(|| {
            let over = |c: &Candidate| c.usage.unwrap_or(0) - c.request;
            over(b).cmp(&over(a))
        })
    });
}

fn format(resource: Resource, v: i64) -> String {
    match resource {
        Resource::Memory | Resource::EphemeralStorage => format_binary(v),
        Resource::Inodes | Resource::Pids => format_decimal(v),
    }
}

/// The kubelet's eviction message: `The node was low on resource: memory. Threshold quantity:
/// 100Mi, available: 52335Ki. Container hog was using 150Mi, request is 0, has larger
/// consumption of memory. `
pub fn message(threshold: &Threshold, obs: Option<&Observation>, pod: &Candidate) -> String {
    let resource = threshold.signal.resource();
    let mut m = format!("The node was low on resource: {}. ", resource.as_str());
    if let Some(o) = obs {
        m.push_str(&format!(
            "Threshold quantity: {}, available: {}. ",
            format(resource, threshold.value.of(o.capacity) as i64),
            format(resource, o.available as i64)
        ));
    }
    if matches!(resource, Resource::Memory | Resource::EphemeralStorage) {
        for c in pod.containers.iter().filter(|c| c.usage > c.request) {
            m.push_str(&format!(
                "Container {} was using {}, request is {}, has larger consumption of {}. ",
                c.name,
                format(resource, c.usage),
                format(resource, c.request),
                resource.as_str()
            ));
        }
    }
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::eviction::{Signal, Value};

    fn c(uid: &str, priority: i32, usage: Option<i64>, request: i64) -> Candidate {
        Candidate {
            uid: uid.into(),
            priority,
            usage,
            request,
            containers: Vec::new(),
        }
    }

    fn order(resource: Resource, mut v: Vec<Candidate>) -> Vec<String> {
        rank(resource, &mut v);
        v.into_iter().map(|c| c.uid).collect()
    }

    #[test]
    fn memory_ranks_over_request_then_priority_then_excess() {
        let v = vec![
            c("guaranteed-under", 0, Some(50), 100),
            c("burstable-over-high", 1000, Some(500), 100),
            c("besteffort-small", 0, Some(10), 0),
            c("hog", 0, Some(900), 10),
        ];
        assert_eq!(
            order(Resource::Memory, v),
            vec![
                "hog",
                "besteffort-small",
                "burstable-over-high",
                "guaranteed-under"
            ]
        );
        let v = vec![c("a", 0, Some(10), 0), c("no-stats", 100, None, 0)];
        assert_eq!(order(Resource::Memory, v), vec!["no-stats", "a"]);
    }

    #[test]
    fn pids_rank_by_priority_then_processes() {
        let v = vec![
            c("many-high", 10, Some(900), 0),
            c("few-low", 0, Some(3), 0),
            c("many-low", 0, Some(500), 0),
        ];
        assert_eq!(
            order(Resource::Pids, v),
            vec!["many-low", "few-low", "many-high"]
        );
    }

    #[test]
    fn messages_read_like_the_kubelets() {
        let t = Threshold {
            signal: Signal::MemoryAvailable,
            value: Value::Quantity((100 << 20) as f64),
            grace: std::time::Duration::ZERO,
            min_reclaim: None,
        };
        let mut p = c("p", 0, Some(150 << 20), 0);
        p.containers = vec![
            ContainerUsage {
                name: "hog".into(),
                usage: 150 << 20,
                request: 0,
            },
            ContainerUsage {
                name: "quiet".into(),
                usage: 1 << 20,
                request: 64 << 20,
            },
        ];
        let o = Observation {
            available: 53_591_040.0,
            capacity: (8u64 << 30) as f64,
        };
        assert_eq!(
            message(&t, Some(&o), &p),
            "The node was low on resource: memory. Threshold quantity: 100Mi, available: \
             52335Ki. Container hog was using 150Mi, request is 0, has larger consumption of \
             memory. "
        );
    }
}
