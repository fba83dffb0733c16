//! The cgroup side of tests: the driver test daemons use, where their pod and container cgroups are, and cgroup files on v1 or v2.
//!
//! `BOSUN_TEST_CGROUP_DRIVER=systemd` runs every test daemon with the systemd cgroup driver
//! (the VM lane does, on a systemd + cgroup v2 guest); unset or `cgroupfs`, the cgroupfs one.
//! Paths are computed here from systemd's naming rules, not from bosun's own code.

use std::path::{Path, PathBuf};

/// The environment variable choosing the driver of every test daemon.
pub const DRIVER_ENV: &str = "BOSUN_TEST_CGROUP_DRIVER";

/// The cgroup hierarchy's mount point.
pub const ROOT: &str = "/sys/fs/cgroup";

/// The cgroup driver of test daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    /// Plain cgroupfs paths (`/<daemon>/…`).
    Cgroupfs,
    /// systemd slices and scopes (`<daemon>.slice`, `bosun-<id>.scope`).
    Systemd,
}

impl Driver {
    /// The name in bosun's config and in RuntimeConfig.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Cgroupfs => "cgroupfs",
            Driver::Systemd => "systemd",
        }
    }
}

/// The driver chosen by [`DRIVER_ENV`]; `Err` names a bad value.
pub fn driver_choice() -> Result<Driver, String> {
    match std::env::var(DRIVER_ENV).as_deref() {
        Err(_) | Ok("") | Ok("cgroupfs") => Ok(Driver::Cgroupfs),
        Ok("systemd") => Ok(Driver::Systemd),
        Ok(other) => Err(format!(
            "{DRIVER_ENV}={other:?}: must be cgroupfs or systemd"
        )),
    }
}

/// The driver of test daemons (cgroupfs when the variable is bad: such tests are skipped).
pub fn driver() -> Driver {
    driver_choice().unwrap_or(Driver::Cgroupfs)
}

/// Whether `/sys/fs/cgroup` is the unified (v2) hierarchy.
pub fn unified() -> bool {
    Path::new(ROOT).join("cgroup.controllers").exists()
}

/// Whether systemd is PID 1 (sd_booted).
pub fn systemd_booted() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Why the chosen driver cannot run here, if it cannot.
pub fn driver_unmet() -> Option<String> {
    match driver_choice() {
        Err(e) => Some(e),
        Ok(Driver::Systemd) if !systemd_booted() => Some(format!(
            "{DRIVER_ENV}=systemd needs systemd as PID 1 (run it in the VM lane: hack/vm/run.sh)"
        )),
        Ok(_) => None,
    }
}

/// The cgroup parent of a test daemon named `name` (its scratch dir's name), unique per
/// daemon: `/<name>` for cgroupfs; a top-level slice for systemd (`-` nests slices, so the
/// name's dashes become `_`).
pub fn daemon_parent(name: &str) -> String {
    match driver() {
        Driver::Cgroupfs => format!("/{name}"),
        Driver::Systemd => format!("{}.slice", name.replace('-', "_")),
    }
}

/// A kubelet-style per-pod cgroup parent below `parent`, in the driver's form:
/// `<parent>/pod<uid>` (cgroupfs) or `<parent base>-pod<uid>.slice` (systemd, the uid's dashes
/// as `_`, as the kubelet writes it).
pub fn pod_parent(parent: &str, uid: &str) -> String {
    match parent
        .strip_suffix(".slice")
        .filter(|_| !parent.contains('/'))
    {
        Some(base) => format!("{base}-pod{}.slice", uid.replace('-', "_")),
        None => format!("{}/pod{uid}", parent.trim_end_matches('/')),
    }
}

/// The cgroup directory (relative to the hierarchy root, leading `/`) of a cgroup parent: a
/// slice name is expanded as systemd nests slices (`a-b.slice` → `/a.slice/a-b.slice`), a
/// path is taken as it is.
pub fn parent_dir(parent: &str) -> String {
    let Some(base) = parent
        .strip_suffix(".slice")
        .filter(|_| !parent.contains('/'))
    else {
        return format!("/{}", parent.trim_matches('/'));
    };
    let mut out = String::new();
    let mut prefix = String::new();
    for part in base.split('-') {
        if !prefix.is_empty() {
            prefix.push('-');
        }
        prefix.push_str(part);
        out.push_str(&format!("/{prefix}.slice"));
    }
    out
}

/// The cgroup directory of container `id` whose pod's parent is `parent`: `<parent>/<id>`
/// (cgroupfs), or runc's systemd scope `<parent>/bosun-<id>.scope`.
pub fn container_dir(parent: &str, id: &str) -> String {
    let dir = parent_dir(parent);
    match driver() {
        Driver::Cgroupfs => format!("{dir}/{id}"),
        Driver::Systemd => format!("{dir}/bosun-{id}.scope"),
    }
}

/// `file` of cgroup `dir`: `/sys/fs/cgroup/<dir>/<file>` on v2, else in the v1 hierarchy of
/// `controller` (trimmed; `None` when unreadable).
pub fn read(dir: &str, controller: &str, file: &str) -> Option<String> {
    let rel = dir.trim_start_matches('/');
    let path = if unified() {
        PathBuf::from(ROOT).join(rel).join(file)
    } else {
        PathBuf::from(ROOT).join(controller).join(rel).join(file)
    };
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// A number read with [`read`].
pub fn read_u64(dir: &str, controller: &str, file: &str) -> anyhow::Result<u64> {
    use anyhow::Context;
    let text = read(dir, controller, file).with_context(|| format!("read {dir}/{file}"))?;
    text.parse()
        .with_context(|| format!("{dir}/{file}: {text:?} is not a number"))
}

/// `systemctl ARGS`, its stdout (trimmed) on success.
pub fn systemctl(args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new("systemctl")
        .args(args)
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "systemctl {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// One property of a systemd unit (`systemctl show -P`), empty when unknown.
pub fn unit_property(unit: &str, property: &str) -> String {
    systemctl(&["show", "-P", property, unit]).unwrap_or_default()
}

/// Stops a slice, named or by its path (every scope and slice below it, their processes
/// killed) and forgets its failed units: the kubelet's part for pod slices, done by tests on
/// cleanup.
pub fn stop_slice(slice: &str) {
    let name = slice
        .trim_end_matches('/')
        .rsplit('/')
        .next()
        .unwrap_or_default();
    if systemd_booted() && name.ends_with(".slice") {
        let _ = systemctl(&["stop", name]);
        let _ = systemctl(&["reset-failed", name]);
    }
}

/// Loaded systemd units (scopes, slices) whose name starts with `prefix`, with their state.
pub fn units_with_prefix(prefix: &str) -> Vec<String> {
    if !systemd_booted() {
        return Vec::new();
    }
    let pattern = format!("{prefix}*");
    systemctl(&[
        "list-units",
        "--all",
        "--plain",
        "--no-legend",
        "--type=scope,slice",
        &pattern,
    ])
    .map(|out| out.lines().map(|l| l.trim().to_string()).collect())
    .unwrap_or_default()
}

/// Memory counters of one cgroup as cadvisor reads them (v1 `memory.usage_in_bytes` and
/// `total_*` keys of `memory.stat`; v2 `memory.current` and `memory.stat`).
#[derive(Debug, Clone, Copy)]
pub struct MemoryFiles {
    /// v1 `memory.usage_in_bytes`; v2 `memory.current`.
    pub usage: u64,
    /// v1 `total_inactive_file`; v2 `inactive_file`.
    pub inactive_file: u64,
    /// v1 `total_rss`; v2 `anon`.
    pub rss: u64,
    /// v1 `total_pgfault`; v2 `pgfault`.
    pub pgfault: u64,
}

impl MemoryFiles {
    /// Usage less inactive file pages.
    pub fn working_set(&self) -> u64 {
        self.usage.saturating_sub(self.inactive_file)
    }
}

/// The memory counters of cgroup `dir` (a dir from [`parent_dir`] or [`container_dir`]).
pub fn memory(dir: &str) -> anyhow::Result<MemoryFiles> {
    use anyhow::Context;
    let v2 = unified();
    let usage = read_u64(
        dir,
        "memory",
        if v2 {
            "memory.current"
        } else {
            "memory.usage_in_bytes"
        },
    )?;
    let stat = read(dir, "memory", "memory.stat").with_context(|| format!("{dir}/memory.stat"))?;
    let key = |k: &str| -> anyhow::Result<u64> {
        let name = if v2 {
            k.to_string()
        } else {
            format!("total_{k}")
        };
        stat.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(' ')?;
                (n == name).then(|| v.trim().parse().ok())?
            })
            .with_context(|| format!("{dir}/memory.stat has no {name}"))
    };
    Ok(MemoryFiles {
        usage,
        inactive_file: key("inactive_file")?,
        rss: key(if v2 { "anon" } else { "rss" })?,
        pgfault: key("pgfault")?,
    })
}

/// CPU time of cgroup `dir` in nanoseconds (v1 `cpuacct.usage`; v2 `cpu.stat usage_usec`).
pub fn cpu_usage_ns(dir: &str) -> anyhow::Result<u64> {
    use anyhow::Context;
    if !unified() {
        return read_u64(dir, "cpuacct", "cpuacct.usage");
    }
    let stat = read(dir, "cpu", "cpu.stat").with_context(|| format!("{dir}/cpu.stat"))?;
    stat.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|us| us * 1000)
        .with_context(|| format!("{dir}/cpu.stat has no usage_usec"))
}

/// Removes a pod cgroup the test made as a kubelet would: stops a slice (systemd), removes
/// the directory from every hierarchy (cgroupfs). Errors are ignored.
pub fn remove_pod_parent(parent: &str) {
    stop_slice(parent);
    let rel = parent_dir(parent);
    let rel = rel.trim_start_matches('/');
    let _ = std::fs::remove_dir(Path::new(ROOT).join(rel));
    if let Ok(hierarchies) = std::fs::read_dir(ROOT) {
        for h in hierarchies.flatten() {
            let _ = std::fs::remove_dir(h.path().join(rel));
        }
    }
}
