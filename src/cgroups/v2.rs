//! cgroup v2 (unified): `cpu.stat`, `memory.*`, `pids.current` and `*.pressure` in one directory per cgroup, and `cgroup.kill`.

use std::path::{Path, PathBuf};

use super::parse::{count_lines, read_flat, read_max, read_psi, read_u64};
use super::{Cgroups, Cpu, Memory, Pressure, Stats, Version};

/// Reads cgroup v2 counters below `root` (normally `/sys/fs/cgroup`).
#[derive(Debug, Clone)]
pub struct V2 {
    root: PathBuf,
}

impl V2 {
    /// A reader of the unified hierarchy mounted at `root`.
    pub fn new(root: &Path) -> Self {
        V2 {
            root: root.to_path_buf(),
        }
    }

    fn dir(&self, dir: &str) -> PathBuf {
        self.root.join(dir.trim_start_matches('/'))
    }

    fn cpu(d: &Path) -> Option<Cpu> {
        let stat = read_flat(&d.join("cpu.stat"))?;
        let ns = |k: &str| stat.get(k).map(|us| us * 1000);
        Some(Cpu {
            usage_ns: ns("usage_usec")?,
            user_ns: ns("user_usec"),
            system_ns: ns("system_usec"),
        })
    }

    fn memory(d: &Path) -> Option<Memory> {
        let usage_bytes = read_u64(&d.join("memory.current"))?;
        let stat = read_flat(&d.join("memory.stat")).unwrap_or_default();
        let get = |k: &str| stat.get(k).copied();
        let mut m = Memory {
            usage_bytes,
            working_set_bytes: 0,
            rss_bytes: get("anon"),
            cache_bytes: get("file"),
            mapped_file_bytes: get("file_mapped"),
            active_file_bytes: get("active_file"),
            inactive_file_bytes: get("inactive_file"),
            page_faults: get("pgfault"),
            major_page_faults: get("pgmajfault"),
            limit_bytes: read_max(&d.join("memory.max")).flatten(),
            swap_bytes: read_u64(&d.join("memory.swap.current")),
            swap_limit_bytes: read_max(&d.join("memory.swap.max")).flatten(),
        };
        m.derive_working_set();
        Some(m)
    }

    /// `pids.current`; without the pids controller enabled here, the threads of the cgroup
    /// itself (the same number for a container's leaf cgroup).
    fn pids(d: &Path) -> Option<u64> {
        read_u64(&d.join("pids.current")).or_else(|| count_lines(&d.join("cgroup.threads")))
    }
}

impl Cgroups for V2 {
    fn version(&self) -> Version {
        Version::V2
    }

    fn stats(&self, dir: &str) -> Stats {
        let d = self.dir(dir);
        Stats {
            cpu: Self::cpu(&d),
            memory: Self::memory(&d),
            pids: Self::pids(&d),
            pressure: Pressure {
                cpu: read_psi(&d.join("cpu.pressure")),
                memory: read_psi(&d.join("memory.pressure")),
                io: read_psi(&d.join("io.pressure")),
            },
        }
    }

    fn kill(&self, dir: &str) -> std::io::Result<bool> {
        use std::io::Write;
        // Never created: a kernel without the file (or a gone cgroup) answers NotFound.
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(self.dir(dir).join("cgroup.kill"));
        match file.and_then(|mut f| f.write_all(b"1")) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
            Err(e) => Err(e),
        }
    }
}
