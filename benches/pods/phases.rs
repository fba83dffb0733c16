//! The measured phases, per runtime: latency series, memory at N running pods, ListContainers at scale.

use std::collections::BTreeMap;
use std::time::{Duration, Instant, UNIX_EPOCH};

use anyhow::ensure;

use crate::bare::Bundle;
use crate::cri::{Cri, Pod, SLEEP, TERM_HONOURING, TERM_IGNORING};
use crate::daemons::{Daemon, Kind};
use crate::measure::{ms, percentile, settle};
use crate::procs::{self, RssPss};
use crate::report::{
    Report, Unit, BARE_ROW, MIB, SAME_BUNDLE_ADDED, SAME_BUNDLE_PAIRED, SAME_BUNDLE_RATIO,
    SAME_BUNDLE_ROW,
};
use crate::Opts;

/// How long a started shell gets to install its trap before it is stopped.
const TRAP_SETTLE: Duration = Duration::from_millis(300);
/// Pause before memory is read at a checkpoint.
const MEM_SETTLE: Duration = Duration::from_secs(2);
/// The list phase stops creating containers when the machine has less than this available.
const MEM_FLOOR: f64 = 2048.0 * MIB;

/// p50 and p95 rows of `samples` (ms).
pub fn p50_p95(report: &mut Report, d: &Daemon, name: &str, samples: &[f64]) {
    for (p, label) in [(0.5, "p50"), (0.95, "p95")] {
        report.record(
            &format!("{name} {label}"),
            Unit::Ms,
            d.kind,
            percentile(samples, p),
        );
    }
}

/// A 95 % confidence interval for the median of `v`, from order statistics (no assumption on
/// the distribution; the binomial's normal approximation, fair from ~10 samples up).
pub fn median_ci95(v: &[f64]) -> (f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len() as f64;
    let half = 1.96 * n.sqrt() / 2.0;
    // 1-based ranks, clamped to the samples there are.
    let lo = ((n / 2.0 - half).round() as usize).clamp(1, s.len().max(1));
    let hi = ((1.0 + n / 2.0 + half).round() as usize).clamp(1, s.len().max(1));
    match (s.get(lo - 1), s.get(hi - 1)) {
        (Some(&l), Some(&h)) => (l, h),
        _ => (f64::NAN, f64::NAN),
    }
}

/// One pod with a running `sleep 3600`, removed again: warms caches and snapshots, not timed.
pub async fn warm_up(cri: &mut Cri, host_net: bool) -> anyhow::Result<()> {
    let cfg = cri.pod_config("warm", host_net)?;
    let (pod, _) = cri.run_pod(cfg).await?;
    let (id, _) = cri.create(&pod, "sleep", &SLEEP).await?;
    cri.start(&id).await?;
    cri.stop_pod(&pod.id).await?;
    cri.remove_pod(&pod.id).await?;
    Ok(())
}

/// The latency series over `opts.pods` pods: RunPodSandbox, Create+Start (and the bare runc
/// baseline next to it), StopContainer of TERM-honouring and TERM-ignoring containers,
/// StopPodSandbox and RemovePodSandbox; then RunPodSandbox and RemovePodSandbox with host network.
pub async fn latency(
    d: &Daemon,
    cri: &mut Cri,
    bundle: &mut Bundle,
    opts: &Opts,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let n = opts.pods;
    let net = if host_net { ", host network" } else { "" };
    settle().await;
    let mut pods: Vec<Pod> = Vec::with_capacity(n);
    let mut run = Vec::with_capacity(n);
    for _ in 0..n {
        let cfg = cri.pod_config("lat", host_net)?;
        let (pod, took) = cri.run_pod(cfg).await?;
        run.push(ms(took));
        if !host_net {
            // A pod without an address would make the figure meaningless.
            let ip = cri.pod_ip(&pod.id).await?;
            anyhow::ensure!(
                !ip.is_empty(),
                "{}: pod {} got no IP from CNI",
                d.kind.name(),
                pod.id
            );
        }
        pods.push(pod);
    }
    p50_p95(report, d, &format!("RunPodSandbox{net}"), &run);

    // Interleaved: each Create+Start is followed by a bare `runc run` (and for bosun one of
    // its own config.json), so a change of load on the machine hits every series alike; and
    // each sample starts settled (sync, 0.5 s), not in the wake of the one before (a bare
    // run's container is deleted right after it: its teardown would slow whatever is next).
    let (mut create, mut start, mut both) = (Vec::new(), Vec::new(), Vec::new());
    let (mut bare, mut same) = (Vec::with_capacity(n), Vec::with_capacity(n));
    // The comparison: runc run of the very bundle bosun wrote (its config.json, same
    // namespaces joined, same mounts, devices, cgroup settings), busybox as the root.
    let mut same_config: Option<serde_json::Value> = None;
    for pod in &pods {
        settle().await;
        let (id, c) = cri.create(pod, "sleep", &SLEEP).await?;
        let s = cri.start(&id).await?;
        create.push(ms(c));
        start.push(ms(s));
        both.push(ms(c + s));
        if d.kind == Kind::Bosun && same_config.is_none() {
            let path = d
                .dir()
                .join("state/containers")
                .join(&id)
                .join("bundle/config.json");
            same_config = Some(serde_json::from_slice(&std::fs::read(&path)?)?);
        }
        settle().await;
        bare.push(ms(bundle.run_once()?));
        if let Some(config) = &same_config {
            settle().await;
            same.push(ms(bundle.run_config_once(config)?));
        }
    }
    p50_p95(report, d, "CreateContainer", &create);
    p50_p95(report, d, "StartContainer", &start);
    p50_p95(report, d, "CreateContainer+StartContainer", &both);
    p50_p95(report, d, BARE_ROW, &bare);
    let ratio = percentile(&both, 0.5) / percentile(&bare, 0.5);
    report.record("Create+Start ÷ bare runc run (p50)", Unit::X, d.kind, ratio);
    if !same.is_empty() {
        p50_p95(report, d, SAME_BUNDLE_ROW, &same);
        let ratio = percentile(&both, 0.5) / percentile(&same, 0.5);
        report.record(SAME_BUNDLE_RATIO, Unit::X, d.kind, ratio);
        // Paired per sample (each Create+Start with the same-bundle run right after it): what
        // bosun adds, free of runc's own spread between samples (20–50 ms here).
        let added: Vec<f64> = both.iter().zip(&same).map(|(b, s)| b - s).collect();
        p50_p95(report, d, SAME_BUNDLE_ADDED, &added);
        let paired: Vec<f64> = both.iter().zip(&same).map(|(b, s)| b / s).collect();
        report.record(
            SAME_BUNDLE_PAIRED,
            Unit::X,
            d.kind,
            percentile(&paired, 0.5),
        );
        // runc alone spreads 25–50 ms here: how far the median ratio can be trusted.
        let (lo, hi) = median_ci95(&paired);
        report.record(
            &format!("{SAME_BUNDLE_PAIRED}, 95 % CI low"),
            Unit::X,
            d.kind,
            lo,
        );
        report.record(
            &format!("{SAME_BUNDLE_PAIRED}, 95 % CI high"),
            Unit::X,
            d.kind,
            hi,
        );
    }

    // TERM honoured: all started first, so each shell has had time to set its trap.
    let mut ids = Vec::with_capacity(n);
    for pod in &pods {
        let (id, _) = cri.create(pod, "term", &TERM_HONOURING).await?;
        cri.start(&id).await?;
        ids.push(id);
    }
    tokio::time::sleep(TRAP_SETTLE).await;
    settle().await;
    let mut stop = Vec::with_capacity(n);
    let mut codes: BTreeMap<i32, usize> = BTreeMap::new();
    for id in &ids {
        let (_, _, took) = cri.stop(id, 10).await?;
        stop.push(ms(took));
        let (s, _) = cri.wait_exited(id).await?;
        *codes.entry(s.exit_code).or_default() += 1;
    }
    p50_p95(
        report,
        d,
        "StopContainer, TERM honoured (timeout 10 s)",
        &stop,
    );
    report.note(format!(
        "{}: exit codes after StopContainer of the TERM-honouring containers (want 0): {codes:?}.",
        d.kind.name()
    ));

    // TERM ignored: only the KILL at the 1 s deadline ends them.
    let mut ids = Vec::with_capacity(n);
    for pod in &pods {
        let (id, _) = cri.create(pod, "noterm", &TERM_IGNORING).await?;
        cri.start(&id).await?;
        ids.push(id);
    }
    tokio::time::sleep(TRAP_SETTLE).await;
    settle().await;
    let (mut returned, mut seen, mut finished) = (Vec::new(), Vec::new(), Vec::new());
    let mut codes: BTreeMap<i32, usize> = BTreeMap::new();
    for id in &ids {
        let (wall, t0, took) = cri.stop(id, 1).await?;
        let (s, seen_at) = cri.wait_exited(id).await?;
        let deadline = t0 + Duration::from_secs(1);
        returned.push(ms(took) - 1000.0);
        seen.push(signed_ms(seen_at, deadline));
        let start_ns = wall.duration_since(UNIX_EPOCH)?.as_nanos() as f64;
        finished.push((s.finished_at as f64 - start_ns) / 1e6 - 1000.0);
        *codes.entry(s.exit_code).or_default() += 1;
    }
    for (what, v) in [
        ("StopContainer returned", &returned),
        ("seen EXITED", &seen),
        ("finished_at", &finished),
    ] {
        for (p, label) in [(0.5, "p50"), (0.95, "p95")] {
            let row = format!("KILL lateness {label}: {what}");
            report.record(&row, Unit::Ms, d.kind, percentile(v, p));
        }
    }
    report.note(format!(
        "{}: exit codes after StopContainer (timeout 1 s) of the TERM-ignoring containers \
         (want 137): {codes:?}.",
        d.kind.name()
    ));

    // RemoveContainer of the exited containers (as critest's benchmark does after a stop).
    settle().await;
    let mut rm = Vec::with_capacity(n);
    for id in &ids {
        rm.push(ms(cri.remove_container(id).await?));
    }
    p50_p95(report, d, "RemoveContainer (exited)", &rm);

    settle().await;
    let (mut stopp, mut rmp) = (Vec::new(), Vec::new());
    for pod in &pods {
        stopp.push(ms(cri.stop_pod(&pod.id).await?));
        rmp.push(ms(cri.remove_pod(&pod.id).await?));
    }
    p50_p95(report, d, "StopPodSandbox (3 containers)", &stopp);
    p50_p95(report, d, "RemovePodSandbox (after StopPodSandbox)", &rmp);

    // The same pods with the host's network: no netns, no CNI, on both sides.
    if !host_net {
        settle().await;
        let mut pods = Vec::with_capacity(n);
        let mut run = Vec::with_capacity(n);
        for _ in 0..n {
            let cfg = cri.pod_config("host", true)?;
            let (pod, took) = cri.run_pod(cfg).await?;
            run.push(ms(took));
            pods.push(pod);
        }
        p50_p95(report, d, "RunPodSandbox, host network", &run);
        settle().await;
        let mut rmp = Vec::with_capacity(n);
        for pod in &pods {
            cri.stop_pod(&pod.id).await?;
            rmp.push(ms(cri.remove_pod(&pod.id).await?));
        }
        p50_p95(report, d, "RemovePodSandbox, host network", &rmp);
    }
    Ok(())
}

/// Daemon growth and helper processes at each of `opts.mem_pods` running pods (one `sleep
/// 3600` each), per pod.
pub async fn memory(
    d: &Daemon,
    cri: &mut Cri,
    opts: &Opts,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    settle().await;
    tokio::time::sleep(MEM_SETTLE).await;
    let base = procs::rss_pss(d.pid())?;
    let most = opts.mem_pods.iter().copied().max().unwrap_or(0);
    let mut running = 0;
    for &at in &opts.mem_pods {
        while running < at {
            let cfg = cri.pod_config("mem", host_net)?;
            let (pod, _) = cri.run_pod(cfg).await?;
            let (id, _) = cri.create(&pod, "sleep", &SLEEP).await?;
            cri.start(&id).await?;
            running += 1;
        }
        tokio::time::sleep(MEM_SETTLE).await;
        let now = procs::rss_pss(d.pid())?;
        let found = procs::helpers(d.kind, d.dir(), d.pid());
        let mut helpers = RssPss::default();
        let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
        for (&pid, label) in &found {
            // A helper that exits between listing and reading counts as nothing.
            if let Ok(m) = procs::rss_pss(pid) {
                helpers += m;
                *kinds.entry(label.as_str()).or_default() += 1;
            }
        }
        let per = |daemon: f64, helpers: f64| (daemon + helpers) / at as f64 / MIB;
        let k = d.kind;
        let row = |what: &str| format!("per pod at {at} pods: {what}");
        report.record(
            &row("RSS"),
            Unit::MiB,
            k,
            per(now.rss - base.rss, helpers.rss),
        );
        report.record(
            &row("PSS"),
            Unit::MiB,
            k,
            per(now.pss - base.pss, helpers.pss),
        );
        report.record(
            &row("daemon RSS growth"),
            Unit::MiB,
            k,
            per(now.rss - base.rss, 0.0),
        );
        report.record(&row("helper RSS"), Unit::MiB, k, per(0.0, helpers.rss));
        report.record(&row("helper PSS"), Unit::MiB, k, per(0.0, helpers.pss));
        report.record(
            &row("helper processes"),
            Unit::N,
            k,
            found.len() as f64 / at as f64,
        );
        report.note(format!(
            "{} at {at} running pods: helpers {kinds:?}; daemon RSS {:.1} → {:.1} MiB, PSS {:.1} → {:.1} MiB.",
            k.name(),
            base.rss / MIB,
            now.rss / MIB,
            base.pss / MIB,
            now.pss / MIB
        ));
        if found.len() < at {
            report.note(format!(
                "{}: only {} helper processes found for {at} pods: the per-pod figures miss some.",
                k.name(),
                found.len()
            ));
        }
    }
    if d.kind == Kind::Bosun {
        // Not in the per-pod figures: one per daemon, made by its first StartContainer.
        let mut spare = RssPss::default();
        for pid in procs::spares(d.pid()) {
            spare += procs::rss_pss(pid).unwrap_or_default();
        }
        report.record(
            "spare monitor (one per daemon): RSS",
            Unit::MiB,
            d.kind,
            spare.rss / MIB,
        );
        report.record(
            "spare monitor (one per daemon): PSS",
            Unit::MiB,
            d.kind,
            spare.pss / MIB,
        );
    }
    let t = Instant::now();
    cri.remove_all().await?;
    report.note(format!(
        "{}: stopping and removing the {most} memory-phase pods took {:.1} s.",
        d.kind.name(),
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `opts.list_pods` × `opts.list_per_pod` created (not started) containers, then ListContainers
/// latency over `opts.list_calls` calls.
pub async fn list(
    d: &Daemon,
    cri: &mut Cri,
    opts: &Opts,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let k = d.kind;
    let want = opts.list_pods * opts.list_per_pod;
    settle().await;
    let before = procs::mem_available();
    let t = Instant::now();
    let mut made = 0;
    'fill: for _ in 0..opts.list_pods {
        let cfg = cri.pod_config("list", host_net)?;
        let (pod, _) = cri.run_pod(cfg).await?;
        for c in 0..opts.list_per_pod {
            cri.create(&pod, &format!("c{c}"), &SLEEP).await?;
            made += 1;
            if made % 50 == 0 && procs::mem_available() < MEM_FLOOR {
                report.note(format!(
                    "{}: list phase stopped at {made} of {want} containers: under 2 GiB available.",
                    k.name()
                ));
                break 'fill;
            }
        }
    }
    let fill = t.elapsed();
    let after = procs::mem_available();
    report.record(
        &format!("CreateContainer mean, filling to {want}"),
        Unit::Ms,
        k,
        ms(fill) / made.max(1) as f64,
    );
    report.record(
        &format!("machine memory used by {want} created containers (MemAvailable drop)"),
        Unit::MiB,
        k,
        (before - after) / MIB,
    );
    report.record(
        "machine memory per created container (MemAvailable drop ÷ containers)",
        Unit::MiB,
        k,
        (before - after) / MIB / made.max(1) as f64,
    );
    report.record(
        &format!("daemon RSS with {want} containers"),
        Unit::MiB,
        k,
        d.mem()?.rss / MIB,
    );
    settle().await;
    let (count, bytes, _) = cri.list_containers().await?;
    ensure!(
        count >= made,
        "{k:?} lists {count} containers, {made} were created"
    );
    for _ in 0..opts.list_calls / 10 {
        cri.list_containers().await?;
    }
    let mut us = Vec::with_capacity(opts.list_calls);
    for _ in 0..opts.list_calls {
        let (_, _, took) = cri.list_containers().await?;
        us.push(took.as_secs_f64() * 1e6);
    }
    report.record("containers listed", Unit::N, k, count as f64);
    report.record(
        "ListContainers response size (KiB)",
        Unit::N,
        k,
        (bytes / 1024) as f64,
    );
    for (p, label) in [(0.5, "p50"), (0.95, "p95")] {
        report.record(
            &format!("ListContainers {label}"),
            Unit::Us,
            k,
            percentile(&us, p),
        );
    }
    let t = Instant::now();
    cri.remove_all().await?;
    report.note(format!(
        "{}: {made} containers in {} pods created in {:.1} s (machine MemAvailable {:.0} → {:.0} \
         MiB); stopping and removing them took {:.1} s.",
        k.name(),
        opts.list_pods,
        fill.as_secs_f64(),
        before / MIB,
        after / MIB,
        t.elapsed().as_secs_f64()
    ));
    Ok(())
}

/// `a − b` in ms, negative when `a` is earlier.
fn signed_ms(a: Instant, b: Instant) -> f64 {
    ms(a.saturating_duration_since(b)) - ms(b.saturating_duration_since(a))
}
