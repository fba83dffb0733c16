//! /proc and runc readings: per-pod helper processes and their memory, mounts, runc leftovers.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context;

use crate::daemons::Kind;
use crate::measure::proc_kb;

/// Rss and Pss of a process from /proc/PID/smaps_rollup, in bytes.
#[derive(Debug, Clone, Copy, Default)]
pub struct RssPss {
    pub rss: f64,
    pub pss: f64,
}

impl std::ops::AddAssign for RssPss {
    fn add_assign(&mut self, o: RssPss) {
        self.rss += o.rss;
        self.pss += o.pss;
    }
}

pub fn rss_pss(pid: u32) -> anyhow::Result<RssPss> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let rollup = std::fs::read_to_string(&path).with_context(|| format!("read {path}"))?;
    Ok(RssPss {
        rss: proc_kb(&rollup, "Rss:")?,
        pss: proc_kb(&rollup, "Pss:")?,
    })
}

/// Every pid in /proc.
fn pids() -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The argv of `pid` (empty for kernel threads and vanished processes).
pub fn cmdline(pid: u32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The parent pid of `pid`, from /proc/PID/stat (the field after the parenthesised name).
fn ppid(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The process state letter (R, S, Z, …) of `pid`.
pub fn state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().next()?.chars().next()
}

fn basename(arg0: &str) -> &str {
    arg0.rsplit('/').next().unwrap_or(arg0)
}

/// Processes (other than this one) whose command line mentions `needle`.
pub fn pids_with_cmdline(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    pids()
        .into_iter()
        .filter(|&p| p != me && cmdline(p).iter().any(|a| a.contains(needle)))
        .collect()
}

pub fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(pid) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process(pid, sig);
    }
}

/// The per-pod helper processes of a daemon whose files are all under `dir`: bosun's
/// `monitor` and `pod-init` (any bosun process naming `dir` but the daemon), containerd's
/// `containerd-shim-runc-v2` (its `-address` is in `dir`) and the `/pause` processes they
/// parent. Returns pid → label.
pub fn helpers(kind: Kind, dir: &Path, daemon: u32) -> BTreeMap<u32, String> {
    let needle = dir.display().to_string();
    let mut found = BTreeMap::new();
    let all = pids();
    for &pid in &all {
        if pid == daemon {
            continue;
        }
        let argv = cmdline(pid);
        let Some(arg0) = argv.first() else { continue };
        if !argv.iter().any(|a| a.contains(&needle)) {
            continue;
        }
        // pod-init runs as /proc/self/exe: its executable names it, not its argv[0].
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| arg0.clone());
        let name = basename(exe.trim_end_matches(" (deleted)"));
        match kind {
            Kind::Bosun if name.starts_with("bosun") => {
                let sub = argv.get(1).map_or("?", String::as_str);
                found.insert(pid, format!("bosun {sub}"));
            }
            Kind::Containerd if name == "containerd-shim-runc-v2" => {
                found.insert(pid, name.to_string());
            }
            _ => {}
        }
    }
    if kind == Kind::Containerd {
        let shims: Vec<u32> = found.keys().copied().collect();
        for &pid in &all {
            let is_pause = cmdline(pid).first().is_some_and(|a| basename(a) == "pause");
            if is_pause && ppid(pid).is_some_and(|pp| shims.contains(&pp)) {
                found.insert(pid, "pause".to_string());
            }
        }
    }
    found
}

/// bosun's spare monitors: processes running `bosun monitor --standby` whose argument pipe
/// (fd 4) `daemon` holds the write end of; they wait for the next StartContainer (one per
/// daemon, not per pod). A spare forks away at once, so it is no child of the daemon.
pub fn spares(daemon: u32) -> Vec<u32> {
    let pipes = held_pipes(daemon);
    pids()
        .into_iter()
        // The daemon's own child is the process that forks the spare away, about to exit.
        .filter(|p| ppid(*p).is_some_and(|pp| pp != daemon))
        .filter(|p| {
            cmdline(*p)
                .get(1..3)
                .is_some_and(|a| a == ["monitor", "--standby"])
        })
        .filter(|p| std::fs::read_link(format!("/proc/{p}/fd/4")).is_ok_and(|l| pipes.contains(&l)))
        .collect()
}

/// The pipes among `pid`'s open descriptors (their `pipe:[inode]` links).
fn held_pipes(pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter(|l| l.to_string_lossy().starts_with("pipe:"))
                .collect()
        })
        .unwrap_or_default()
}

/// Mount points at or below `dir`, deepest first (from /proc/self/mountinfo).
pub fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = mount_points()
        .into_iter()
        .map(PathBuf::from)
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

/// Every mount point of this mount namespace.
pub fn mount_points() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    info.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| m.replace("\\040", " "))
        .collect()
}

/// runc root directories below `dir`: directories holding `<id>/state.json` (depth ≤ 6).
pub fn runc_roots_below(dir: &Path) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(ft) = e.file_type() else { continue };
            if !ft.is_dir() || ft.is_symlink() {
                continue;
            }
            let p = e.path();
            if p.join("state.json").is_file() {
                if !roots.contains(&d) {
                    roots.push(d.clone());
                }
            } else if depth < 6 {
                stack.push((p, depth + 1));
            }
        }
    }
    roots
}

/// Ids of the containers in runc root `root` whose bundle is below `dir` (all of them when the
/// root itself is below `dir`).
pub fn runc_containers(root: &Path, dir: &Path) -> Vec<String> {
    if !root.is_dir() {
        return Vec::new();
    }
    let out = Command::new("runc")
        .arg("--root")
        .arg(root)
        .args(["list", "--format", "json"])
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else { return Vec::new() };
    let list: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
    let all_ours = root.starts_with(dir);
    list.iter()
        .filter(|c| {
            all_ours
                || c["bundle"]
                    .as_str()
                    .is_some_and(|b| Path::new(b).starts_with(dir))
        })
        .filter_map(|c| c["id"].as_str().map(str::to_string))
        .collect()
}

/// Available memory of the machine (MemAvailable), in bytes.
pub fn mem_available() -> f64 {
    let info = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    proc_kb(&info, "MemAvailable:").unwrap_or(f64::NAN)
}
