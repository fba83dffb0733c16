//! `[node]`: the standalone node's reservations, eviction thresholds, pod cgroups and priority classes.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::cgroups::hierarchy::Name;
use crate::error::{Error, Result};

/// Standalone node resources (issue 14): reservations, eviction thresholds, the pod cgroup
/// hierarchy and priority classes, with the kubelet's names and defaults. Quantities are
/// Kubernetes quantity strings; signals and thresholds as the kubelet's `evictionHard` map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Resources kept for the OS (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    pub system_reserved: BTreeMap<String, String>,
    /// Resources kept for the node's own daemons (the same keys).
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal (`memory.available = "100Mi"`, `nodefs.available =
    /// "10%"`); the kubelet's defaults when left out. An empty map turns them all off.
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal; each needs a grace in `eviction_soft_grace_period`.
    pub eviction_soft: BTreeMap<String, String>,
    /// How long a soft threshold must hold before pods are evicted (`"1m30s"`).
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// The most grace (seconds) a pod evicted for a soft threshold gets; 0: its own.
    pub eviction_max_pod_grace_period: i64,
    /// What each eviction must reclaim beyond its threshold, by signal (`"500Mi"`, `"5%"`).
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// How long a pressure condition stays True after its threshold last held (`"5m"`).
    pub eviction_pressure_transition_period: String,
    /// How often node signals are read (the kubelet's housekeeping interval, `"10s"`).
    pub housekeeping_interval: String,
    /// Most pods this node runs at once (the kubelet's maxPods).
    pub max_pods: u32,
    /// Where the `kubepods` hierarchy goes: a cgroupfs path (`/bosun`: `/bosun/kubepods`; `/`:
    /// `/kubepods`, the kubelet's) or a systemd slice (`/bosun`: `bosun-kubepods.slice`). Not
    /// `/` by default: a kubelet using bosun over CRI on the same node owns `/kubepods`.
    pub cgroup_root: String,
    /// Put supervised pods in per-QoS and per-pod cgroups (the kubelet's cgroupsPerQOS).
    pub cgroups_per_qos: bool,
    /// Enforce allocatable on the `kubepods` cgroup (`["pods"]`, the kubelet's default; `[]`: off).
    pub enforce_node_allocatable: Vec<String>,
    /// Most processes per pod (`pids.max` of the pod cgroup); -1: unlimited.
    pub pod_pids_limit: i64,
    /// PriorityClass manifests (YAML/JSON, `kind: PriorityClass`), read when pods are applied.
    pub priority_class_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            eviction_hard: None,
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            eviction_pressure_transition_period: "5m".to_string(),
            housekeeping_interval: "10s".to_string(),
            max_pods: 110,
            cgroup_root: "/bosun".to_string(),
            cgroups_per_qos: true,
            enforce_node_allocatable: vec!["pods".to_string()],
            pod_pids_limit: -1,
            priority_class_dir: PathBuf::from("/etc/bosun/priorityclasses"),
        }
    }
}

/// A cgroup root of `[node] cgroup_root` as components: `/a/b` → `[a, b]`, a systemd slice
/// `a-b.slice` → `[a, b]`, `/` → `[]`.
pub fn root_name(root: &str) -> Result<Name> {
    let t = root.trim();
    if t == "/" || t.is_empty() || t == "-.slice" {
        return Ok(Vec::new());
    }
    if let Some(base) = t.rsplit('/').next().and_then(|b| b.strip_suffix(".slice")) {
        return Ok(base.split('-').map(str::to_string).collect());
    }
    if !t.starts_with('/') || t.split('/').any(|c| c == ".." || c == ".") {
        return Err(Error::invalid(format!(
            "[node] cgroup_root: {:?} must be an absolute cgroup path or a systemd slice",
            crate::error::echo(t)
        )));
    }
    Ok(t.split('/')
        .filter(|c| !c.is_empty())
        .map(str::to_string)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_by_driver() {
        assert_eq!(root_name("/").expect("root"), Vec::<String>::new());
        assert_eq!(root_name("/bosun-it-x").expect("path"), vec!["bosun-it-x"]);
        assert_eq!(root_name("/a/b/").expect("path"), vec!["a", "b"]);
        assert_eq!(
            root_name("test-node.slice").expect("slice"),
            vec!["test", "node"]
        );
        assert!(root_name("relative").is_err());
        assert!(root_name("/a/../b").is_err());
    }
}
