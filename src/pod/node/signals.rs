//! Where the eviction signals come from: the host (memory, the pods' cgroup, filesystems, pids) behind a trait, so tests can inject readings.

use std::path::PathBuf;
use std::sync::Arc;

use super::capacity::{max_pids, meminfo};
use super::eviction::{Observation, Observations};
use crate::cgroups::Cgroups;
use crate::config::eviction::Signal;

/// Reads every signal it can.
pub trait Source: Send + Sync {
    /// One reading of each signal that could be read now.
    fn observe(&self) -> Observations;
}

/// The `kubepods` cgroup when allocatable is enforced on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodsCgroup {
    /// Its directory, as the stats readers take it.
    pub dir: String,
    /// The memory it may use (bytes): the allocatableMemory.available signal's capacity.
    pub memory: i64,
    /// Its `pids.max` when a `pid` reservation limits it; `None`: only the host's pids count.
    pub pids: Option<i64>,
}

/// The host's readings, as the kubelet's summary gives them.
pub struct Host {
    /// The cgroup reader (root and `kubepods` memory).
    pub cgroups: Arc<dyn Cgroups>,
    /// `kubepods` (allocatable enforcement); `None`: no pod cgroups, no allocatable signal.
    pub pods: Option<PodsCgroup>,
    /// A path on the node filesystem (bosun's root).
    pub nodefs: PathBuf,
    /// A path on the image filesystem (the image store).
    pub imagefs: PathBuf,
    /// MemTotal.
    pub memory_capacity: i64,
}

fn fs(path: &std::path::Path, out: &mut Observations, bytes: Signal, inodes: Signal) {
    let Ok(s) = rustix::fs::statvfs(path) else {
        return;
    };
    out.insert(
        bytes,
        Observation {
            available: (s.f_bavail * s.f_frsize) as f64,
            capacity: (s.f_blocks * s.f_frsize) as f64,
        },
    );
    if s.f_files > 0 {
        out.insert(
            inodes,
            Observation {
                available: s.f_favail as f64,
                capacity: s.f_files as f64,
            },
        );
    }
}

/// Tasks (processes and threads) on the host: sysinfo's `procs`, as the kubelet counts them.
pub fn running_tasks() -> Option<i64> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    // "0.00 0.01 0.05 2/345 6789": runnable/total scheduling entities.
    let field = text.split_whitespace().nth(3)?;
    field.split('/').nth(1)?.parse().ok()
}

/// pid.available: the scarcer of the host's (`pid_max` − tasks) and kubepods' (`pids.max` −
/// `pids.current`) readings.
fn pid_available(host: Option<Observation>, pods: Option<Observation>) -> Option<Observation> {
    match (host, pods) {
        (Some(h), Some(p)) if p.available < h.available => Some(p),
        (Some(h), _) => Some(h),
        (None, p) => p,
    }
}

impl Source for Host {
    fn observe(&self) -> Observations {
        let mut out = Observations::new();
        // memory.available = capacity − working set of everything (the root cgroup on v1,
        // /proc/meminfo where the root cgroup has no memory files).
        let ws = match self.cgroups.stats("/").memory {
            Some(m) if m.usage_bytes > 0 => Some(m.working_set_bytes as i64),
            _ => match (meminfo("MemFree"), meminfo("Inactive(file)")) {
                (Some(free), Some(inactive)) => {
                    Some((self.memory_capacity - free - inactive).max(0))
                }
                _ => None,
            },
        };
        if let Some(ws) = ws {
            out.insert(
                Signal::MemoryAvailable,
                Observation {
                    available: (self.memory_capacity - ws) as f64,
                    capacity: self.memory_capacity as f64,
                },
            );
        }
        let pods_stats = self.pods.as_ref().map(|p| (p, self.cgroups.stats(&p.dir)));
        if let Some((p, Some(m))) = pods_stats.as_ref().map(|(p, s)| (p, s.memory.as_ref())) {
            out.insert(
                Signal::AllocatableMemoryAvailable,
                Observation {
                    available: (p.memory - m.working_set_bytes as i64) as f64,
                    capacity: p.memory as f64,
                },
            );
        }
        fs(
            &self.nodefs,
            &mut out,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
        );
        fs(
            &self.imagefs,
            &mut out,
            Signal::ImageFsAvailable,
            Signal::ImageFsInodesFree,
        );
        let host = running_tasks().map(|tasks| {
            let max = max_pids();
            Observation {
                available: (max - tasks) as f64,
                capacity: max as f64,
            }
        });
        // With a `pid` reservation kubepods has a pids.max of its own: its pods run out there
        // first, whatever the host has left (and other workloads' processes do not count).
        let pods = pods_stats.and_then(|(p, s)| {
            let max = p.pids?;
            Some(Observation {
                available: (max - s.pids? as i64) as f64,
                capacity: max as f64,
            })
        });
        if let Some(o) = pid_available(host, pods) {
            out.insert(Signal::PidAvailable, o);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_has_every_signal_here() {
        let tmp = tempfile::tempdir().expect("tmp");
        let h = Host {
            cgroups: crate::cgroups::detect(),
            pods: None,
            nodefs: tmp.path().to_path_buf(),
            imagefs: tmp.path().to_path_buf(),
            memory_capacity: meminfo("MemTotal").unwrap_or(1 << 30),
        };
        let o = h.observe();
        for s in [
            Signal::MemoryAvailable,
            Signal::NodeFsAvailable,
            Signal::NodeFsInodesFree,
            Signal::ImageFsAvailable,
            Signal::PidAvailable,
        ] {
            let v = o.get(&s).unwrap_or_else(|| panic!("{s:?} missing"));
            assert!(
                v.available > 0.0 && v.available <= v.capacity,
                "{s:?}: {v:?}"
            );
        }
        assert!(running_tasks().is_some_and(|t| t > 1));
    }

    #[test]
    fn pid_available_is_the_scarcer_of_host_and_kubepods() {
        let o = |available, capacity| Observation {
            available,
            capacity,
        };
        let host = o(4_000_000.0, 4_194_304.0);
        let pods = o(90.0, 400.0);
        assert_eq!(pid_available(Some(host), Some(pods)), Some(pods));
        assert_eq!(pid_available(Some(host), None), Some(host));
        assert_eq!(pid_available(None, Some(pods)), Some(pods));
        let tight = o(10.0, 4_194_304.0);
        assert_eq!(pid_available(Some(tight), Some(pods)), Some(tight));
    }
}
