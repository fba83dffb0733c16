//! Pod QoS class and a container's cgroup resources and oom_score_adj, with the kubelet's formulas.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use crate::config::quantity;
use crate::oci::Resources;

/// The kubelet's CFS period (µs).
pub const CPU_PERIOD: u64 = 100_000;
const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;
const MIN_QUOTA: i64 = 1000;
/// oom_score_adj of Guaranteed pods.
pub const GUARANTEED_OOM_SCORE_ADJ: i64 = -997;
/// oom_score_adj of BestEffort pods.
pub const BEST_EFFORT_OOM_SCORE_ADJ: i64 = 1000;

/// The pod's quality of service class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QosClass {
    Guaranteed,
    Burstable,
    BestEffort,
}

impl QosClass {
    pub fn as_str(self) -> &'static str {
        match self {
            QosClass::Guaranteed => "Guaranteed",
            QosClass::Burstable => "Burstable",
            QosClass::BestEffort => "BestEffort",
        }
    }
}

/// A container's cpu (cores) and memory (bytes) requests and limits; a request left out
/// defaults to the limit, as the API server defaults it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Amounts {
    pub cpu_request: Option<f64>,
    pub cpu_limit: Option<f64>,
    pub memory_request: Option<f64>,
    pub memory_limit: Option<f64>,
}

impl Amounts {
    pub fn of(r: Option<&ResourceRequirements>) -> Amounts {
        let get = |map: Option<
            &std::collections::BTreeMap<
                String,
                k8s_openapi::apimachinery::pkg::api::resource::Quantity,
            >,
        >,
                   k: &str| {
            map.and_then(|m| m.get(k))
                .and_then(|q| quantity::parse(&q.0))
        };
        let limits = r.and_then(|r| r.limits.as_ref());
        let requests = r.and_then(|r| r.requests.as_ref());
        let cpu_limit = get(limits, "cpu");
        let memory_limit = get(limits, "memory");
        Amounts {
            cpu_request: get(requests, "cpu").or(cpu_limit),
            cpu_limit,
            memory_request: get(requests, "memory").or(memory_limit),
            memory_limit,
        }
    }
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    })
}

/// The pod's QoS class: Guaranteed when every container has cpu and memory limits equal to
/// its requests, BestEffort when none has any, else Burstable.
pub fn qos_class(pod: &Pod) -> QosClass {
    let mut any = false;
    let mut guaranteed = true;
    for c in all_containers(pod) {
        let a = Amounts::of(c.resources.as_ref());
        let set = |v: Option<f64>| v.is_some_and(|v| v > 0.0);
        if set(a.cpu_request) || set(a.cpu_limit) || set(a.memory_request) || set(a.memory_limit) {
            any = true;
        }
        let equal = |req: Option<f64>, lim: Option<f64>| lim.is_some_and(|l| l > 0.0) && req == lim;
        if !(equal(a.cpu_request, a.cpu_limit) && equal(a.memory_request, a.memory_limit)) {
            guaranteed = false;
        }
    }
    match (any, guaranteed) {
        (false, _) => QosClass::BestEffort,
        (true, true) => QosClass::Guaranteed,
        (true, false) => QosClass::Burstable,
    }
}

/// cpu.shares for a request of `cores` (the kubelet's MilliCPUToShares).
pub fn cpu_shares(cores: Option<f64>) -> u64 {
    let milli = cores.map_or(0, |c| (c * 1000.0).ceil() as u64);
    if milli == 0 {
        return MIN_SHARES;
    }
    (milli * 1024 / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// The CFS quota for a limit of `cores` over [`CPU_PERIOD`] (the kubelet's MilliCPUToQuota).
pub fn cpu_quota(cores: f64) -> i64 {
    let milli = (cores * 1000.0).ceil() as i64;
    (milli * CPU_PERIOD as i64 / 1000).max(MIN_QUOTA)
}

/// The container's oom_score_adj (the kubelet's GetContainerOOMScoreAdjust) on a node with
/// `memory_capacity` bytes.
pub fn oom_score_adj(qos: QosClass, memory_request: Option<f64>, memory_capacity: u64) -> i64 {
    match qos {
        QosClass::Guaranteed => GUARANTEED_OOM_SCORE_ADJ,
        QosClass::BestEffort => BEST_EFFORT_OOM_SCORE_ADJ,
        QosClass::Burstable => {
            let req = memory_request.unwrap_or(0.0).max(0.0) as i128;
            let cap = memory_capacity.max(1) as i128;
            let adj = (1000 - 1000 * req / cap) as i64;
            if adj < 1000 + GUARANTEED_OOM_SCORE_ADJ {
                1000 + GUARANTEED_OOM_SCORE_ADJ
            } else if adj == BEST_EFFORT_OOM_SCORE_ADJ {
                adj - 1
            } else {
                adj
            }
        }
    }
}

/// The CRI resources of container `c` of a pod with class `qos` on a node with
/// `memory_capacity` bytes.
pub fn container_resources(c: &Container, qos: QosClass, memory_capacity: u64) -> Resources {
    let a = Amounts::of(c.resources.as_ref());
    Resources {
        cpu_period: Some(CPU_PERIOD),
        cpu_quota: a.cpu_limit.map(cpu_quota),
        cpu_shares: Some(cpu_shares(a.cpu_request)),
        memory_limit_in_bytes: a.memory_limit.map(|m| m as i64),
        oom_score_adj: Some(oom_score_adj(qos, a.memory_request, memory_capacity)),
        ..Resources::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &str) -> Pod {
        let y = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n{containers}"
        );
        super::super::manifest::parse("t", &y)
            .expect("parse")
            .remove(0)
    }

    #[test]
    fn qos_classes() {
        let be = pod("  - {name: a, image: i}\n");
        assert_eq!(qos_class(&be), QosClass::BestEffort);
        let g = pod("  - {name: a, image: i, resources: {limits: {cpu: 500m, memory: 64Mi}}}\n");
        assert_eq!(
            qos_class(&g),
            QosClass::Guaranteed,
            "requests default to limits"
        );
        let g2 = pod("  - {name: a, image: i, resources: {limits: {cpu: '1', memory: 1Gi}, requests: {cpu: 1000m, memory: 1Gi}}}\n");
        assert_eq!(qos_class(&g2), QosClass::Guaranteed);
        let b = pod("  - {name: a, image: i, resources: {requests: {memory: 64Mi}}}\n  - {name: b, image: i}\n");
        assert_eq!(qos_class(&b), QosClass::Burstable);
        let b2 = pod("  - {name: a, image: i, resources: {limits: {cpu: '1', memory: 1Gi}, requests: {cpu: 500m}}}\n");
        assert_eq!(qos_class(&b2), QosClass::Burstable);
    }

    #[test]
    fn cpu_formulas() {
        assert_eq!(cpu_shares(None), 2);
        assert_eq!(cpu_shares(Some(0.001)), 2);
        assert_eq!(cpu_shares(Some(0.1)), 102);
        assert_eq!(cpu_shares(Some(1.0)), 1024);
        assert_eq!(cpu_shares(Some(1000.0)), 262_144);
        assert_eq!(cpu_quota(0.5), 50_000);
        assert_eq!(cpu_quota(0.001), 1000);
        assert_eq!(cpu_quota(2.0), 200_000);
    }

    #[test]
    fn oom_score_adj_by_class() {
        let gib = 1u64 << 30;
        assert_eq!(oom_score_adj(QosClass::Guaranteed, None, gib), -997);
        assert_eq!(oom_score_adj(QosClass::BestEffort, None, gib), 1000);
        assert_eq!(
            oom_score_adj(QosClass::Burstable, Some((gib / 4) as f64), gib),
            750
        );
        assert_eq!(oom_score_adj(QosClass::Burstable, None, gib), 999);
        assert_eq!(oom_score_adj(QosClass::Burstable, Some(gib as f64), gib), 3);
    }

    #[test]
    fn container_resources_from_the_spec() {
        let p = pod("  - {name: a, image: i, resources: {requests: {cpu: 250m, memory: 256Mi}, limits: {cpu: 500m, memory: 512Mi}}}\n");
        let c = &p.spec.as_ref().expect("spec").containers[0];
        let r = container_resources(c, qos_class(&p), 1 << 30);
        assert_eq!(r.cpu_shares, Some(256));
        assert_eq!(r.cpu_quota, Some(50_000));
        assert_eq!(r.cpu_period, Some(100_000));
        assert_eq!(r.memory_limit_in_bytes, Some(512 << 20));
        assert_eq!(r.oom_score_adj, Some(750));
    }
}
