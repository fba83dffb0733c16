//! Admission: whether a pod fits what is left of allocatable (the kubelet's messages), and which pods a critical pod preempts.

use super::capacity::Amounts;
use super::requests::Demand;
use crate::pod::resources::QosClass;

/// A pod the node runs (or is starting): what admission and preemption weigh.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Admitted {
    pub uid: String,
    /// `namespace/name`.
    pub key: String,
    pub requests: Demand,
    pub qos: QosClass,
    pub priority: i32,
    /// Static or priority ≥ system-critical.
    pub critical: bool,
}

/// One resource the pod does not fit (the kubelet's InsufficientResourceError).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Insufficient {
    /// `pods`, `cpu`, `memory` or `ephemeral-storage`.
    pub resource: &'static str,
    pub requested: i64,
    pub used: i64,
    pub capacity: i64,
}

impl Insufficient {
    /// The pod's status reason (`OutOfcpu`, `OutOfmemory`, `OutOfpods`, ...).
    pub fn reason(&self) -> String {
        format!("OutOf{}", self.resource)
    }

    /// The kubelet's message.
    pub fn message(&self) -> String {
        format!(
            "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
            self.resource, self.requested, self.used, self.capacity
        )
    }

    /// How much must be freed.
    fn amount(&self) -> i64 {
        self.requested - (self.capacity - self.used)
    }
}

/// What `new` lacks next to `others` on a node with `allocatable`, in the kubelet's order
/// (pods, cpu, memory, ephemeral-storage); empty when it fits.
pub fn fit(new: &Demand, others: &[Admitted], allocatable: &Amounts) -> Vec<Insufficient> {
    let mut out = Vec::new();
    let count = others.len() as i64;
    if count + 1 > allocatable.pods {
        out.push(Insufficient {
            resource: "pods",
            requested: 1,
            used: count,
            capacity: allocatable.pods,
        });
    }
    if new.is_zero() {
        return out;
    }
    let mut used = Demand::default();
    for o in others {
        used.cpu_milli += o.requests.cpu_milli;
        used.memory += o.requests.memory;
        used.ephemeral_storage += o.requests.ephemeral_storage;
    }
    for (resource, req, used, cap) in [
        ("cpu", new.cpu_milli, used.cpu_milli, allocatable.cpu_milli),
        ("memory", new.memory, used.memory, allocatable.memory),
        (
            "ephemeral-storage",
            new.ephemeral_storage,
            used.ephemeral_storage,
            allocatable.ephemeral_storage,
        ),
    ] {
        if req > 0 && req > cap - used {
            out.push(Insufficient {
                resource,
                requested: req,
                used,
                capacity: cap,
            });
        }
    }
    out
}

fn request_of(p: &Admitted, resource: &str) -> i64 {
    match resource {
        "pods" => 1,
        "cpu" => p.requests.cpu_milli,
        "memory" => p.requests.memory,
        _ => p.requests.ephemeral_storage,
    }
}

type Needs = Vec<(&'static str, i64)>;

fn subtract(needs: &Needs, pods: &[&Admitted]) -> Needs {
    needs
        .iter()
        .filter_map(|(r, q)| {
            let left = pods.iter().fold(*q, |left, p| left - request_of(p, r));
            (left > 0).then_some((*r, left))
        })
        .collect()
}

fn distance(needs: &Needs, p: &Admitted) -> f64 {
    needs
        .iter()
        .map(|(r, q)| {
            let rest = (q - request_of(p, r)) as f64;
            if rest > 0.0 {
                (rest / *q as f64).powi(2)
            } else {
                0.0
            }
        })
        .sum()
}

fn smaller(a: &Admitted, b: &Admitted) -> bool {
    (a.requests.memory, a.requests.cpu_milli) <= (b.requests.memory, b.requests.cpu_milli)
}

/// The kubelet's getPodsToPreemptByDistance: repeatedly the pod that covers most of what is
/// still needed (the smaller one on a tie), so as few pods as possible go.
fn by_distance(mut pods: Vec<&Admitted>, mut needs: Needs) -> Option<Vec<&Admitted>> {
    let mut out = Vec::new();
    while !needs.is_empty() {
        if pods.is_empty() {
            return None;
        }
        let mut best = 0;
        let mut best_d = f64::MAX;
        for (i, p) in pods.iter().enumerate() {
            let d = distance(&needs, p);
            if d < best_d || (d == best_d && smaller(p, pods[best])) {
                best = i;
                best_d = d;
            }
        }
        let p = pods.swap_remove(best);
        needs = subtract(&needs, &[p]);
        out.push(p);
    }
    Some(out)
}

fn qos_rank(q: QosClass) -> u8 {
    match q {
        QosClass::BestEffort => 0,
        QosClass::Burstable => 1,
        QosClass::Guaranteed => 2,
    }
}

/// The pods a critical pod evicts to fit (the kubelet's CriticalPodAdmissionHandler), `None`
/// when even all of `candidates` would not free enough. The kubelet protects Guaranteed pods
/// first, then Burstable ones; bosun groups by priority before QoS, so that the fewest pods of
/// the *lowest* priority go: a group is touched only for what every group below it cannot free.
pub fn victims<'a>(
    missing: &[Insufficient],
    candidates: &[&'a Admitted],
) -> Option<Vec<&'a Admitted>> {
    let needs: Needs = missing.iter().map(|m| (m.resource, m.amount())).collect();
    if !subtract(&needs, candidates).is_empty() {
        return None;
    }
    let mut keys: Vec<(i32, u8)> = candidates
        .iter()
        .map(|p| (p.priority, qos_rank(p.qos)))
        .collect();
    keys.sort();
    keys.dedup();
    let groups: Vec<Vec<&Admitted>> = keys
        .iter()
        .map(|k| {
            candidates
                .iter()
                .copied()
                .filter(|p| (p.priority, qos_rank(p.qos)) == *k)
                .collect()
        })
        .collect();
    let mut chosen: Vec<Vec<&Admitted>> = vec![Vec::new(); groups.len()];
    for k in (0..groups.len()).rev() {
        let mut freed: Vec<&Admitted> = groups[..k].iter().flatten().copied().collect();
        freed.extend(chosen[k + 1..].iter().flatten().copied());
        let left = subtract(&needs, &freed);
        chosen[k] = by_distance(groups[k].clone(), left)?;
    }
    Some(chosen.into_iter().flatten().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, cpu: i64, mem: i64, qos: QosClass, priority: i32) -> Admitted {
        Admitted {
            uid: uid.into(),
            key: format!("default/{uid}"),
            requests: Demand {
                cpu_milli: cpu,
                memory: mem,
                ephemeral_storage: 0,
            },
            qos,
            priority,
            critical: false,
        }
    }

    fn alloc(cpu: i64, mem: i64, pods: i64) -> Amounts {
        Amounts {
            cpu_milli: cpu,
            memory: mem,
            ephemeral_storage: 1 << 40,
            pids: 1 << 20,
            pods,
        }
    }

    #[test]
    fn misfits_carry_the_kubelets_reason_and_message() {
        let others = vec![pod("a", 500, 100, QosClass::Burstable, 0)];
        let new = Demand {
            cpu_milli: 1200,
            memory: 50,
            ephemeral_storage: 0,
        };
        let m = fit(&new, &others, &alloc(1500, 1000, 110));
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].reason(), "OutOfcpu");
        assert_eq!(
            m[0].message(),
            "Node didn't have enough resource: cpu, requested: 1200, used: 500, capacity: 1500"
        );
        let m = fit(&Demand::default(), &others, &alloc(1500, 1000, 1));
        assert_eq!(m[0].reason(), "OutOfpods");
        assert_eq!(
            m[0].message(),
            "Node didn't have enough resource: pods, requested: 1, used: 1, capacity: 1"
        );
        let big = Demand {
            cpu_milli: 0,
            memory: 2000,
            ephemeral_storage: 0,
        };
        assert_eq!(
            fit(&big, &others, &alloc(1500, 1000, 110))[0].reason(),
            "OutOfmemory"
        );
        assert!(
            fit(&Demand::default(), &others, &alloc(0, 0, 2)).is_empty(),
            "nothing asked"
        );
    }

    #[test]
    fn preemption_takes_the_fewest_lowest_priority_pods() {
        let low_small = pod("low-small", 100, 100, QosClass::Burstable, 0);
        let low_big = pod("low-big", 100, 400, QosClass::Guaranteed, 0);
        let high = pod("high", 100, 600, QosClass::BestEffort, 100);
        let all = [&low_small, &low_big, &high];
        let need = |mem: i64| {
            vec![Insufficient {
                resource: "memory",
                requested: mem,
                used: 1100,
                capacity: 1100,
            }]
        };
        let uids = |v: Option<Vec<&Admitted>>| -> Vec<String> {
            let mut u: Vec<String> = v.expect("victims").iter().map(|p| p.uid.clone()).collect();
            u.sort();
            u
        };
        // 300 bytes: one low-priority pod covers it; the high one is spared even though it
        // alone would too, and BestEffort would be the kubelet's first pick.
        assert_eq!(uids(victims(&need(300), &all)), vec!["low-big"]);
        // 500: both low pods.
        assert_eq!(
            uids(victims(&need(500), &all)),
            vec!["low-big", "low-small"]
        );
        // 700: the low pods cannot; the high one must go, and then one low pod is enough.
        assert_eq!(uids(victims(&need(700), &all)), vec!["high", "low-small"]);
        assert!(victims(&need(5000), &all).is_none());
    }
}
