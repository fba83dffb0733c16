//! Node capacity (from the machine) and allocatable (capacity less reservations and the hard eviction thresholds), as the kubelet computes them.

use std::path::Path;

use crate::config::eviction::Signal;
use crate::config::node::{NodeConfig, Reserved};

/// Amounts of the node's resources: cpu in millicores, memory and ephemeral storage in bytes,
/// pids and pods as counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Amounts {
    pub cpu_milli: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub pids: i64,
    pub pods: i64,
}

impl Amounts {
    /// `self - other`, each part at least 0.
    pub fn minus(&self, other: &Amounts) -> Amounts {
        Amounts {
            cpu_milli: (self.cpu_milli - other.cpu_milli).max(0),
            memory: (self.memory - other.memory).max(0),
            ephemeral_storage: (self.ephemeral_storage - other.ephemeral_storage).max(0),
            pids: (self.pids - other.pids).max(0),
            pods: (self.pods - other.pods).max(0),
        }
    }

    /// `self + other`.
    pub fn plus(&self, other: &Amounts) -> Amounts {
        Amounts {
            cpu_milli: self.cpu_milli + other.cpu_milli,
            memory: self.memory + other.memory,
            ephemeral_storage: self.ephemeral_storage + other.ephemeral_storage,
            pids: self.pids + other.pids,
            pods: self.pods + other.pods,
        }
    }
}

/// What the machine has: online CPUs, MemTotal, the size of the filesystem holding `root`,
/// `pid_max` (bounded by `threads-max`), and `max_pods`.
pub fn machine(root: &Path, max_pods: u32) -> Amounts {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    let memory = meminfo("MemTotal").unwrap_or(0);
    let disk = rustix::fs::statvfs(root)
        .map(|s| (s.f_blocks * s.f_frsize) as i64)
        .unwrap_or(0);
    Amounts {
        cpu_milli: cpus * 1000,
        memory,
        ephemeral_storage: disk,
        pids: max_pids(),
        pods: i64::from(max_pods),
    }
}

/// A `/proc/meminfo` field in bytes.
pub fn meminfo(field: &str) -> Option<i64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    parse_meminfo(&text, field)
}

/// `field` of a meminfo text, in bytes.
pub fn parse_meminfo(text: &str, field: &str) -> Option<i64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(field)?.strip_prefix(':')?;
        let kib: i64 = rest.split_whitespace().next()?.parse().ok()?;
        Some(kib * 1024)
    })
}

/// The most process ids the kernel hands out: `pid_max`, or `threads-max` when lower.
pub fn max_pids() -> i64 {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
    };
    match (
        read("/proc/sys/kernel/pid_max"),
        read("/proc/sys/kernel/threads-max"),
    ) {
        (Some(a), Some(b)) => a.min(b),
        (Some(a), None) | (None, Some(a)) => a,
        (None, None) => 32768,
    }
}

impl From<Reserved> for Amounts {
    fn from(r: Reserved) -> Amounts {
        Amounts {
            cpu_milli: r.cpu_milli,
            memory: r.memory,
            ephemeral_storage: r.ephemeral_storage,
            pids: r.pids,
            pods: 0,
        }
    }
}

/// The node's capacity and what pods may have of it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Allocation {
    pub capacity: Amounts,
    /// system-reserved + kube-reserved.
    pub reserved: Amounts,
    /// The hard eviction thresholds' share (memory.available, nodefs.available).
    pub eviction: Amounts,
    /// capacity − reserved − eviction.
    pub allocatable: Amounts,
}

/// The kubelet's GetNodeAllocatableReservation: the reservations plus the hard
/// `memory.available` and `nodefs.available` thresholds, taken from capacity.
pub fn allocation(capacity: Amounts, cfg: &NodeConfig) -> Allocation {
    let reserved = Amounts::from(cfg.system_reserved).plus(&cfg.kube_reserved.into());
    let mut eviction = Amounts::default();
    for t in cfg.eviction.iter().filter(|t| t.is_hard()) {
        match t.signal {
            Signal::MemoryAvailable => {
                eviction.memory = t.value.of(capacity.memory as f64) as i64;
            }
            Signal::NodeFsAvailable => {
                eviction.ephemeral_storage = t.value.of(capacity.ephemeral_storage as f64) as i64;
            }
            _ => {}
        }
    }
    let allocatable = capacity.minus(&reserved).minus(&eviction);
    Allocation {
        capacity,
        reserved,
        eviction,
        allocatable,
    }
}

/// What the `kubepods` cgroup is limited to when allocatable is enforced: capacity less the
/// reservations (not the eviction thresholds: eviction acts before the limit does).
pub fn pods_cgroup_limit(a: &Allocation) -> Amounts {
    a.capacity.minus(&a.reserved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NodeKeys;

    #[test]
    fn allocatable_is_capacity_less_reservations_and_hard_thresholds() {
        let cap = Amounts {
            cpu_milli: 4000,
            memory: 8 << 30,
            ephemeral_storage: 100 << 30,
            pids: 4_194_304,
            pods: 110,
        };
        let mut keys = NodeKeys::default();
        keys.system_reserved.insert("cpu".into(), "500m".into());
        keys.system_reserved.insert("memory".into(), "1Gi".into());
        keys.kube_reserved.insert("memory".into(), "512Mi".into());
        keys.kube_reserved.insert("pid".into(), "1000".into());
        let cfg = keys.check().expect("[node]");
        let a = allocation(cap, &cfg);
        assert_eq!(a.allocatable.cpu_milli, 3500);
        assert_eq!(
            a.allocatable.memory,
            (8 << 30) - (1 << 30) - (512 << 20) - (100 << 20)
        );
        assert_eq!(a.allocatable.ephemeral_storage, (100 << 30) - (10 << 30));
        assert_eq!(a.allocatable.pids, 4_194_304 - 1000);
        assert_eq!(a.allocatable.pods, 110);
        assert_eq!(pods_cgroup_limit(&a).memory, (8 << 30) - (1536 << 20));
    }

    #[test]
    fn meminfo_fields_in_bytes() {
        let t = "MemTotal:       16318712 kB\nMemFree:         1024 kB\nInactive(file):  2048 kB\n";
        assert_eq!(parse_meminfo(t, "MemTotal"), Some(16318712 * 1024));
        assert_eq!(parse_meminfo(t, "Inactive(file)"), Some(2048 * 1024));
        assert_eq!(parse_meminfo(t, "Mem"), None);
    }
}
