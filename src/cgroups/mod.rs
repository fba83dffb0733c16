//! cgroup v1 and v2 behind one trait: the CPU, memory and pid counters of a container or pod cgroup, and killing a cgroup at once where v2 can.
//!
//! Which hierarchy the host uses is detected once ([`detect`]): v2 when `/sys/fs/cgroup` is a
//! cgroup2 filesystem (unified), else v1 (legacy or hybrid). Readers never fail: a file that is
//! missing or unreadable (the container just exited, a controller is not mounted) leaves its
//! part of [`Stats`] empty, so a caller always gets whatever could be read.

mod driver;
pub mod hierarchy;
mod parse;
pub mod path;
mod v1;
mod v2;
pub mod warm;

#[cfg(test)]
mod v1_tests;
#[cfg(test)]
mod v2_tests;

use std::path::Path;
use std::sync::Arc;

pub use driver::CgroupDriver;
pub use path::{container_dir, parent_dir};
pub use v1::V1;
pub use v2::V2;

/// cgroup2's filesystem magic (`statfs(2)`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// Which cgroup hierarchy a reader serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Legacy per-controller hierarchies (`/sys/fs/cgroup/<controller>/…`).
    V1,
    /// The unified hierarchy.
    V2,
}

/// CPU time of a cgroup and its descendants.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cpu {
    /// Total CPU time in nanoseconds (v1 `cpuacct.usage`; v2 `cpu.stat usage_usec` × 1000).
    pub usage_ns: u64,
    /// User time in nanoseconds, when known.
    pub user_ns: Option<u64>,
    /// System time in nanoseconds, when known.
    pub system_ns: Option<u64>,
}

/// Memory of a cgroup and its descendants, as cadvisor (and so the kubelet) computes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Memory {
    /// v1 `memory.usage_in_bytes`; v2 `memory.current`.
    pub usage_bytes: u64,
    /// Usage less inactive file pages (0 when those exceed the usage): what eviction looks at.
    pub working_set_bytes: u64,
    /// Anonymous memory: v1 `total_rss`; v2 `anon`.
    pub rss_bytes: Option<u64>,
    /// Page cache: v1 `total_cache`; v2 `file`.
    pub cache_bytes: Option<u64>,
    /// Mapped files: v1 `total_mapped_file`; v2 `file_mapped`.
    pub mapped_file_bytes: Option<u64>,
    /// v1 `total_active_file`; v2 `active_file`.
    pub active_file_bytes: Option<u64>,
    /// v1 `total_inactive_file`; v2 `inactive_file`.
    pub inactive_file_bytes: Option<u64>,
    /// v1 `total_pgfault`; v2 `pgfault`.
    pub page_faults: Option<u64>,
    /// v1 `total_pgmajfault`; v2 `pgmajfault`.
    pub major_page_faults: Option<u64>,
    /// The memory limit; `None` when unlimited.
    pub limit_bytes: Option<u64>,
    /// Swap in use (v1 `memory.memsw.usage_in_bytes` less usage; v2 `memory.swap.current`).
    pub swap_bytes: Option<u64>,
    /// The swap limit when one is set (v2 `memory.swap.max`).
    pub swap_limit_bytes: Option<u64>,
}

impl Memory {
    /// Limit less working set, when a limit is set (cadvisor's and containerd's AvailableBytes).
    pub fn available_bytes(&self) -> Option<u64> {
        self.limit_bytes
            .map(|l| l.saturating_sub(self.working_set_bytes))
    }

    /// Swap still available under the swap limit, when one is set.
    pub fn swap_available_bytes(&self) -> Option<u64> {
        self.swap_limit_bytes
            .map(|l| l.saturating_sub(self.swap_bytes.unwrap_or(0)))
    }

    /// Fills the working set from the usage and inactive file pages.
    fn derive_working_set(&mut self) {
        let inactive = self.inactive_file_bytes.unwrap_or(0);
        self.working_set_bytes = self.usage_bytes.saturating_sub(inactive);
    }
}

/// One line of a pressure file: share of time stalled, and the total stall time.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PsiData {
    /// Total stall time in microseconds.
    pub total_us: u64,
    /// Percent of the last 10 s stalled.
    pub avg10: f64,
    /// Percent of the last 60 s stalled.
    pub avg60: f64,
    /// Percent of the last 300 s stalled.
    pub avg300: f64,
}

/// Pressure stall information of one resource (cgroup v2 `*.pressure`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Psi {
    /// Some tasks stalled.
    pub some: PsiData,
    /// All tasks stalled (absent for CPU on older kernels).
    pub full: Option<PsiData>,
}

/// Pressure of a cgroup's resources (cgroup v2 only).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Pressure {
    /// `cpu.pressure`.
    pub cpu: Option<Psi>,
    /// `memory.pressure`.
    pub memory: Option<Psi>,
    /// `io.pressure`.
    pub io: Option<Psi>,
}

/// What could be read from one cgroup; `None` parts could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    /// CPU time.
    pub cpu: Option<Cpu>,
    /// Memory.
    pub memory: Option<Memory>,
    /// Tasks in the cgroup (`pids.current`: processes and their threads, as containerd reports).
    pub pids: Option<u64>,
    /// Pressure stall information (v2; not summed for pods without a cgroup of their own).
    pub pressure: Pressure,
}

impl Stats {
    /// Whether nothing at all could be read (the cgroup does not exist).
    pub fn is_empty(&self) -> bool {
        self.cpu.is_none() && self.memory.is_none() && self.pids.is_none()
    }

    /// Adds `other` into `self`, part by part (a pod's totals from its containers). Limits do
    /// not add up and are dropped.
    pub fn add(&mut self, other: &Stats) {
        if let Some(c) = &other.cpu {
            let mine = self.cpu.get_or_insert_with(Cpu::default);
            mine.usage_ns += c.usage_ns;
            mine.user_ns = sum(mine.user_ns, c.user_ns);
            mine.system_ns = sum(mine.system_ns, c.system_ns);
        }
        if let Some(m) = &other.memory {
            let mine = self.memory.get_or_insert_with(Memory::default);
            mine.usage_bytes += m.usage_bytes;
            mine.working_set_bytes += m.working_set_bytes;
            mine.rss_bytes = sum(mine.rss_bytes, m.rss_bytes);
            mine.cache_bytes = sum(mine.cache_bytes, m.cache_bytes);
            mine.mapped_file_bytes = sum(mine.mapped_file_bytes, m.mapped_file_bytes);
            mine.active_file_bytes = sum(mine.active_file_bytes, m.active_file_bytes);
            mine.inactive_file_bytes = sum(mine.inactive_file_bytes, m.inactive_file_bytes);
            mine.page_faults = sum(mine.page_faults, m.page_faults);
            mine.major_page_faults = sum(mine.major_page_faults, m.major_page_faults);
            mine.swap_bytes = sum(mine.swap_bytes, m.swap_bytes);
            mine.limit_bytes = None;
            mine.swap_limit_bytes = None;
        }
        if let Some(p) = other.pids {
            self.pids = Some(self.pids.unwrap_or(0) + p);
        }
    }
}

fn sum(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (None, None) => None,
        (a, b) => Some(a.unwrap_or(0) + b.unwrap_or(0)),
    }
}

/// Reads the counters of cgroups on one hierarchy.
pub trait Cgroups: Send + Sync + std::fmt::Debug {
    /// The hierarchy this reader serves.
    fn version(&self) -> Version;
    /// The counters of the cgroup at `dir` (relative to the hierarchy root, `/`-separated, as
    /// [`container_dir`] and [`parent_dir`] give it). Never fails; unreadable parts are `None`.
    fn stats(&self, dir: &str) -> Stats;

    /// SIGKILLs every process of the cgroup at `dir` and of its descendants with one write to
    /// v2's `cgroup.kill` (Linux 5.14): no pid list to walk, no race with forks. `Ok(false)`
    /// when this hierarchy has no such file (v1, an older kernel, or no cgroup at `dir`): the
    /// caller signals the processes itself.
    fn kill(&self, dir: &str) -> std::io::Result<bool>;
}

/// The reader for this host's hierarchy under `/sys/fs/cgroup`.
pub fn detect() -> Arc<dyn Cgroups> {
    detect_at(Path::new("/sys/fs/cgroup"))
}

/// The reader for the hierarchy mounted at `root`: v2 when `root` is a cgroup2 filesystem.
pub fn detect_at(root: &Path) -> Arc<dyn Cgroups> {
    let unified = rustix::fs::statfs(root)
        .map(|s| s.f_type as u64 == CGROUP2_SUPER_MAGIC)
        .unwrap_or(false);
    if unified {
        Arc::new(V2::new(root))
    } else {
        Arc::new(V1::new(root))
    }
}
