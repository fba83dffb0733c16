//! crun as a runtime handler where it works (cgroup v2: the VM lane): a container with exec, UpdateContainerResources, stats, stop and an OOM kill; the start latency of the same pod under runc and crun side by side, and of each runtime alone.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::{trial, Scenario};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let missing = crun_missing();
    [
        trial(
            "cri::handlers::crun_runs_exec_update_stats_stop_and_oom",
            NEEDS,
            crun_container,
        ),
        trial("cri::handlers::crun_and_runc_start_latency", NEEDS, latency),
    ]
    .into_iter()
    .map(|t| skip_with(t, missing.as_deref()))
    .collect()
}

/// `t` ignored with a printed SKIP line when `why` says it cannot run here.
pub fn skip_with(t: libtest_mimic::Trial, why: Option<&str>) -> libtest_mimic::Trial {
    match why {
        Some(why) if !t.has_ignored_flag() => {
            eprintln!("SKIP {}: {why}", t.name());
            t.with_ignored_flag(true)
        }
        _ => t,
    }
}

/// Why crun cannot be tried here, if it cannot.
pub fn crun_missing() -> Option<String> {
    let unified = std::fs::read_to_string("/proc/self/mountinfo").is_ok_and(|m| {
        m.lines()
            .any(|l| l.contains(" /sys/fs/cgroup ") && l.contains(" - cgroup2 "))
    });
    if !unified {
        return Some("crun needs cgroup v2 (the VM lane runs this)".into());
    }
    if bosun::oci::host::find_in_path("crun").is_none() {
        return Some("no crun in PATH (hack/setup.sh installs it)".into());
    }
    None
}

fn crun_container() -> Result<()> {
    Scenario::new().run(async |s| {
        let pod = s.pod_on("crun", s.pod_config("crun")).await?;
        let c = pod
            .container("loop", &s.image("busybox"))
            .sh("trap 'exit 7' TERM; echo ready; while :; do sleep 0.1; done");
        let id = s.ready(&pod, &c).await?;
        let out = s.exec(&id, &["echo", "in-crun"], 10).await?;
        ensure!(
            String::from_utf8_lossy(&out.stdout).contains("in-crun"),
            "{out:?}"
        );
        s.rt.clone()
            .update_container_resources(pb::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(pb::LinuxContainerResources {
                    memory_limit_in_bytes: 96 << 20,
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
            .context("UpdateContainerResources")?;
        let out = s
            .exec(&id, &["cat", "/sys/fs/cgroup/memory.max"], 10)
            .await?;
        ensure!(
            String::from_utf8_lossy(&out.stdout).trim() == (96u64 << 20).to_string(),
            "memory.max after update: {out:?}"
        );
        let stats =
            s.rt.clone()
                .container_stats(pb::ContainerStatsRequest {
                    container_id: id.clone(),
                })
                .await?
                .into_inner()
                .stats
                .context("no stats")?;
        ensure!(
            stats
                .memory
                .and_then(|m| m.working_set_bytes)
                .is_some_and(|v| v.value > 0),
            "no memory stats: {stats:?}"
        );
        s.stop(&id, 10).await?;
        cri::check_exit(&s.status(&id).await?, 7, "Error")?;
        let mut oom = pod
            .container("oom", &s.image("busybox"))
            .sh("x=a; while true; do x=$x$x; done")
            .build();
        cri::resources(&mut oom).memory_limit_in_bytes = 16 << 20;
        let id = s.create_start(&pod, &oom).await?;
        cri::check_exit(&s.wait_exited(&id, 20).await?, 137, "OOMKilled")
    })
}

/// RunPodSandbox + CreateContainer + StartContainer of the same pod, `n` times per handler,
/// printed as p50s and the ratio.
fn latency() -> Result<()> {
    const N: usize = 10;
    Scenario::new().run(async |s| {
        let mut p50 = Vec::new();
        let dir = crate::support::scratch()?;
        let rootfs = super::handlers_bare::busybox_rootfs(dir.path())?;
        for handler in ["runc", "crun"] {
            let mut times: Vec<Duration> = Vec::new();
            for i in 0..N {
                let t = Instant::now();
                let pod = s
                    .pod_on(handler, s.pod_config(&format!("lat-{handler}-{i}")))
                    .await?;
                let c = pod.container("c", &s.image("busybox")).sh("sleep 60");
                let id = s.create_start(&pod, &c).await?;
                times.push(t.elapsed());
                s.stop(&id, 0).await?;
                s.remove_pod(&pod).await?;
            }
            times.sort();
            let mid = times[N / 2];
            eprintln!(
                "LATENCY {handler}: p50 {:.1} ms (min {:.1}, max {:.1}) over {N} pods",
                mid.as_secs_f64() * 1e3,
                times[0].as_secs_f64() * 1e3,
                times[N - 1].as_secs_f64() * 1e3
            );
            // The runtime alone, same machine, same minute: what bosun adds on top of it.
            let bin = bosun::oci::host::find_in_path(handler)
                .with_context(|| format!("no {handler} in PATH"))?;
            let bare = super::handlers_bare::bare_starts(&bin, &rootfs, dir.path(), N)?;
            eprintln!(
                "LATENCY {handler} alone (`{handler} run --detach`, no pod): p50 {:.1} ms (min \
                 {:.1}, max {:.1}); bosun's pod + container start adds {:.1} ms at p50",
                bare[N / 2].as_secs_f64() * 1e3,
                bare[0].as_secs_f64() * 1e3,
                bare[N - 1].as_secs_f64() * 1e3,
                (mid.as_secs_f64() - bare[N / 2].as_secs_f64()) * 1e3
            );
            p50.push(mid);
        }
        eprintln!(
            "LATENCY runc/crun p50 ratio: {:.2}",
            p50[0].as_secs_f64() / p50[1].as_secs_f64()
        );
        Ok(())
    })
}
