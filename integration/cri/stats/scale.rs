//! ListContainerStats with 100 containers: its latency percentiles (printed) and bounds.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt, NEEDS};
use crate::support::stats::{container_stats, v};
use crate::support::{block_on, trial, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::stats::list_container_stats_with_100_containers",
        NEEDS,
        hundred_containers,
    )]
}

/// ListContainerStats over 100 running containers (10 pods × 10), timed; and the cost of
/// walking a writable layer of 10 000 files against the cached answer.
fn hundred_containers() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(&d, block_on(hundred(&d, &busybox)))
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn hundred(d: &Daemon, busybox: &str) -> Result<()> {
    let mut rt = cri::client(d).await?;
    let mut pods = Vec::new();
    let mut first = String::new();
    for p in 0..10 {
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, &format!("many{p}"))).await?;
        for c in 0..10 {
            let cfg = cri::sh_config(&pod, &format!("c{c}"), busybox, "exec sleep 100000");
            let id = cri::create_start(&mut rt, &pod, &cfg).await?;
            if first.is_empty() {
                first = id;
            }
        }
        pods.push(pod);
    }
    let list = |rt: &mut Rt| {
        let mut rt = rt.clone();
        async move {
            let t = Instant::now();
            let stats = rt
                .list_container_stats(pb::ListContainerStatsRequest { filter: None })
                .await?
                .into_inner()
                .stats;
            Ok::<_, anyhow::Error>((t.elapsed(), stats))
        }
    };
    let (_, stats) = list(&mut rt).await?;
    ensure!(stats.len() == 100, "{} containers listed", stats.len());
    for s in &stats {
        ensure!(
            s.cpu.is_some() && s.memory.is_some() && s.writable_layer.is_some(),
            "incomplete stats: {s:?}"
        );
    }
    let mut times = Vec::new();
    for _ in 0..50 {
        times.push(list(&mut rt).await?.0);
    }
    times.sort();
    let (p50, p99) = (percentile(&times, 0.5), percentile(&times, 0.99));
    eprintln!("ListContainerStats, 100 running containers, 50 calls: p50 {p50:?} p99 {p99:?} (layers cached for {:?})", bosun::runtime::stats::LAYER_TTL);
    ensure!(
        p99 < crate::support::scaled(Duration::from_secs(2)),
        "ListContainerStats p99 {p99:?}"
    );

    // The walk: 10 000 files in one writable layer, measured after the cache expired and
    // again while it holds.
    let r = cri::exec(
        &mut rt,
        &first,
        &[
            "sh",
            "-c",
            "mkdir /many && cd /many && seq 1 10000 | xargs touch",
        ],
        60,
    )
    .await?;
    ensure!(
        r.exit_code == 0,
        "touch: {}",
        String::from_utf8_lossy(&r.stderr)
    );
    let mut walked = Vec::new();
    let mut cached = Vec::new();
    for _ in 0..5 {
        tokio::time::sleep(bosun::runtime::stats::LAYER_TTL + Duration::from_millis(100)).await;
        let t = Instant::now();
        let s = container_stats(&mut rt, &first).await?;
        walked.push(t.elapsed());
        let inodes = s
            .writable_layer
            .as_ref()
            .and_then(|l| v(&l.inodes_used))
            .unwrap_or(0);
        ensure!(inodes > 10_000, "{inodes} inodes after 10 000 files");
        let t = Instant::now();
        container_stats(&mut rt, &first).await?;
        cached.push(t.elapsed());
    }
    walked.sort();
    cached.sort();
    eprintln!(
        "ContainerStats with a 10 000-file writable layer: walked {:?} (median), cached {:?} (median)",
        walked[2], cached[2]
    );
    for pod in &pods {
        cri::remove_pod(&mut rt, &pod.id).await?;
    }
    cri::assert_clean(d)
}
