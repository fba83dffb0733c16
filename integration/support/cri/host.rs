//! Scans of the host: mounts, processes, cgroups and runc state a daemon's objects leave.

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};

use crate::support::{runc_bin, Daemon};

/// `(mount point, fs type)` of every mount at or under `dir`, in mount order.
pub fn mounts_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mp = unescape_mount(left.split(' ').nth(4)?);
            let fs = right.split(' ').next()?.to_string();
            mp.starts_with(dir).then_some((mp, fs))
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape_mount(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    let os: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(out);
    PathBuf::from(os)
}

/// Every pid in /proc.
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's argv (empty for kernel threads and vanished processes).
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's state letter and parent pid (`None` when it is gone).
pub fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `arg` names the path `needle` or something below it (`/x/dir` matches
/// `--root=/x/dir/root`, not `/x/dir2`).
fn mentions(arg: &str, needle: &str) -> bool {
    arg.match_indices(needle)
        .any(|(i, _)| matches!(arg.as_bytes().get(i + needle.len()), None | Some(b'/')))
}

/// Live (not zombie) processes whose argv names the path `needle` or a path below it.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    pids()
        .into_iter()
        .filter(|p| *p != me)
        .filter(|p| cmdline(*p).iter().any(|a| mentions(a, needle)))
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Live `bosun monitor --id <id>` processes.
pub fn monitors_of(id: &str) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| {
            let argv = cmdline(*p);
            argv.windows(3)
                .any(|w| w[0] == "monitor" && w[1] == "--id" && w[2] == id)
        })
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Live processes whose argv is exactly `argv` (e.g. `["sleep", "987001"]`).
pub fn processes_with_argv(argv: &[&str]) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| cmdline(*p) == argv)
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Zombie children of `pid`.
pub fn zombies_of(pid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| proc_state(*p) == Some(('Z', pid)))
        .collect()
}

/// The cgroup directories `<hierarchy>/<parent>` (v1 hierarchies and the v2 root) that exist;
/// a systemd slice name is expanded to its path.
pub fn cgroup_parent_dirs(parent: &str) -> Vec<PathBuf> {
    let dir = crate::support::cgroup::parent_dir(parent);
    let rel = dir.trim_start_matches('/');
    if rel.is_empty() {
        return Vec::new();
    }
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|h| h.path().join(rel)).collect())
        .unwrap_or_default();
    dirs.push(root.join(rel));
    dirs.retain(|p| p.is_dir());
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Every cgroup below the cgroup parent `parent` (deepest first), in every hierarchy.
pub fn cgroups_below(parent: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = cgroup_parent_dirs(parent);
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
                stack.push(e.path());
            }
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The cgroups of container `id` under `parent`, in every hierarchy (`<id>`, or the
/// `bosun-<id>.scope` of the systemd driver).
pub fn cgroups_of(parent: &str, id: &str) -> Vec<PathBuf> {
    cgroup_parent_dirs(parent)
        .into_iter()
        .flat_map(|d| [d.join(id), d.join(format!("bosun-{id}.scope"))])
        .filter(|d| d.is_dir())
        .collect()
}

/// The pid of container `id`'s init as runc records it (`runc state`).
pub fn init_pid(d: &Daemon, id: &str) -> Result<i64> {
    let runc = runc_bin().context("runc")?;
    let out = std::process::Command::new(runc)
        .arg("--root")
        .arg(d.state().join("runc"))
        .args(["state", id])
        .output()?;
    ensure!(
        out.status.success(),
        "runc state {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["pid"].as_i64().context("runc state without a pid")
}

/// The ids runc knows under `<state>/runc`.
pub fn runc_containers(state: &Path) -> Vec<String> {
    let root = state.join("runc");
    let Some(runc) = runc_bin() else {
        return Vec::new();
    };
    if !root.is_dir() {
        return Vec::new();
    }
    std::process::Command::new(runc)
        .arg("--root")
        .arg(&root)
        .args(["list", "-q"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The names in a directory (empty when it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}
