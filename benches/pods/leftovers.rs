//! What the run left on the machine: mounts, netns, cgroups, processes, CNI state (found, cleaned, printed).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::daemons::{CNI_BRIDGE, CNI_NETWORK, CONTAINERD_RUNC_ROOT, MARK, NODE_CGROUP};
use crate::procs;

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// Where containerd pins pod network namespaces.
const NETNS: &str = "/run/netns";
/// Directories whose new entries after the run are leftovers of containerd's pods.
const WATCHED_DIRS: [&str; 4] = [
    NETNS,
    "/run/containerd/s",
    CONTAINERD_RUNC_ROOT,
    "/var/lib/cni/results",
];

/// The entries of the watched places before the run.
pub struct Before {
    mounts: BTreeSet<String>,
    /// Whether /run/netns existed.
    netns_dir: bool,
    entries: BTreeSet<PathBuf>,
}

fn entries() -> BTreeSet<PathBuf> {
    WATCHED_DIRS
        .iter()
        .flat_map(|d| {
            std::fs::read_dir(d)
                .map(|rd| rd.flatten().map(|e| e.path()).collect::<Vec<_>>())
                .unwrap_or_default()
        })
        .collect()
}

impl Before {
    pub fn take() -> Before {
        Before {
            mounts: procs::mount_points().into_iter().collect(),
            netns_dir: Path::new(NETNS).exists(),
            entries: entries(),
        }
    }

    /// Checks everything, removes the bench's own cgroup parents and the CNI bridge, and returns
    /// the report lines (empty: nothing left).
    pub fn check(&self) -> Vec<String> {
        let mut out = Vec::new();
        for m in procs::mount_points() {
            if !self.mounts.contains(&m) && (m.contains(MARK) || m.starts_with("/run/netns/")) {
                out.push(format!("mount {m}"));
            } else if m.contains(MARK) {
                out.push(format!("mount {m} (there before the run too)"));
            }
        }
        for e in entries().difference(&self.entries) {
            out.push(format!("new entry {}", e.display()));
            // containerd leaks the netns of a sandbox whose network setup failed: unpin it.
            let name = e.file_name().map(|n| n.to_string_lossy().into_owned());
            if e.starts_with(NETNS) && name.is_some_and(|n| n.starts_with("cni-")) {
                let _ = rustix::mount::unmount(e, rustix::mount::UnmountFlags::DETACH);
                if std::fs::remove_file(e).is_ok() {
                    out.push(format!("  (unmounted and removed {})", e.display()));
                }
            }
        }
        if !self.netns_dir {
            // containerd made it for its netns pins; removed only when empty.
            let _ = std::fs::remove_dir(NETNS);
        }
        let me = std::process::id();
        for pid in procs::pids_with_cmdline(MARK) {
            if pid != me {
                out.push(format!(
                    "process {pid} [{}]: {}",
                    procs::state(pid).unwrap_or('?'),
                    procs::cmdline(pid).join(" ")
                ));
            }
        }
        out.extend(cgroups());
        if Path::new("/sys/class/net").join(CNI_BRIDGE).exists() {
            // The bridge plugin creates it and nothing deletes it: ours to remove, not a leak.
            let ok = Command::new("ip")
                .args(["link", "del", CNI_BRIDGE])
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                out.push(format!("CNI bridge {CNI_BRIDGE} (ip link del failed)"));
            }
        }
        // bosun keeps its embedded network's bridge and table across restarts by design.
        let _ = Command::new("ip")
            .args(["link", "del", crate::daemons::BOSUN_BRIDGE])
            .stderr(Stdio::null())
            .status();
        let _ = Command::new("nft")
            .args(["delete", "table", "inet", crate::daemons::BOSUN_NETWORK])
            .stderr(Stdio::null())
            .status();
        let veths = std::fs::read_dir("/sys/class/net")
            .map(|rd| {
                rd.flatten()
                    .filter(|e| e.path().join("brport/bridge").exists())
                    .filter(|e| {
                        std::fs::read_link(e.path().join("brport/bridge"))
                            .is_ok_and(|b| b.ends_with(CNI_BRIDGE))
                    })
                    .count()
            })
            .unwrap_or(0);
        if veths > 0 {
            out.push(format!("{veths} veths still on {CNI_BRIDGE}"));
        }
        if let Ok(rd) = std::fs::read_dir("/var/lib/cni/results") {
            for e in rd.flatten() {
                if e.file_name().to_string_lossy().starts_with(CNI_NETWORK) {
                    out.push(format!("CNI result cache {}", e.path().display()));
                }
            }
        }
        out
    }
}

/// Cgroups below `/MARK-*` in every hierarchy: the pod parents the bench named (depth 2) and
/// the daemon's node QoS levels (`NODE_CGROUP`, `kubepods/{burstable,besteffort}`) are removed
/// quietly; deeper ones (a container's, a sandbox's) and top-level `MARK-runc-*` ones
/// are leaks, reported and then removed when empty.
fn cgroups() -> Vec<String> {
    let mut out = Vec::new();
    let Ok(hierarchies) = std::fs::read_dir(CGROUP_ROOT) else {
        return out;
    };
    let mut hs: Vec<PathBuf> = hierarchies.flatten().map(|e| e.path()).collect();
    hs.push(PathBuf::from(CGROUP_ROOT));
    for h in hs {
        let Ok(top) = std::fs::read_dir(&h) else {
            continue;
        };
        for e in top.flatten() {
            if !e.file_name().to_string_lossy().starts_with(MARK) || !e.path().is_dir() {
                continue;
            }
            let mut dirs = Vec::new();
            let mut stack = vec![(e.path(), 1)];
            while let Some((d, depth)) = stack.pop() {
                if let Ok(rd) = std::fs::read_dir(&d) {
                    for c in rd.flatten() {
                        if c.file_type().is_ok_and(|t| t.is_dir()) {
                            stack.push((c.path(), depth + 1));
                        }
                    }
                }
                dirs.push((d, depth));
            }
            // The daemon's node hierarchy is kept by design (a daemon restart finds it): its
            // empty QoS levels go quietly, anything deeper or with processes is a leak.
            let node = e.file_name().to_string_lossy() == NODE_CGROUP;
            let runc_baseline = e
                .file_name()
                .to_string_lossy()
                .starts_with(&format!("{MARK}-runc-"));
            dirs.sort_by_key(|(d, _)| std::cmp::Reverse(d.components().count()));
            for (d, depth) in dirs {
                let procs = std::fs::read_to_string(d.join("cgroup.procs")).unwrap_or_default();
                let n = procs.lines().count();
                let expected = if node { depth <= 3 } else { depth <= 2 };
                if !expected || runc_baseline || n > 0 {
                    out.push(format!("cgroup {} ({n} processes)", d.display()));
                }
                if n == 0 && std::fs::remove_dir(&d).is_err() {
                    out.push(format!("cgroup {} could not be removed", d.display()));
                }
            }
        }
    }
    out
}
