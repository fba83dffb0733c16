//! cgroup v1 (legacy/hybrid): `cpuacct`, `memory` and `pids` hierarchies under one root.

use std::path::{Path, PathBuf};

use super::parse::{count_lines, read_flat, read_u64};
use super::{Cgroups, Cpu, Memory, Stats, Version};

/// `cpuacct.stat` counts in USER_HZ ticks, 100 per second on every Linux ABI bosun runs on.
const USER_HZ: u64 = 100;
/// v1 reports "no limit" as a huge page-aligned number (PAGE_COUNTER_MAX × page size); any
/// limit at or above this is treated as none.
const UNLIMITED: u64 = 1 << 62;

/// Reads cgroup v1 counters below `root` (normally `/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub struct V1 {
    root: PathBuf,
}

impl V1 {
    /// A reader of the controllers mounted under `root`.
    pub fn new(root: &Path) -> Self {
        V1 {
            root: root.to_path_buf(),
        }
    }

    /// The directory of cgroup `dir` in `controller`'s hierarchy (`cpuacct` may be mounted
    /// only as the combined `cpu,cpuacct`).
    fn dir(&self, controller: &str, dir: &str) -> PathBuf {
        let mut base = self.root.join(controller);
        if !base.exists() && controller == "cpuacct" {
            base = self.root.join("cpu,cpuacct");
        }
        base.join(dir.trim_start_matches('/'))
    }

    fn cpu(&self, dir: &str) -> Option<Cpu> {
        let d = self.dir("cpuacct", dir);
        let usage_ns = read_u64(&d.join("cpuacct.usage"))?;
        let stat = read_flat(&d.join("cpuacct.stat")).unwrap_or_default();
        let ns = |k: &str| stat.get(k).map(|t| t * (1_000_000_000 / USER_HZ));
        Some(Cpu {
            usage_ns,
            user_ns: ns("user"),
            system_ns: ns("system"),
        })
    }

    fn memory(&self, dir: &str) -> Option<Memory> {
        let d = self.dir("memory", dir);
        let usage_bytes = read_u64(&d.join("memory.usage_in_bytes"))?;
        let stat = read_flat(&d.join("memory.stat")).unwrap_or_default();
        let get = |k: &str| stat.get(k).copied();
        let limit = read_u64(&d.join("memory.limit_in_bytes")).filter(|l| *l < UNLIMITED);
        let swap = read_u64(&d.join("memory.memsw.usage_in_bytes"))
            .map(|memsw| memsw.saturating_sub(usage_bytes));
        let mut m = Memory {
            usage_bytes,
            working_set_bytes: 0,
            rss_bytes: get("total_rss"),
            cache_bytes: get("total_cache"),
            mapped_file_bytes: get("total_mapped_file"),
            active_file_bytes: get("total_active_file"),
            inactive_file_bytes: get("total_inactive_file"),
            page_faults: get("total_pgfault"),
            major_page_faults: get("total_pgmajfault"),
            limit_bytes: limit,
            swap_bytes: swap,
            swap_limit_bytes: None,
        };
        m.derive_working_set();
        Some(m)
    }

    /// `pids.current`; without the pids controller, the tasks of the cgroup itself (the same
    /// number for a container's leaf cgroup).
    fn pids(&self, dir: &str) -> Option<u64> {
        read_u64(&self.dir("pids", dir).join("pids.current"))
            .or_else(|| count_lines(&self.dir("cpuacct", dir).join("tasks")))
    }
}

impl Cgroups for V1 {
    fn version(&self) -> Version {
        Version::V1
    }

    fn stats(&self, dir: &str) -> Stats {
        Stats {
            cpu: self.cpu(dir),
            memory: self.memory(dir),
            pids: self.pids(dir),
            pressure: Default::default(),
        }
    }

    /// v1 has no `cgroup.kill`.
    fn kill(&self, _dir: &str) -> std::io::Result<bool> {
        Ok(false)
    }
}
