//! Pid and disk pressure on supervised pods: a fork-heavy pod evicted when kubepods runs short of pids, and a pod filling its writable layer on a small root file system evicted after dead containers and unused images were reclaimed.

use std::path::Path;
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::node::{
    delete_all, has_line, needs_and, node_describe, pod, reason_message, refused, run,
    small_node_reserving, untouched,
};
use crate::support::pods::{self, BUSYBOX};
use crate::support::{block_on, trial, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let disk = needs_and(Need::Freeze);
    vec![
        trial(
            "pod::node::pid_pressure_evicts_the_pod_with_the_most_processes",
            NEEDS,
            pid_pressure,
        ),
        trial(
            "pod::node::disk_pressure_reclaims_then_evicts_the_largest_writer",
            disk,
            disk_pressure,
        ),
    ]
}

/// What the daemon takes as the node's pid capacity: `pid_max`, or `threads-max` when lower.
fn max_pids() -> Result<i64> {
    let read = |p: &str| -> Result<i64> {
        Ok(std::fs::read_to_string(p)
            .with_context(|| format!("read {p}"))?
            .trim()
            .parse()?)
    };
    Ok(read("/proc/sys/kernel/pid_max")?.min(read("/proc/sys/kernel/threads-max")?))
}

/// A busybox pod with restart policy `policy` whose container `main` runs `script`.
fn sh_pod(name: &str, policy: &str, script: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
  restartPolicy: {policy}
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "{script}"]
"#
    )
}

/// A pod whose container starts `n` sleeping processes (then waits for them).
fn forker(name: &str, n: u32) -> String {
    let script = format!("i=0; while [ $i -lt {n} ]; do sleep 3600 & i=$((i+1)); done; wait");
    sh_pod(name, "Always", &script)
}

/// The processes of the pod's container, as its cgroup counts them.
fn container_tasks(d: &Daemon, name: &str) -> Result<usize> {
    let p = pods::get(d, name)?.with_context(|| name.to_string())?;
    let id = pods::container(&p, "main")
        .and_then(|c| c.container_id)
        .context("container id")?;
    let id = id.trim_start_matches("bosun://").to_string();
    let scope = format!("bosun-{id}.scope");
    let dirs = cri::cgroups_below(&d.cgroup_parent());
    Ok(dirs
        .iter()
        .filter(|d| d.ends_with(&id) || d.ends_with(&scope))
        .filter_map(|d| std::fs::read_to_string(d.join("cgroup.procs")).ok())
        .map(|t| t.lines().count())
        .max()
        .unwrap_or(0))
}

/// kubepods limited to 400 pids by a `pid` reservation (the host's own count, which other
/// tests move, stays far from any threshold), hard pid.available 150: a pod forking 300
/// sleeping processes takes kubepods past 250 tasks and is evicted (the most processes among
/// pods of one priority), PIDPressure is reported, a new pod is refused meanwhile, and the
/// two small pods keep running.
fn pid_pressure() -> Result<()> {
    let reserve = format!(", pid = \"{}\"", max_pids()? - 400);
    let d = small_node_reserving(
        10,
        "{ \"pid.available\" = \"150\" }",
        &reserve,
        "housekeeping_interval = \"1s\"\neviction_pressure_transition_period = \"30s\"\n\
         pod_pids_limit = 350\n",
    )?;
    let r = (|| {
        run(&d, &pod("quiet", "{}", ""), "quiet")?;
        run(&d, &forker("few", 20), "few")?;
        ensure!(
            crate::support::wait_until(20, || container_tasks(&d, "few").is_ok_and(|n| n > 20)),
            "few did not start its 20 processes"
        );
        pods::apply(&d, &forker("many", 300))?;
        let p = pods::wait_for(&d, "many", 60, "evicted", |p| pods::phase(p) == "Failed")?;
        let (r, m) = reason_message(&p);
        ensure!(
            r == "Evicted"
                && m.starts_with(
                    "The node was low on resource: pids. Threshold quantity: 150, available: "
                ),
            "many: {r:?} {m:?}"
        );
        let events = pods::cli(&d, &["events", "many"])?;
        ensure!(
            events.contains("Warning") && events.contains("Evicted"),
            "many's events:\n{events}"
        );
        let text = node_describe(&d)?;
        has_line(&text, &["PIDPressure", "True", "KubeletHasInsufficientPID"])?;
        has_line(
            &text,
            &[
                "Warning",
                "EvictionThresholdMet",
                "Attempting to reclaim pids",
            ],
        )?;
        refused(
            &d,
            &pod("late", "{}", ""),
            "late",
            "Evicted",
            "Pod was rejected: The node had condition: [PIDPressure]. ",
        )?;
        pods::wait_for(&d, "many", 30, "stopped", |p| !pods::running(p, "main"))?;
        untouched(&d, &["quiet", "few"], "main")?;
        delete_all(&d, &["quiet", "few", "many", "late"])
    })();
    cri::with_log(&d, r)
}

fn sh(cmd: &str, args: &[&str]) -> Result<()> {
    let out = std::process::Command::new(cmd).args(args).output()?;
    ensure!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// Size of the daemon's root file system.
const DISK_MIB: u64 = 320;
/// nodefs.available and imagefs.available hard thresholds.
const THRESHOLD_MIB: u64 = 110;

/// Makes a `DISK_MIB` ext4 (no reserved blocks) on a loop device at `dir/root`, where the
/// daemon's root goes; the daemon's clean-up unmounts it (the loop device goes with it) and
/// removes the image with its scratch dir.
fn small_root(dir: &Path) -> Result<()> {
    let image = dir.join("root.img");
    std::fs::File::create(&image)?.set_len(DISK_MIB << 20)?;
    let root = dir.join("root");
    std::fs::create_dir_all(&root)?;
    let image = image.display().to_string();
    sh("mkfs.ext4", &["-q", "-F", "-m", "0", &image])?;
    sh(
        "mount",
        &["-o", "loop", &image, &root.display().to_string()],
    )
}

/// Bytes free for the daemon on its root.
fn free(d: &Daemon) -> Result<u64> {
    let s = rustix::fs::statvfs(d.root())?;
    Ok(s.f_bavail * s.f_frsize)
}

/// A pod that writes `mib` MiB into its writable layer, then sleeps (`exit`: exits 0 instead;
/// restartPolicy Never).
fn writer(name: &str, mib: u64, exit: bool) -> String {
    let (then, policy) = if exit {
        ("exit 0", "Never")
    } else {
        (
            "trap 'exit 0' TERM; while true; do sleep 0.2; done",
            "Always",
        )
    };
    let script =
        format!("dd if=/dev/zero of=/fill bs=1M count={mib} conv=fsync 2>/dev/null; {then}");
    sh_pod(name, policy, &script)
}

fn container_id(p: &k8s_openapi::api::core::v1::Pod) -> Result<String> {
    Ok(pods::container(p, "main")
        .and_then(|c| c.container_id)
        .context("container id")?
        .trim_start_matches("bosun://")
        .to_string())
}

fn container_exists(d: &Daemon, id: &str) -> Result<bool> {
    let all = block_on(async {
        let mut rt = cri::client(d).await?;
        cri::list_containers(&mut rt, None).await
    })?;
    Ok(all.iter().any(|c| c.id == id))
}

/// The daemon's root on a 320 MiB ext4, hard nodefs/imagefs.available 110 Mi. A pod filling
/// its writable layer past the threshold is first answered by the kubelet's GC (the unused
/// `big` image and a finished pod's container removed, FreeDiskSpace) and keeps running; when
/// it writes 130 MiB more, nothing is left to reclaim and it, the largest user of disk, is
/// evicted (reason Evicted, ephemeral-storage message, Warning event in `pod events` and
/// `pod describe`), DiskPressure is reported, a new pod refused, the small pod untouched.
fn disk_pressure() -> Result<()> {
    let node = format!(
        "eviction_hard = {{ \"nodefs.available\" = \"{THRESHOLD_MIB}Mi\", \
         \"imagefs.available\" = \"{THRESHOLD_MIB}Mi\" }}\n\
         housekeeping_interval = \"1s\"\neviction_pressure_transition_period = \"30s\"\n"
    );
    let d = pods::node_daemon_after(10, "", &node, small_root)?;
    let r = (|| {
        cri::import(&d, "big")?;
        let done = pods::apply(&d, &writer("done", 16, true)).and_then(|_| {
            pods::wait_for(&d, "done", 60, "Succeeded", |p| {
                pods::phase(p) == "Succeeded"
            })
        })?;
        let done_id = container_id(&done)?;
        run(&d, &pod("quiet", "{}", ""), "quiet")?;
        let before = free(&d)?;
        // Past the threshold by 16 MiB; reclaiming `big` and `done` frees more than that.
        let fill = (before >> 20).saturating_sub(THRESHOLD_MIB) + 16;
        println!("free {} MiB; the filler writes {fill} MiB", before >> 20);
        pods::apply(&d, &writer("filler", fill, false))?;
        let text = {
            let mut text = String::new();
            let reclaimed = crate::support::wait_until(60, || {
                text = node_describe(&d).unwrap_or_default();
                text.contains("FreeDiskSpace")
            });
            ensure!(reclaimed, "no disk reclaim:\n{text}");
            text
        };
        has_line(&text, &["DiskPressure", "True", "KubeletHasDiskPressure"])?;
        has_line(
            &text,
            &[
                "Warning",
                "EvictionThresholdMet",
                "Attempting to reclaim ephemeral-storage",
            ],
        )?;
        has_line(
            &text,
            &[
                "FreeDiskSpace",
                "Removed 1 dead containers and 1 unused images",
            ],
        )?;
        let images = String::from_utf8_lossy(&d.cli(&["image", "ls"])?.stdout).into_owned();
        ensure!(
            !images.contains("bosun.test/big") && images.contains("bosun.test/busybox"),
            "images after reclaim:\n{images}"
        );
        ensure!(
            !container_exists(&d, &done_id)?,
            "done's container was not removed"
        );
        let filler = pods::wait_for(&d, "filler", 30, "running", |p| pods::running(p, "main"))?;
        std::thread::sleep(Duration::from_secs(2));
        let filler_now = pods::get(&d, "filler")?.context("filler")?;
        ensure!(
            pods::phase(&filler_now) == "Running",
            "reclaim was enough, yet filler was evicted: {:?}",
            filler_now.status
        );
        // Now past the threshold with nothing left to reclaim.
        let id = container_id(&filler)?;
        let wrote = block_on(async {
            let mut rt = cri::client(&d).await?;
            let cmd = "dd if=/dev/zero of=/more bs=1M count=130 conv=fsync 2>/dev/null";
            Ok::<_, anyhow::Error>(cri::exec(&mut rt, &id, &["sh", "-c", cmd], 60).await)
        })?;
        println!("exec dd: {:?}", wrote.map(|r| r.exit_code));
        let p = pods::wait_for(&d, "filler", 60, "evicted", |p| pods::phase(p) == "Failed")?;
        let (r, m) = reason_message(&p);
        ensure!(
            r == "Evicted"
                && m.starts_with(&format!(
                    "The node was low on resource: ephemeral-storage. Threshold quantity: \
                     {THRESHOLD_MIB}Mi, available: "
                ))
                && m.contains("Container main was using "),
            "filler: {r:?} {m:?}"
        );
        let events = pods::cli(&d, &["events", "filler"])?;
        ensure!(
            events.contains("Warning") && events.contains("Evicted"),
            "filler's events:\n{events}"
        );
        let described = pods::cli(&d, &["describe", "filler"])?;
        ensure!(
            described.contains("Evicted") && described.contains("ephemeral-storage"),
            "pod describe filler:\n{described}"
        );
        refused(
            &d,
            &pod("late", "{}", ""),
            "late",
            "Evicted",
            "Pod was rejected: The node had condition: [DiskPressure]. ",
        )?;
        untouched(&d, &["quiet"], "main")?;
        // The evicted pod's container is reclaimed in turn: the pressure ends.
        ensure!(
            crate::support::wait_until(30, || free(&d).is_ok_and(|f| f > THRESHOLD_MIB << 20)),
            "the evicted pod's disk was not reclaimed: {} MiB free",
            free(&d)? >> 20
        );
        delete_all(&d, &["done", "quiet", "filler", "late"])
    })();
    cri::with_log(&d, r)
}
