//! Node resources of supervised pods on a node whose allocatable is made small by `[node]`:
//! admission refusals with the kubelet's reasons and messages, priority classes, critical-pod
//! preemption, and the kubepods QoS cgroups read back from cgroupfs (eviction: eviction.rs).

use std::path::{Path, PathBuf};

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;

use crate::support::cgroup::{self, Driver};
use crate::support::cri::{self, NEEDS};
use crate::support::node::{
    delete_all, has_line, needs_and, node_describe, pod, qos_parent, reason_message, refused, run,
    small_node, write_classes,
};
use crate::support::pods;
use crate::support::{trial, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let v1 = needs_and(Need::CgroupV1);
    vec![
        trial(
            "pod::node::admission_refuses_pods_that_do_not_fit",
            NEEDS,
            admission_refuses,
        ),
        trial(
            "pod::node::admitted_pods_still_count_after_a_daemon_restart",
            NEEDS,
            restart_keeps_admission,
        ),
        trial(
            "pod::node::critical_pod_preempts_lower_priority_pods",
            NEEDS,
            critical_preempts,
        ),
        trial(
            "pod::node::qos_cgroups_carry_requests_and_limits_v1",
            v1,
            qos_cgroups_v1,
        ),
        trial(
            "pod::node::qos_cgroups_carry_requests_and_limits_v2",
            needs_and(Need::CgroupV2),
            qos_cgroups_v2,
        ),
    ]
}

/// cpu, memory and pod count are each refused with the kubelet's OutOf<resource> reason and
/// "Pod was rejected: Node didn't have enough resource: ..." message; refused pods take no room.
fn admission_refuses() -> Result<()> {
    let d = small_node(2, "")?;
    let r = (|| {
        run(
            &d,
            &pod("small", "{requests: {cpu: 300m, memory: 64Mi}}", ""),
            "small",
        )?;
        refused(
            &d,
            &pod("cpu-hog", "{requests: {cpu: 300m}}", ""),
            "cpu-hog",
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 300, used: 300, capacity: 500",
        )?;
        refused(
            &d,
            &pod("mem-hog", "{requests: {memory: 600Mi}}", ""),
            "mem-hog",
            "OutOfmemory",
            &format!(
                "Pod was rejected: Node didn't have enough resource: memory, requested: {}, used: {}, capacity: {}",
                600i64 << 20,
                64i64 << 20,
                512i64 << 20
            ),
        )?;
        // Two refused pods hold nothing: a second pod still fits, a third does not.
        run(&d, &pod("second", "{}", ""), "second")?;
        let text = node_describe(&d)?;
        has_line(&text, &["cpu:", "500m"])?;
        has_line(&text, &["memory:", "524288Ki"])?;
        has_line(
            &text,
            &["MemoryPressure", "False", "KubeletHasSufficientMemory"],
        )?;
        has_line(&text, &["Ready", "True", "KubeletReady"])?;
        has_line(&text, &["Non-terminated Pods:", "(2 in total)"])?;
        has_line(
            &text,
            &["default", "small", "Burstable", "300m (60%)", "64Mi (12%)"],
        )?;
        has_line(&text, &["default", "second", "BestEffort"])?;
        refused(
            &d,
            &pod("third", "{}", ""),
            "third",
            "OutOfpods",
            "Pod was rejected: Node didn't have enough resource: pods, requested: 1, used: 2, capacity: 2",
        )?;
        delete_all(&d, &["small", "cpu-hog", "mem-hog", "second", "third"])
    })();
    cri::with_log(&d, r)
}

/// A daemon killed with -9 and started again counts the pods it had admitted (they keep
/// running, are not admitted again) and refuses what no longer fits.
fn restart_keeps_admission() -> Result<()> {
    let mut d = small_node(10, "")?;
    let r = (|| {
        let before = run(&d, &pod("first", "{requests: {cpu: 300m}}", ""), "first")?;
        d.restart()?;
        let after = pods::wait_for(&d, "first", 30, "running", |p| pods::running(p, "main"))?;
        ensure!(
            uid(&before) == uid(&after) && pods::restarts(&after, "main") == 0,
            "first was started again: {:?}",
            after.status
        );
        refused(
            &d,
            &pod("next", "{requests: {cpu: 300m}}", ""),
            "next",
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 300, used: 300, capacity: 500",
        )?;
        has_line(&node_describe(&d)?, &["default", "first", "300m (60%)"])?;
        delete_all(&d, &["first", "next"])
    })();
    cri::with_log(&d, r)
}

fn priority(p: &Pod) -> (Option<i32>, Option<String>) {
    let s = p.spec.clone().unwrap_or_default();
    (s.priority, s.preemption_policy)
}

/// Priority classes from the directory and the two system classes fill `priority`; a higher
/// but non-critical pod that does not fit is refused, a critical one preempts the lower pod
/// (Failed, reason Preempting) and runs; an unknown class is an apply error.
fn critical_preempts() -> Result<()> {
    let d = small_node(10, "")?;
    let r = (|| {
        write_classes(&d.dir().join("priorityclasses"))?;
        let low = run(
            &d,
            &pod(
                "low",
                "{requests: {cpu: 300m}}",
                "  priorityClassName: low\n",
            ),
            "low",
        )?;
        ensure!(
            priority(&low) == (Some(100), Some("PreemptLowerPriority".into())),
            "low: {:?}",
            priority(&low)
        );
        let err = pods::cli_fails(
            &d,
            &[
                "apply",
                "-f",
                &pods::manifest_file(&d, &pod("lost", "{}", "  priorityClassName: nope\n"))?
                    .to_string_lossy(),
            ],
        )?;
        ensure!(
            err.contains("no PriorityClass with name nope was found"),
            "unknown class: {err}"
        );
        refused(
            &d,
            &pod(
                "high",
                "{requests: {cpu: 300m}}",
                "  priorityClassName: high\n",
            ),
            "high",
            "OutOfcpu",
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 300, used: 300, capacity: 500",
        )?;
        let crit = run(
            &d,
            &pod(
                "crit",
                "{requests: {cpu: 300m}}",
                "  priorityClassName: system-cluster-critical\n",
            ),
            "crit",
        )?;
        ensure!(
            priority(&crit).0 == Some(2_000_000_000),
            "crit: {:?}",
            priority(&crit)
        );
        let low = pods::wait_for(&d, "low", 30, "Failed", |p| pods::phase(p) == "Failed")?;
        let (r, m) = reason_message(&low);
        ensure!(
            r == "Preempting" && m == "Preempted in order to admit critical pod",
            "low: {r:?} {m:?}"
        );
        ensure!(!pods::running(&low, "main"), "the preempted pod still runs");
        let events = pods::cli(&d, &["events", "low"])?;
        ensure!(events.contains("Preempting"), "low's events:\n{events}");
        delete_all(&d, &["low", "high", "crit"])
    })();
    cri::with_log(&d, r)
}

/// The cgroup v1 directory of controller `c` for cgroup `rel` (below the daemon's parent).
pub(crate) fn v1(c: &str, parent: &str, rel: &str) -> PathBuf {
    Path::new("/sys/fs/cgroup")
        .join(c)
        .join(parent.trim_start_matches('/'))
        .join(rel)
}

pub(crate) fn read(dir: &Path, file: &str) -> Result<String> {
    let p = dir.join(file);
    Ok(std::fs::read_to_string(&p)
        .with_context(|| format!("read {}", p.display()))?
        .trim()
        .to_string())
}

pub(crate) fn uid(p: &Pod) -> String {
    p.metadata.uid.clone().unwrap_or_default()
}

/// The runtime id of pod `name`'s `main` container.
pub(crate) fn main_id(d: &Daemon, name: &str) -> Result<String> {
    let out = pods::cli(d, &["get", name, "-o", "json"])?;
    let p: Pod = serde_json::from_str(&out)?;
    let id = pods::container(&p, "main")
        .and_then(|c| c.container_id)
        .context("container id")?;
    Ok(id.trim_start_matches("bosun://").to_string())
}

/// The pods of [`qos_pods`].
const QOS_PODS: [&str; 3] = ["guaranteed", "burstable", "besteffort"];

/// A Guaranteed (250m, 64 MiB), a Burstable (100m/200m, 32/96 MiB) and a BestEffort pod,
/// running.
fn qos_pods(d: &Daemon) -> Result<[Pod; 3]> {
    let g = run(
        d,
        &pod(
            "guaranteed",
            "{requests: {cpu: 250m, memory: 64Mi}, limits: {cpu: 250m, memory: 64Mi}}",
            "",
        ),
        "guaranteed",
    )?;
    let b = run(
        d,
        &pod(
            "burstable",
            "{requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 200m, memory: 96Mi}}",
            "",
        ),
        "burstable",
    )?;
    let e = run(d, &pod("besteffort", "{}", ""), "besteffort")?;
    Ok([g, b, e])
}

/// The cgroup (v1 `cpu` hierarchy path) of the pod's `main` container process.
fn container_cgroup(d: &Daemon, name: &str) -> Result<String> {
    let id = main_id(d, name)?;
    let id = id.as_str();
    let dirs = cri::cgroups_below(&d.cgroup_parent());
    let dir = dirs
        .iter()
        .find(|p| p.starts_with("/sys/fs/cgroup/cpu/") && p.ends_with(id))
        .with_context(|| format!("no cpu cgroup of container {id} in {dirs:?}"))?;
    Ok(dir.display().to_string())
}

/// Guaranteed, Burstable and BestEffort pods land in kubepods/pod<uid>,
/// kubepods/burstable/pod<uid> and kubepods/besteffort/pod<uid> with shares from requests,
/// CFS quota and memory limits from limits; kubepods carries allocatable; deleting the pods
/// removes their cgroups.
fn qos_cgroups_v1() -> Result<()> {
    let d = small_node(10, "pod_pids_limit = 64\n")?;
    let r = (|| {
        let parent = d.cgroup_parent();
        let [g, b, e] = qos_pods(&d)?;
        let kubepods = |c: &str| v1(c, &parent, "kubepods");
        // kubepods: capacity less reservations (500m, 512 MiB).
        ensure!(read(&kubepods("cpu"), "cpu.shares")? == "512");
        ensure!(read(&kubepods("memory"), "memory.limit_in_bytes")? == (512i64 << 20).to_string());
        let gdir = |c: &str| v1(c, &parent, &format!("kubepods/pod{}", uid(&g)));
        ensure!(read(&gdir("cpu"), "cpu.shares")? == "256");
        ensure!(read(&gdir("cpu"), "cpu.cfs_quota_us")? == "25000");
        ensure!(read(&gdir("cpu"), "cpu.cfs_period_us")? == "100000");
        ensure!(read(&gdir("memory"), "memory.limit_in_bytes")? == (64i64 << 20).to_string());
        ensure!(read(&gdir("pids"), "pids.max")? == "64");
        let bdir = |c: &str| v1(c, &parent, &format!("kubepods/burstable/pod{}", uid(&b)));
        ensure!(read(&bdir("cpu"), "cpu.shares")? == "102");
        ensure!(read(&bdir("cpu"), "cpu.cfs_quota_us")? == "20000");
        ensure!(read(&bdir("memory"), "memory.limit_in_bytes")? == (96i64 << 20).to_string());
        // The burstable cgroup's shares follow its pods' requests.
        let burstable = v1("cpu", &parent, "kubepods/burstable");
        ensure!(read(&burstable, "cpu.shares")? == "102");
        let edir = |c: &str| v1(c, &parent, &format!("kubepods/besteffort/pod{}", uid(&e)));
        ensure!(read(&edir("cpu"), "cpu.shares")? == "2");
        ensure!(read(&v1("cpu", &parent, "kubepods/besteffort"), "cpu.shares")? == "2");
        // The containers run inside their pods' cgroups.
        for (name, p, qos) in [
            ("guaranteed", &g, ""),
            ("burstable", &b, "burstable/"),
            ("besteffort", &e, "besteffort/"),
        ] {
            let cg = container_cgroup(&d, name)?;
            ensure!(
                cg.contains(&format!("kubepods/{qos}pod{}/", uid(p))),
                "{name}: container cgroup {cg}"
            );
        }
        pods::cli(&d, &[&["delete", "--wait=true"][..], &QOS_PODS].concat())?;
        for dir in [gdir("cpu"), gdir("memory"), bdir("cpu"), edir("pids")] {
            ensure!(!dir.exists(), "left behind: {}", dir.display());
        }
        ensure!(
            read(&burstable, "cpu.shares")? == "2",
            "burstable shares after delete"
        );
        cri::assert_clean(&d)
    })();
    cri::with_log(&d, r)
}

/// runc's and systemd's cgroup v2 weight of cpu `shares`.
fn weight(shares: u64) -> String {
    (1 + (shares.saturating_sub(2) * 9999) / 262_142).to_string()
}

/// [`qos_cgroups_v1`] on the unified hierarchy with the test daemons' driver: kubepods,
/// QoS and pod cgroups (or slices) carry cpu.weight from the shares, cpu.max from the cpu
/// limit, memory.max and pids.max; containers run inside their pod's cgroup; deleting the
/// pods removes the pod cgroups (and, for systemd, their slice units).
fn qos_cgroups_v2() -> Result<()> {
    let d = small_node(10, "pod_pids_limit = 64\n")?;
    let r = (|| {
        let parent = d.cgroup_parent();
        let [g, b, e] = qos_pods(&d)?;
        // systemd names escape the uid's dashes (a dash nests slices).
        let pod_part = |p: &Pod| match cgroup::driver() {
            Driver::Cgroupfs => format!("pod{}", uid(p)),
            Driver::Systemd => format!("pod{}", uid(p).replace('-', "_")),
        };
        let at = |parts: &[&str]| cgroup::parent_dir(&qos_parent(&parent, parts));
        let get = |dir: &str, file: &str| -> Result<String> {
            cgroup::read(dir, "", file).with_context(|| format!("read {dir}/{file}"))
        };
        let check = |dir: &str, file: &str, want: &str| -> Result<()> {
            let got = get(dir, file)?;
            ensure!(got == want, "{dir}/{file}: {got:?}, want {want:?}");
            Ok(())
        };
        // kubepods: capacity less reservations (500m, 512 MiB).
        let kubepods = at(&["kubepods"]);
        check(&kubepods, "cpu.weight", &weight(512))?;
        check(&kubepods, "memory.max", &(512u64 << 20).to_string())?;
        let (gp, bp, ep) = (pod_part(&g), pod_part(&b), pod_part(&e));
        let gdir = at(&["kubepods", &gp]);
        check(&gdir, "cpu.weight", &weight(256))?;
        check(&gdir, "cpu.max", "25000 100000")?;
        check(&gdir, "memory.max", &(64u64 << 20).to_string())?;
        check(&gdir, "pids.max", "64")?;
        let bdir = at(&["kubepods", "burstable", &bp]);
        check(&bdir, "cpu.weight", &weight(102))?;
        check(&bdir, "cpu.max", "20000 100000")?;
        check(&bdir, "memory.max", &(96u64 << 20).to_string())?;
        // The burstable cgroup's weight follows its pods' requests.
        let burstable = at(&["kubepods", "burstable"]);
        check(&burstable, "cpu.weight", &weight(102))?;
        let edir = at(&["kubepods", "besteffort", &ep]);
        check(&edir, "cpu.weight", &weight(2))?;
        check(&at(&["kubepods", "besteffort"]), "cpu.weight", &weight(2))?;
        // The containers run inside their pods' cgroups.
        for (name, parts) in [
            ("guaranteed", vec!["kubepods", &gp]),
            ("burstable", vec!["kubepods", "burstable", &bp]),
            ("besteffort", vec!["kubepods", "besteffort", &ep]),
        ] {
            let dir = cgroup::container_dir(&qos_parent(&parent, &parts), &main_id(&d, name)?);
            let procs = get(&dir, "cgroup.procs")?;
            ensure!(!procs.is_empty(), "{name}: no process in {dir}");
        }
        pods::cli(&d, &[&["delete", "--wait=true"][..], &QOS_PODS].concat())?;
        // The pod leaves the API before its worker releases its cgroup, and systemd stops
        // a slice after StopUnit returns: the cgroups go shortly after the delete.
        let gone = || -> Vec<String> {
            let mut left: Vec<String> = [&gdir, &bdir, &edir]
                .iter()
                .map(|dir| Path::new(cgroup::ROOT).join(dir.trim_start_matches('/')))
                .filter(|p| p.exists())
                .map(|p| p.display().to_string())
                .collect();
            if let Some(base) = parent.strip_suffix(".slice") {
                for qos in [
                    "kubepods-pod",
                    "kubepods-burstable-pod",
                    "kubepods-besteffort-pod",
                ] {
                    left.extend(cgroup::units_with_prefix(&format!("{base}-{qos}")));
                }
            }
            if get(&burstable, "cpu.weight").ok() != Some(weight(2)) {
                left.push(format!("{burstable} cpu.weight (want {})", weight(2)));
            }
            left
        };
        let deleted = std::time::Instant::now();
        ensure!(
            crate::support::wait_until(5, || gone().is_empty()),
            "{:?} after the delete: {:?}",
            deleted.elapsed(),
            gone()
        );
        eprintln!("pod cgroups gone {:?} after the delete", deleted.elapsed());
        cri::assert_clean(&d)
    })();
    cri::with_log(&d, r)
}
