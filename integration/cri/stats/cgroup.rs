//! ContainerStats, PodSandboxStats and their list calls (with filters) against the cgroup
//! files read around each answer, and the same figures in `/metrics`.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cgroup;
use crate::support::cri::{self, Rt, NEEDS};
use crate::support::stats::{between, container_stats, sample, scrape, v};
use crate::support::{block_on, trial, wait_until, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::stats::container_and_pod_stats_equal_the_cgroup_files",
        NEEDS,
        stats_equal_cgroup_files,
    )]
}

/// Bytes the memory container keeps in its tmpfs (the pod's 64 MiB /dev/shm).
const SHM_BYTES: u64 = 48 << 20;

/// Slack between a cgroup file read by the test and the daemon's reading of it.
const MEM_SLACK: u64 = 2 << 20;

async fn pod_stats(rt: &mut Rt, id: &str) -> Result<pb::PodSandboxStats> {
    rt.pod_sandbox_stats(pb::PodSandboxStatsRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .with_context(|| format!("PodSandboxStats {id}"))?
    .into_inner()
    .stats
    .context("PodSandboxStats without stats")
}

async fn list_ids(rt: &mut Rt, filter: pb::ContainerStatsFilter) -> Result<Vec<String>> {
    let mut ids: Vec<String> = rt
        .list_container_stats(pb::ListContainerStatsRequest {
            filter: Some(filter),
        })
        .await
        .context("ListContainerStats")?
        .into_inner()
        .stats
        .into_iter()
        .filter_map(|s| s.attributes.map(|a| a.id))
        .collect();
    ids.sort();
    Ok(ids)
}

fn stats_equal_cgroup_files() -> Result<()> {
    let d = cri::daemon_with("metrics_address = \"127.0.0.1:0\"\n")?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(&d, block_on(run(&d, &busybox)))
}

async fn run(d: &Daemon, busybox: &str) -> Result<()> {
    let mut rt = cri::client(d).await?;
    let mut config = cri::pod_config(d, "stats");
    let uid = config
        .metadata
        .as_ref()
        .map(|m| m.uid.clone())
        .unwrap_or_default();
    // A cgroup of the pod's own, as the kubelet gives each pod (in the driver's form).
    let pod_cgroup = cgroup::pod_parent(&d.cgroup_parent(), &uid);
    let pod_dir = cgroup::parent_dir(&pod_cgroup);
    if let Some(l) = config.linux.as_mut() {
        l.cgroup_parent = pod_cgroup.clone();
    }
    let pod = cri::run_pod(&mut rt, config).await?;

    let script = format!(
        "dd if=/dev/zero of=/dev/shm/blob bs=1M count={} 2>/dev/null && echo ready && exec sleep 100000",
        SHM_BYTES >> 20
    );
    let mut mem_cfg = cri::sh_config(&pod, "mem", busybox, &script);
    mem_cfg.labels = cri::map(&[("role", "memory")]);
    let mut burn_cfg = cri::sh_config(&pod, "burn", busybox, "while :; do :; done");
    burn_cfg.labels = cri::map(&[("role", "burner")]);
    let mem = cri::create_start(&mut rt, &pod, &mem_cfg).await?;
    let burn_started = Instant::now();
    let burn = cri::create_start(&mut rt, &pod, &burn_cfg).await?;
    cri::wait_log(&pod.log_of(&mem_cfg), 20, |l| {
        l.iter().any(|x| x == "ready")
    })
    .await?;
    let (mem_cg, burn_cg) = (
        cgroup::container_dir(&pod_cgroup, &mem),
        cgroup::container_dir(&pod_cgroup, &burn),
    );
    let mut stats_calls = 0;

    // Memory: usage, working set and RSS equal the cgroup files read around the call.
    let files_before = cgroup::memory(&mem_cg)?;
    let s = container_stats(&mut rt, &mem).await?;
    stats_calls += 1;
    let files_after = cgroup::memory(&mem_cg)?;
    let (before, after) = (files_before.usage, files_after.usage);
    let m = s.memory.as_ref().context("no memory stats")?;
    let usage = v(&m.usage_bytes).context("no usage")?;
    eprintln!("mem container: usage {usage} (files {before}, {after}), stats {m:?}");
    ensure!(
        usage >= SHM_BYTES,
        "usage {usage} < the {SHM_BYTES} bytes written to tmpfs"
    );
    between("memory usage", usage, before, after, MEM_SLACK)?;
    between(
        "working set",
        v(&m.working_set_bytes).context("no working set")?,
        files_before.working_set(),
        files_after.working_set(),
        MEM_SLACK,
    )?;
    between(
        "rss",
        v(&m.rss_bytes).context("no rss")?,
        files_before.rss,
        files_after.rss,
        MEM_SLACK,
    )?;
    between(
        "page faults",
        v(&m.page_faults).context("no page faults")?,
        files_before.pgfault,
        files_after.pgfault,
        1000,
    )?;
    // Pressure stall information: cgroup v2 has it, v1 does not.
    ensure!(
        m.psi.is_some() == cgroup::unified(),
        "memory PSI {:?} on a {} host",
        m.psi,
        if cgroup::unified() { "v2" } else { "v1" }
    );
    ensure!(
        v(&m.available_bytes).is_none(),
        "no limit set, yet available bytes: {m:?}"
    );

    // CPU: cumulative equals cpuacct.usage, grows, and stays under wall time × cores; the
    // rate of a busy loop is about one core.
    let s1 = container_stats(&mut rt, &burn).await?;
    let f1 = cgroup::cpu_usage_ns(&burn_cg)?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let s2 = container_stats(&mut rt, &burn).await?;
    stats_calls += 2;
    let wall = burn_started.elapsed();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u64;
    let cpu = |s: &pb::ContainerStats| s.cpu.as_ref().and_then(|c| v(&c.usage_core_nano_seconds));
    let (c1, c2) = (cpu(&s1).context("no cpu")?, cpu(&s2).context("no cpu")?);
    eprintln!(
        "burn container: cpu {c1} then {c2} ns; cgroup cpu usage {f1}; {:?}",
        s2.cpu
    );
    ensure!(
        c1 <= f1 && f1 - c1 < 500_000_000,
        "cpu {c1} vs the cgroup's cpu usage {f1} read after"
    );
    ensure!(c2 > c1, "cpu usage did not grow: {c1} → {c2}");
    ensure!(
        u128::from(c2) <= wall.as_nanos() * u128::from(cores),
        "cpu {c2} ns exceeds wall time {wall:?} × {cores} cores"
    );
    let rate = s2
        .cpu
        .as_ref()
        .and_then(|c| v(&c.usage_nano_cores))
        .context("no usage_nano_cores on the second sample")?;
    ensure!(
        rate > 300_000_000 && rate <= cores * 1_050_000_000,
        "a busy loop uses {rate} nano cores"
    );

    // Writable layer: grows by the 5 MiB file the container writes.
    let layer = |s: &pb::ContainerStats| {
        s.writable_layer.as_ref().map(|l| {
            (
                v(&l.used_bytes).unwrap_or(0),
                v(&l.inodes_used).unwrap_or(0),
            )
        })
    };
    let (b0, i0) = layer(&s).context("no writable layer")?;
    let r = cri::exec(
        &mut rt,
        &mem,
        &["dd", "if=/dev/zero", "of=/big", "bs=1M", "count=5"],
        20,
    )
    .await?;
    ensure!(
        r.exit_code == 0,
        "dd: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    tokio::time::sleep(bosun::runtime::stats::LAYER_TTL + Duration::from_millis(200)).await;
    let s3 = container_stats(&mut rt, &mem).await?;
    stats_calls += 1;
    let (b1, i1) = layer(&s3).context("no writable layer")?;
    eprintln!("writable layer: {b0} bytes {i0} inodes → {b1} bytes {i1} inodes");
    ensure!(
        b1 >= b0 + (5 << 20),
        "layer grew from {b0} to {b1} bytes after a 5 MiB write"
    );
    ensure!(i1 > i0, "inodes {i0} → {i1}");

    // Filters: by pod, by label, by id prefix.
    let mut both = vec![mem.clone(), burn.clone()];
    both.sort();
    let by_pod = pb::ContainerStatsFilter {
        pod_sandbox_id: pod.id[..12].to_string(),
        ..Default::default()
    };
    ensure!(list_ids(&mut rt, by_pod).await? == both, "filter by pod");
    let by_label = pb::ContainerStatsFilter {
        label_selector: cri::map(&[("role", "burner")]),
        ..Default::default()
    };
    ensure!(
        list_ids(&mut rt, by_label).await? == vec![burn.clone()],
        "filter by label"
    );
    let by_id = pb::ContainerStatsFilter {
        id: mem[..10].to_string(),
        ..Default::default()
    };
    ensure!(
        list_ids(&mut rt, by_id).await? == vec![mem.clone()],
        "filter by id"
    );

    // Pod: its cgroup's totals, its containers, process count, loopback counters that grow.
    let lo = |p: &pb::PodSandboxStats| {
        p.linux
            .as_ref()
            .and_then(|l| l.network.as_ref())
            .and_then(|n| n.interfaces.iter().find(|i| i.name == "lo"))
            .map(|i| (v(&i.rx_bytes).unwrap_or(0), v(&i.tx_bytes).unwrap_or(0)))
    };
    let p0 = pod_stats(&mut rt, &pod.id).await?;
    let (rx0, tx0) = lo(&p0).context("no lo counters in the pod's stats")?;
    let r = cri::exec(
        &mut rt,
        &mem,
        &[
            "sh",
            "-c",
            "httpd -p 127.0.0.1:8080 -h / && wget -q -O /dev/null http://127.0.0.1:8080/bin/busybox",
        ],
        20,
    )
    .await?;
    ensure!(
        r.exit_code == 0,
        "traffic: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let pids_before = cgroup::read_u64(&pod_dir, "pids", "pids.current")?;
    let mem_before = cgroup::memory(&pod_dir)?.usage;
    let p1 = pod_stats(&mut rt, &pod.id).await?;
    let pids_after = cgroup::read_u64(&pod_dir, "pids", "pids.current")?;
    let mem_after = cgroup::memory(&pod_dir)?.usage;
    let (rx1, tx1) = lo(&p1).context("no lo counters")?;
    eprintln!("pod lo: rx {rx0} → {rx1}, tx {tx0} → {tx1}");
    ensure!(
        rx1 >= rx0 + 500_000 && tx1 >= tx0 + 500_000,
        "lo rx {rx0}→{rx1} tx {tx0}→{tx1}"
    );
    let linux = p1.linux.as_ref().context("no linux stats")?;
    let mut ids: Vec<String> = linux
        .containers
        .iter()
        .filter_map(|c| c.attributes.as_ref().map(|a| a.id.clone()))
        .collect();
    ids.sort();
    ensure!(ids == both, "pod containers {ids:?}, want {both:?}");
    let procs = linux
        .process
        .as_ref()
        .and_then(|p| v(&p.process_count))
        .context("no process count")?;
    between("pod process count", procs, pids_before, pids_after, 0)?;
    let pod_mem = linux
        .memory
        .as_ref()
        .and_then(|m| v(&m.usage_bytes))
        .context("pod memory")?;
    between(
        "pod memory usage",
        pod_mem,
        mem_before,
        mem_after,
        MEM_SLACK,
    )?;
    ensure!(
        pod_mem >= usage,
        "pod memory {pod_mem} < its container's {usage}"
    );
    let listed = rt
        .list_pod_sandbox_stats(pb::ListPodSandboxStatsRequest {
            filter: Some(pb::PodSandboxStatsFilter {
                id: pod.id.clone(),
                ..Default::default()
            }),
        })
        .await?
        .into_inner()
        .stats;
    ensure!(
        listed.len() == 1,
        "ListPodSandboxStats by id: {} pods",
        listed.len()
    );
    // The streaming variants serve the same items in pages.
    let mut pages = rt
        .stream_pod_sandbox_stats(pb::StreamPodSandboxStatsRequest {
            filter: Some(pb::PodSandboxStatsFilter {
                id: pod.id.clone(),
                ..Default::default()
            }),
        })
        .await?
        .into_inner();
    let mut streamed = Vec::new();
    while let Some(p) = pages.message().await? {
        streamed.extend(p.pod_sandbox_stats);
    }
    ensure!(
        streamed.len() == 1
            && streamed[0].attributes.as_ref().map(|a| a.id.as_str()) == Some(pod.id.as_str()),
        "StreamPodSandboxStats by id: {} pods",
        streamed.len()
    );
    let listed_ids = list_ids(&mut rt, pb::ContainerStatsFilter::default()).await?;
    let mut pages = rt
        .stream_container_stats(pb::StreamContainerStatsRequest { filter: None })
        .await?
        .into_inner();
    let mut streamed_ids = Vec::new();
    while let Some(p) = pages.message().await? {
        streamed_ids.extend(
            p.container_stats
                .into_iter()
                .filter_map(|s| s.attributes.map(|a| a.id)),
        );
    }
    streamed_ids.sort();
    ensure!(
        streamed_ids == listed_ids,
        "StreamContainerStats {streamed_ids:?} != {listed_ids:?}"
    );
    let mut pages = rt
        .stream_pod_sandbox_metrics(pb::StreamPodSandboxMetricsRequest {})
        .await?
        .into_inner();
    let mut metric_pods = 0;
    while let Some(p) = pages.message().await? {
        metric_pods += p
            .pod_sandbox_metrics
            .iter()
            .filter(|m| m.pod_sandbox_id == pod.id)
            .count();
    }
    ensure!(
        metric_pods == 1,
        "StreamPodSandboxMetrics: our pod {metric_pods} times"
    );

    // Metrics over CRI: descriptors with cadvisor's names; samples line up with them.
    let descs = rt
        .list_metric_descriptors(pb::ListMetricDescriptorsRequest {})
        .await?
        .into_inner()
        .descriptors;
    let keys: HashMap<&str, usize> = descs
        .iter()
        .map(|d| (d.name.as_str(), d.label_keys.len()))
        .collect();
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_memory_usage_bytes",
        "container_memory_rss",
        "container_spec_memory_limit_bytes",
        "container_fs_usage_bytes",
        "container_processes",
        "container_network_receive_bytes_total",
    ] {
        ensure!(keys.contains_key(name), "no descriptor {name}");
    }
    let metrics = rt
        .list_pod_sandbox_metrics(pb::ListPodSandboxMetricsRequest {})
        .await?
        .into_inner()
        .pod_metrics;
    let ours = metrics
        .iter()
        .find(|m| m.pod_sandbox_id == pod.id)
        .context("our pod has no metrics")?;
    ensure!(
        ours.container_metrics.len() == 2,
        "{} containers",
        ours.container_metrics.len()
    );
    let mem_metrics = ours
        .container_metrics
        .iter()
        .find(|c| c.container_id == mem)
        .context("no metrics for the memory container")?;
    for m in ours.metrics.iter().chain(mem_metrics.metrics.iter()) {
        ensure!(
            keys.get(m.name.as_str()) == Some(&m.label_values.len()),
            "metric {} has {} label values, its descriptor {:?} keys",
            m.name,
            m.label_values.len(),
            keys.get(m.name.as_str())
        );
    }
    let procs_metric = mem_metrics
        .metrics
        .iter()
        .find(|m| m.name == "container_processes")
        .and_then(|m| v(&m.value))
        .context("no container_processes")?;
    let tasks = cgroup::read_u64(&mem_cg, "pids", "pids.current")?;
    ensure!(
        procs_metric == tasks,
        "container_processes {procs_metric}, pids.current {tasks}"
    );
    ensure!(
        ours.metrics
            .iter()
            .any(|m| m.name == "container_network_receive_bytes_total"
                && m.label_values.last().map(String::as_str) == Some("lo")),
        "no lo receive counter among the pod metrics"
    );

    // /metrics counts the calls this test made, by method and code.
    let missing = rt
        .container_stats(pb::ContainerStatsRequest {
            container_id: "0123456789abcdef".into(),
        })
        .await
        .expect_err("unknown container");
    ensure!(missing.code() == tonic::Code::NotFound, "{missing:?}");
    let prefix = |method: &str, code: &str| {
        format!(
            "bosun_cri_requests_total{{service=\"runtime.v1.RuntimeService\",method=\"{method}\",code=\"{code}\"}}"
        )
    };
    let mut text = String::new();
    let want = stats_calls as f64;
    let counted = wait_until(5, || {
        text = scrape(d).unwrap_or_default();
        sample(&text, &prefix("ContainerStats", "OK")) == Some(want)
            && sample(&text, &prefix("ContainerStats", "NotFound")) == Some(1.0)
    });
    if !counted {
        bail!("/metrics does not count {stats_calls} ContainerStats OK and 1 NotFound:\n{text}");
    }
    for (line, want) in [
        (prefix("RunPodSandbox", "OK"), 1.0),
        (prefix("ListPodSandboxMetrics", "OK"), 1.0),
        ("bosun_containers{state=\"running\"}".to_string(), 2.0),
        ("bosun_pod_sandboxes{state=\"ready\"}".to_string(), 1.0),
        (
            "bosun_pod_sandbox_run_duration_seconds_count".to_string(),
            1.0,
        ),
    ] {
        ensure!(
            sample(&text, &line) == Some(want),
            "{line} is not {want} in\n{text}"
        );
    }
    ensure!(
        sample(&text, "bosun_cri_request_duration_seconds_count{service=\"runtime.v1.RuntimeService\",method=\"ContainerStats\",code=\"OK\"}")
            == Some(want),
        "no latency histogram for ContainerStats:\n{text}"
    );

    cri::remove_pod(&mut rt, &pod.id).await?;
    // The pod cgroup is the kubelet's to remove (bosun made none of its own); the daemon's
    // drop would scrub it too.
    cgroup::remove_pod_parent(&pod_cgroup);
    cri::assert_clean(d)
}
