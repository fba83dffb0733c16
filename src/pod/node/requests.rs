//! A pod's requests and limits as the kubelet sums them (sidecars, init containers, overhead) and the pod cgroup's values derived from them.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};

use crate::config::quantity;
use crate::pod::resources::{self, QosClass};

/// cpu (millicores), memory and ephemeral storage (bytes) of a pod or container.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Demand {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
}

impl Demand {
    fn add(&mut self, o: &Demand) {
        self.cpu_milli += o.cpu_milli;
        self.memory += o.memory;
        self.ephemeral_storage += o.ephemeral_storage;
    }
    fn max(&mut self, o: &Demand) {
        self.cpu_milli = self.cpu_milli.max(o.cpu_milli);
        self.memory = self.memory.max(o.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(o.ephemeral_storage);
    }
    /// Whether nothing is asked for.
    pub fn is_zero(&self) -> bool {
        *self == Demand::default()
    }
}

fn get(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
    key: &str,
) -> Option<f64> {
    map.and_then(|m| m.get(key))
        .and_then(|q| quantity::parse(&q.0))
}

fn demand(
    map: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> Demand {
    Demand {
        cpu_milli: get(map, "cpu").map_or(0, |c| (c * 1000.0).ceil() as i64),
        memory: get(map, "memory").map_or(0, |m| m.ceil() as i64),
        ephemeral_storage: get(map, "ephemeral-storage").map_or(0, |m| m.ceil() as i64),
    }
}

/// A container's requests (a request left out defaults to its limit, as the API server sets it).
pub fn container_requests(r: Option<&ResourceRequirements>) -> Demand {
    let limits = demand(r.and_then(|r| r.limits.as_ref()));
    let req = r.and_then(|r| r.requests.as_ref());
    let mut d = demand(req);
    let has = |k: &str| req.is_some_and(|m| m.contains_key(k));
    if !has("cpu") {
        d.cpu_milli = limits.cpu_milli;
    }
    if !has("memory") {
        d.memory = limits.memory;
    }
    if !has("ephemeral-storage") {
        d.ephemeral_storage = limits.ephemeral_storage;
    }
    d
}

/// A container's limits.
pub fn container_limits(r: Option<&ResourceRequirements>) -> Demand {
    demand(r.and_then(|r| r.limits.as_ref()))
}

/// The kubelet's PodRequests/PodLimits fold: app containers and sidecars add up, each regular
/// init container needs its own amount plus the sidecars started before it, the pod needs the
/// larger of the two, plus `overhead`.
fn fold(pod: &Pod, of: fn(Option<&ResourceRequirements>) -> Demand) -> Demand {
    let Some(spec) = pod.spec.as_ref() else {
        return Demand::default();
    };
    let mut total = Demand::default();
    for c in &spec.containers {
        total.add(&of(c.resources.as_ref()));
    }
    let mut sidecars = Demand::default();
    let mut init = Demand::default();
    for c in spec.init_containers.iter().flatten() {
        let d = of(c.resources.as_ref());
        let need = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&d);
            sidecars.add(&d);
            sidecars
        } else {
            let mut n = sidecars;
            n.add(&d);
            n
        };
        init.max(&need);
    }
    total.max(&init);
    if let Some(o) = spec.overhead.as_ref() {
        total.add(&demand(Some(o)));
    }
    total
}

/// What the pod asks of the node (admission, ranking).
pub fn pod_requests(pod: &Pod) -> Demand {
    fold(pod, container_requests)
}

/// The pod's limits (zero parts: unlimited in some container).
pub fn pod_limits(pod: &Pod) -> Demand {
    fold(pod, container_limits)
}

fn all_containers(pod: &Pod) -> impl Iterator<Item = &Container> {
    pod.spec.iter().flat_map(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
    })
}

/// The pod cgroup's values (the kubelet's ResourceConfigForPod).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PodCgroup {
    pub qos: QosClass,
    /// cpu.shares (v1; converted to cpu.weight on v2).
    pub cpu_shares: u64,
    /// CFS quota in µs per [`resources::CPU_PERIOD`]; `None`: unlimited.
    pub cpu_quota: Option<i64>,
    /// Memory limit in bytes; `None`: unlimited.
    pub memory_limit: Option<i64>,
    /// pids.max; `None`: unlimited.
    pub pids_limit: Option<i64>,
}

/// The pod cgroup of `pod`: shares from requests, and for Guaranteed pods (and Burstable ones
/// whose every container declares the limit) the CFS quota and memory limit from limits.
/// BestEffort pods get the minimum shares. `pids_limit` < 0: unlimited.
pub fn pod_cgroup(pod: &Pod, pids_limit: i64) -> PodCgroup {
    let qos = resources::qos_class(pod);
    let req = pod_requests(pod);
    let lim = pod_limits(pod);
    let mut cpu_declared = true;
    let mut mem_declared = true;
    for c in all_containers(pod) {
        let l = container_limits(c.resources.as_ref());
        cpu_declared &= l.cpu_milli > 0;
        mem_declared &= l.memory > 0;
    }
    let shares = resources::cpu_shares(Some(req.cpu_milli as f64 / 1000.0));
    let quota = (lim.cpu_milli > 0).then(|| resources::cpu_quota(lim.cpu_milli as f64 / 1000.0));
    let pids_limit = (pids_limit >= 0).then_some(pids_limit);
    match qos {
        QosClass::Guaranteed => PodCgroup {
            qos,
            cpu_shares: shares,
            cpu_quota: quota,
            memory_limit: Some(lim.memory),
            pids_limit,
        },
        QosClass::Burstable => PodCgroup {
            qos,
            cpu_shares: shares,
            cpu_quota: quota.filter(|_| cpu_declared),
            memory_limit: mem_declared.then_some(lim.memory),
            pids_limit,
        },
        QosClass::BestEffort => PodCgroup {
            qos,
            cpu_shares: 2,
            cpu_quota: None,
            memory_limit: None,
            pids_limit,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let y = format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n{spec}");
        crate::pod::manifest::parse("t", &y)
            .expect("parse")
            .remove(0)
    }

    #[test]
    fn sidecars_add_and_init_containers_take_the_max() {
        let p = pod(concat!(
            "  initContainers:\n",
            "  - {name: i1, image: i, resources: {requests: {cpu: '2', memory: 100Mi}}}\n",
            "  - {name: s1, image: i, restartPolicy: Always, resources: {requests: {cpu: 100m, memory: 10Mi}}}\n",
            "  - {name: i2, image: i, resources: {requests: {cpu: 500m, memory: 300Mi}}}\n",
            "  containers:\n",
            "  - {name: a, image: i, resources: {requests: {cpu: 250m, memory: 64Mi}}}\n",
            "  - {name: b, image: i, resources: {limits: {cpu: 250m, memory: 64Mi}}}\n",
        ));
        let r = pod_requests(&p);
        // apps 500m + sidecar 100m = 600m < init i1 2000m.
        assert_eq!(r.cpu_milli, 2000);
        // apps 128Mi + sidecar 10Mi < i2 (300Mi + the sidecar before it, 10Mi).
        assert_eq!(r.memory, 310 << 20);
    }

    #[test]
    fn pod_cgroup_values_by_qos() {
        let g = pod("  containers:\n  - {name: a, image: i, resources: {limits: {cpu: 500m, memory: 128Mi}}}\n  - {name: b, image: i, resources: {limits: {cpu: 250m, memory: 64Mi}}}\n");
        let c = pod_cgroup(&g, -1);
        assert_eq!(c.qos, QosClass::Guaranteed);
        assert_eq!(c.cpu_shares, 768);
        assert_eq!(c.cpu_quota, Some(75_000));
        assert_eq!(c.memory_limit, Some(192 << 20));
        assert_eq!(c.pids_limit, None);
        let b = pod("  containers:\n  - {name: a, image: i, resources: {requests: {cpu: 100m}, limits: {memory: 128Mi}}}\n  - {name: b, image: i, resources: {requests: {memory: 64Mi}}}\n");
        let c = pod_cgroup(&b, 1024);
        assert_eq!(c.qos, QosClass::Burstable);
        assert_eq!(c.cpu_shares, 102);
        assert_eq!(c.cpu_quota, None, "not every container has a cpu limit");
        assert_eq!(c.memory_limit, None, "b has no memory limit");
        assert_eq!(c.pids_limit, Some(1024));
        let be = pod("  containers:\n  - {name: a, image: i}\n");
        let c = pod_cgroup(&be, -1);
        assert_eq!(
            (c.qos, c.cpu_shares, c.cpu_quota, c.memory_limit),
            (QosClass::BestEffort, 2, None, None)
        );
    }
}
