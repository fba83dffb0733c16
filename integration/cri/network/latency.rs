//! RunPodSandbox and StopPodSandbox latency for 20 pods, printed.

use std::time::{Duration, Instant};

use anyhow::{ensure, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::podnet::{pod_ips, stop_pod, NET_NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let _ = NEEDS;
    vec![trial(
        "cri::network::run_and_stop_latency_20_pods",
        NET_NEEDS,
        latency,
    )]
}

/// RunPodSandbox and StopPodSandbox latency on the embedded network (20 pods, one at a
/// time); prints p50/p90 and checks every pod got its own address.
fn latency() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        // Warm-up: the first attach creates the bridge.
        let w = cri::run_pod(&mut rt, cri::pod_config(d, "warm")).await?;
        let (mut run, mut stop, mut ips, mut ids) = (vec![], vec![], vec![], vec![]);
        for _ in 0..20 {
            let t = Instant::now();
            let p = cri::run_pod(&mut rt, cri::pod_config(d, "lat")).await?;
            run.push(t.elapsed());
            ips.push(pod_ips(&mut rt, &p.id).await?.0);
            ids.push(p.id);
        }
        for id in &ids {
            let t = Instant::now();
            stop_pod(&mut rt, id).await?;
            stop.push(t.elapsed());
        }
        for id in ids.iter().chain(std::iter::once(&w.id)) {
            cri::remove_pod(&mut rt, id).await?;
        }
        let mut uniq = ips.clone();
        uniq.sort();
        uniq.dedup();
        ensure!(
            uniq.len() == 20 && ips.iter().all(|i| d.net().contains(i)),
            "{ips:?}"
        );
        let pct = |v: &mut Vec<Duration>, p: usize| {
            v.sort();
            v[(v.len() * p / 100).min(v.len() - 1)]
        };
        // The CNI share, from the daemon's log (`ms=` of ADD and DEL).
        let log = d.log();
        let cni_ms = |needle: &str| {
            let mut v: Vec<Duration> = log
                .lines()
                .filter(|l| l.contains(needle))
                .filter_map(|l| {
                    l.split("ms=")
                        .nth(1)?
                        .split_whitespace()
                        .next()?
                        .parse()
                        .ok()
                })
                .map(Duration::from_millis)
                // The second StopPodSandbox (in RemovePodSandbox) has nothing to DEL.
                .filter(|d| !d.is_zero())
                .collect();
            if v.is_empty() {
                Duration::ZERO
            } else {
                pct(&mut v, 50)
            }
        };
        let (add, del) = (
            cni_ms("pod network attached"),
            cni_ms("pod network DEL done"),
        );
        eprintln!(
            "latency (embedded CNI network, 20 pods): RunPodSandbox p50 {:?} p90 {:?} (CNI ADD p50 {add:?}); StopPodSandbox p50 {:?} p90 {:?} (CNI DEL p50 {del:?})",
            pct(&mut run, 50),
            pct(&mut run, 90),
            pct(&mut stop, 50),
            pct(&mut stop, 90)
        );
        Ok(())
    })
}
