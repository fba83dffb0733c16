//! `[node]`: the standalone node's reservations, eviction thresholds, pod cgroups and priority classes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use super::eviction::{self, Threshold};
use super::quantity;
use crate::cgroups::hierarchy::Name;
use crate::error::{Error, Result};

/// `[node]` as written: standalone node resources (issue 14), with the kubelet's names and
/// defaults. Quantities are Kubernetes quantity strings; signals and thresholds as the
/// kubelet's `evictionHard` map. [`NodeKeys::check`] parses them into a [`NodeConfig`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeKeys {
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

impl Default for NodeKeys {
    fn default() -> Self {
        NodeKeys {
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

/// `[node]` checked: every quantity, threshold and duration parsed, taken as it is by the
/// node (pod/node). Made by [`NodeKeys::check`] when the config is loaded, so a bad key stops
/// the daemon before it takes its lock; it serialises as the keys were written.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// `system_reserved`: resources kept for the OS.
    pub system_reserved: Reserved,
    /// `kube_reserved`: resources kept for the node's own daemons.
    pub kube_reserved: Reserved,
    /// Every eviction threshold: the hard ones (the kubelet's defaults unless
    /// `eviction_hard` is set), the soft ones with their grace, each with its minimum reclaim,
    /// and with allocatable enforced on pods, the `allocatableMemory.available` copy of the
    /// hard `memory.available`.
    pub eviction: Vec<Threshold>,
    /// `eviction_max_pod_grace_period`: the most grace a pod evicted for a soft threshold
    /// gets; `None` (0): its own.
    pub eviction_max_pod_grace_period: Option<Duration>,
    /// `eviction_pressure_transition_period`.
    pub eviction_pressure_transition_period: Duration,
    /// `housekeeping_interval` (at least 100 ms).
    pub housekeeping_interval: Duration,
    /// `max_pods`.
    pub max_pods: u32,
    /// `cgroup_root` as cgroup name components (`/a/b` and `a-b.slice`: `[a, b]`; `/`: `[]`).
    pub cgroup_root: Name,
    /// `cgroups_per_qos`.
    pub cgroups_per_qos: bool,
    /// `"pods"` is in `enforce_node_allocatable`: the `kubepods` cgroup is limited to
    /// allocatable (the only value acted on; others are accepted and ignored).
    pub enforce_pods_allocatable: bool,
    /// `pod_pids_limit`; negative: unlimited.
    pub pod_pids_limit: i64,
    /// `priority_class_dir`.
    pub priority_class_dir: PathBuf,
    /// The keys as written, for [`crate::config::Config::to_toml`].
    keys: NodeKeys,
}

/// What one reservation key (`system_reserved`, `kube_reserved`) keeps from pods.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reserved {
    /// `cpu`, in millicores.
    pub cpu_milli: i64,
    /// `memory`, in bytes.
    pub memory: i64,
    /// `ephemeral-storage`, in bytes.
    pub ephemeral_storage: i64,
    /// `pid`.
    pub pids: i64,
}

/// The shortest `housekeeping_interval` accepted.
const MIN_HOUSEKEEPING: Duration = Duration::from_millis(100);

impl NodeKeys {
    /// Parses and checks every key; an error names the key (`[node] kube_reserved.memory`)
    /// and what it may be. Needs nothing from the host.
    pub fn check(self) -> Result<NodeConfig> {
        let eviction = eviction::parse(&self)?;
        let system_reserved = reservation("system_reserved", &self.system_reserved)?;
        let kube_reserved = reservation("kube_reserved", &self.kube_reserved)?;
        let housekeeping_interval =
            eviction::duration("housekeeping_interval", &self.housekeeping_interval)?;
        if housekeeping_interval < MIN_HOUSEKEEPING {
            return Err(Error::invalid(
                "[node] housekeeping_interval: at least 100ms".to_string(),
            ));
        }
        let eviction_pressure_transition_period = eviction::duration(
            "eviction_pressure_transition_period",
            &self.eviction_pressure_transition_period,
        )?;
        let eviction_max_pod_grace_period = match u64::try_from(self.eviction_max_pod_grace_period)
        {
            Ok(0) => None,
            Ok(secs) => Some(Duration::from_secs(secs)),
            Err(_) => {
                return Err(Error::invalid(
                    "[node] eviction_max_pod_grace_period: must not be negative".to_string(),
                ))
            }
        };
        let cgroup_root = root_name(&self.cgroup_root)?;
        Ok(NodeConfig {
            system_reserved,
            kube_reserved,
            eviction,
            eviction_max_pod_grace_period,
            eviction_pressure_transition_period,
            housekeeping_interval,
            max_pods: self.max_pods,
            cgroup_root,
            cgroups_per_qos: self.cgroups_per_qos,
            enforce_pods_allocatable: self.enforces_pods_allocatable(),
            pod_pids_limit: self.pod_pids_limit,
            priority_class_dir: self.priority_class_dir.clone(),
            keys: self,
        })
    }

    /// Whether `enforce_node_allocatable` names `pods`.
    pub(super) fn enforces_pods_allocatable(&self) -> bool {
        self.enforce_node_allocatable.iter().any(|k| k == "pods")
    }
}

impl Default for NodeConfig {
    /// The defaults of every key, checked.
    fn default() -> Self {
        NodeKeys::default()
            .check()
            .expect("the default [node] keys are valid (unit-tested)")
    }
}

impl Serialize for NodeConfig {
    /// As the keys were written: `Status` verbose info shows the config as the user wrote it.
    fn serialize<S: Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        self.keys.serialize(s)
    }
}

/// A reservation map (`cpu`, `memory`, `ephemeral-storage`, `pid`), parsed.
fn reservation(field: &str, map: &BTreeMap<String, String>) -> Result<Reserved> {
    let mut a = Reserved::default();
    for (k, v) in map {
        let q = quantity::parse(v).filter(|q| *q >= 0.0).ok_or_else(|| {
            Error::invalid(format!(
                "[node] {field}.{k}: {:?} is not a non-negative quantity",
                crate::error::echo(v)
            ))
        })?;
        match k.as_str() {
            "cpu" => a.cpu_milli = (q * 1000.0).ceil() as i64,
            "memory" => a.memory = q.ceil() as i64,
            "ephemeral-storage" => a.ephemeral_storage = q.ceil() as i64,
            "pid" => a.pids = q.ceil() as i64,
            other => {
                return Err(Error::invalid(format!(
                    "[node] {field}: unknown resource {:?} (cpu, memory, ephemeral-storage, pid)",
                    crate::error::echo(other)
                )))
            }
        }
    }
    Ok(a)
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

    #[test]
    fn bad_reservations_name_the_key() {
        let m = BTreeMap::from([("gpu".to_string(), "1".to_string())]);
        let e = reservation("system_reserved", &m).expect_err("gpu");
        assert!(e.to_string().contains("unknown resource \"gpu\""), "{e}");
        let m = BTreeMap::from([("memory".to_string(), "-1Gi".to_string())]);
        let e = reservation("kube_reserved", &m).expect_err("negative");
        assert!(e.to_string().contains("[node] kube_reserved.memory"), "{e}");
    }
}
