//! The leftover check every CRI test ends with, and the clean-up after a failed one: what a
//! daemon left behind, removing every pod of a live daemon, and scrubbing a dead one's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Result;
use bosun::proto::runtime::v1 as pb;
use pb::runtime_service_client::RuntimeServiceClient;

use super::{
    cgroup_parent_dirs, cgroups_below, cmdline, entries, mounts_under, processes_mentioning,
    runc_containers, with_log, Rt,
};
use crate::support::{runc_bin, wait_until, Daemon};

/// What a daemon left behind: mounts under its root and state, sandbox and container dirs,
/// monitors and pod inits, cgroups under the test's cgroup parent. Empty when clean.
pub fn leftovers(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [d.state(), d.root()] {
        for (mp, fs) in mounts_under(&dir) {
            // A file system a test gave the daemon as its root (a small disk) is no leftover.
            if mp == d.root() {
                continue;
            }
            out.push(format!("mount {} ({fs})", mp.display()));
        }
    }
    for dir in [
        d.state().join("sandboxes"),
        d.state().join("containers"),
        d.root().join("sandboxes"),
        d.root().join("containers"),
        // Removals delete in the background: nothing may stay there.
        d.state().join("trash"),
        d.root().join("trash"),
    ] {
        for e in entries(&dir) {
            out.push(format!("dir {}", dir.join(e).display()));
        }
    }
    for p in processes_mentioning(&d.state().display().to_string()) {
        if Some(p as u32) != d.pid() {
            out.push(format!("process {p}: {:?}", cmdline(p)));
        }
    }
    for cg in cgroups_below(&d.cgroup_parent()) {
        if !is_qos_skeleton(&cg) {
            out.push(format!("cgroup {}", cg.display()));
        }
    }
    // systemd driver: scopes (running or failed) of the daemon's slice and the slices below it.
    if let Some(base) = d.cgroup_parent().strip_suffix(".slice") {
        for unit in crate::support::cgroup::units_with_prefix(&format!("{base}-")) {
            let name = unit.split_whitespace().next().unwrap_or_default();
            if !is_qos_slice(name) {
                out.push(format!("unit {unit}"));
            }
        }
    }
    out
}

/// `kubepods` and its `burstable`/`besteffort` cgroups: the node's, made with its first
/// supervised pod and kept while the daemon lives (as the kubelet keeps them); the daemon's
/// drop removes them with its cgroup parent. cgroupfs names them `kubepods/burstable`, the
/// systemd driver `…-kubepods.slice/…-kubepods-burstable.slice`.
fn is_qos_skeleton(cg: &Path) -> bool {
    let name = cg.file_name().unwrap_or_default();
    let parent = cg.parent().and_then(|p| p.file_name()).unwrap_or_default();
    name == "kubepods"
        || (parent == "kubepods" && (name == "burstable" || name == "besteffort"))
        || is_qos_slice(&name.to_string_lossy())
}

/// A systemd driver's QoS slice: `<parent>-kubepods.slice` and its burstable/besteffort.
fn is_qos_slice(name: &str) -> bool {
    [
        "-kubepods.slice",
        "-kubepods-burstable.slice",
        "-kubepods-besteffort.slice",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

/// Checks nothing is left of any sandbox or container (waiting up to 10 s for exits to
/// settle): no mount, pinned namespace, sandbox/container dir, monitor, pod init, cgroup or
/// runc container.
pub fn assert_clean(d: &Daemon) -> Result<()> {
    let clean = wait_until(10, || leftovers(d).is_empty());
    let mut left = leftovers(d);
    left.extend(
        runc_containers(&d.state())
            .into_iter()
            .map(|c| format!("runc container {c}")),
    );
    let r = if clean && left.is_empty() {
        Ok(())
    } else {
        Err(anyhow::anyhow!("left behind:\n  {}", left.join("\n  ")))
    };
    with_log(d, r)
}

/// Asks a live daemon to stop and remove every pod (each call bounded by `timeout`); errors
/// are ignored. Runs on its own thread and runtime, so it works from any context.
pub fn remove_all_pods(socket: &Path, timeout: Duration) {
    let socket = socket.to_path_buf();
    let worker = std::thread::Builder::new().spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let connect = bosun::cli::client::connect(&socket);
            let Ok(Ok(ch)) = tokio::time::timeout(timeout, connect).await else {
                return;
            };
            // Supervised pods first, through their own API: stopping their sandboxes over CRI
            // would only make the supervisor re-create them.
            let mut pods = bosun::proto::bosun::v1::pods_client::PodsClient::new(ch.clone());
            if let Ok(Ok(list)) = tokio::time::timeout(
                timeout,
                pods.list(bosun::proto::bosun::v1::ListPodsRequest::default()),
            )
            .await
            {
                for v in list.into_inner().pods {
                    let Ok(p) = serde_json::from_str::<serde_json::Value>(&v.pod_json) else {
                        continue;
                    };
                    let field = |k: &str| p["metadata"][k].as_str().unwrap_or_default().to_string();
                    let _ = tokio::time::timeout(
                        timeout,
                        pods.delete(bosun::proto::bosun::v1::DeletePodRequest {
                            namespace: field("namespace"),
                            name: field("name"),
                            grace_period: Some(0),
                            force: true,
                        }),
                    )
                    .await;
                }
            }
            let mut c: Rt = RuntimeServiceClient::new(ch);
            let Ok(Ok(list)) = tokio::time::timeout(
                timeout,
                c.list_pod_sandbox(pb::ListPodSandboxRequest { filter: None }),
            )
            .await
            else {
                return;
            };
            for pod in list.into_inner().items {
                let _ = tokio::time::timeout(
                    timeout,
                    c.stop_pod_sandbox(pb::StopPodSandboxRequest {
                        pod_sandbox_id: pod.id.clone(),
                    }),
                )
                .await;
                let _ = tokio::time::timeout(
                    timeout,
                    c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                        pod_sandbox_id: pod.id,
                    }),
                )
                .await;
            }
        });
    });
    if let Ok(w) = worker {
        let _ = w.join();
    }
}

/// After the daemon is gone: deletes every runc container under `<state>/runc`, kills every
/// process whose argv names `dir` (monitors, pod inits, stuck runc calls) and every process
/// left in the cgroups under `cgroup_parent`, lazily unmounts everything under `dir` (deepest
/// first) and removes the cgroups (deepest first, then the parent itself). Never panics.
pub fn scrub(dir: &Path, state: &Path, cgroup_parent: &str) {
    use rustix::process::{kill_process, Pid, Signal};
    let kill = |pid: i32| {
        if let Some(p) = Pid::from_raw(pid) {
            let _ = kill_process(p, Signal::KILL);
        }
    };
    if let Some(runc) = runc_bin() {
        for id in runc_containers(state) {
            let _ = std::process::Command::new(&runc)
                .arg("--root")
                .arg(state.join("runc"))
                .args(["delete", "--force", &id])
                .output();
        }
    }
    let needle = dir.display().to_string();
    let all_dead = wait_until(2, || {
        let left = processes_mentioning(&needle);
        left.iter().for_each(|p| kill(*p));
        left.is_empty()
    });
    if !all_dead {
        eprintln!(
            "cleanup: processes of {needle} survive SIGKILL: {:?}",
            processes_mentioning(&needle)
        );
    }
    let mut mounts: Vec<PathBuf> = mounts_under(dir).into_iter().map(|(m, _)| m).collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    mounts.dedup();
    for mp in mounts {
        // Stacked mounts on one point need one unmount each.
        for _ in 0..8 {
            if rustix::mount::unmount(&mp, rustix::mount::UnmountFlags::DETACH).is_err() {
                break;
            }
        }
    }
    // The systemd driver's slice: stopping it stops every scope and slice below it.
    crate::support::cgroup::stop_slice(cgroup_parent);
    let mut cgroups = cgroups_below(cgroup_parent);
    cgroups.extend(cgroup_parent_dirs(cgroup_parent));
    let removed = wait_until(5, || {
        cgroups.retain(|cg| {
            let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
            procs
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
                .for_each(kill);
            std::fs::remove_dir(cg).is_err() && cg.exists()
        });
        cgroups.is_empty()
    });
    if !removed {
        eprintln!("cleanup: cgroups not removed: {cgroups:?}");
    }
}
