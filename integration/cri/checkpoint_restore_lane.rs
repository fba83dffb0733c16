//! Restore with real runc and CRIU (where `criu check` passes: the VM lane's guest): a counter checkpointed, its pod removed, created in a new pod from the archive (and from a checkpoint OCI image) and started goes on counting from where it was, into the new log; status, exec, stats and stop work on it. Also the restore times for a small and a 200 MiB-RSS container.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::checkpoint::{checkpoint, last_count, NEEDS_CRIU};
use crate::support::checkpoint_image::push_checkpoint_image;
use crate::support::cri;
use crate::support::{scratch, trial, Need, Registry, Scenario};

const NEEDS_CRIU_REGISTRY: &[Need] = &[
    Need::Root,
    Need::Runc,
    Need::Images,
    Need::Criu,
    Need::Registry,
];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::checkpoint::restore_from_archive_counter_continues_in_a_new_pod",
            NEEDS_CRIU,
            || restored(false),
        ),
        trial(
            "cri::checkpoint::restore_from_checkpoint_image_counter_continues",
            NEEDS_CRIU_REGISTRY,
            || restored(true),
        ),
        trial(
            "cri::checkpoint::restore_time_small_and_200mib_rss",
            NEEDS_CRIU,
            restore_times,
        ),
    ]
}

/// A counter kept in the shell's memory, a line every 0.1 s; SIGTERM ends it with 143.
const COUNTER: &str =
    "trap 'echo term; exit 143' TERM; i=0; echo ready; while :; do i=$((i+1)); echo n=$i; sleep 0.1; done";

/// The lowest `n=` of the log's stdout lines.
fn first_count(lines: &[String]) -> u64 {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("n=")?.parse().ok())
        .min()
        .unwrap_or(0)
}

fn restored(through_image: bool) -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let at = dir.path().join("counter.tar");
        let mut rt = s.rt.clone();
        let busybox = s.image("busybox");
        let old = s.pod(s.pod_config("ck-old")).await?;
        let c = old.container("counter", &busybox).sh(COUNTER).build();
        let id = s.ready(&old, &c).await?;
        let log = cri::wait_log(&old.log_of(&c), 30, |l| last_count(l) >= 10).await?;
        let seen = last_count(&cri::lines_of(&log, "stdout"));
        checkpoint(&mut rt, &id, &at)
            .await
            .context("CheckpointContainer")?;
        s.remove_pod(&old).await?;
        // The kubelet's flow (CRI-O's, containerd's): a new sandbox, the checkpoint as image.
        let _reg;
        let image = if through_image {
            let reg = Registry::start(false)?;
            let image =
                push_checkpoint_image(&reg.host(), "bosun/ck-counter", "v1", &at, "counter")
                    .await?;
            let mut images = s.daemon.images().await?;
            crate::support::images::pull(&mut images, &image, None)
                .await
                .with_context(|| format!("pull {image}"))?;
            _reg = reg;
            image
        } else {
            at.display().to_string()
        };
        let new = s.pod(s.pod_config("ck-new")).await?;
        let rc = new.container("counter", &image).build();
        let t = Instant::now();
        let rid = s
            .create(&new, &rc)
            .await
            .context("create from checkpoint")?;
        let created = t.elapsed();
        let st = s.status(&rid).await?;
        ensure!(
            st.state == pb::ContainerState::ContainerCreated as i32,
            "{st:?}"
        );
        let t = Instant::now();
        s.start(&rid).await.context("start (restore)")?;
        let started = t.elapsed();
        println!(
            "restore counter ({}): create {created:?}, start {started:?}",
            if through_image { "image" } else { "archive" }
        );
        let new_log = new.log_of(&rc);
        let lines = cri::lines_of(
            &cri::wait_log(&new_log, 30, |l| last_count(l) >= first_count(l) + 5).await?,
            "stdout",
        );
        let first = first_count(&lines);
        ensure!(
            first >= seen && !lines.iter().any(|l| l == "ready"),
            "the counter started over ({first} < {seen} seen before the checkpoint): {lines:?}"
        );
        let st = s.status(&rid).await?;
        ensure!(
            st.state == pb::ContainerState::ContainerRunning as i32,
            "{st:?}"
        );
        let out = s
            .exec(&rid, &["echo", "exec-ok"], 20)
            .await
            .context("exec")?;
        ensure!(
            String::from_utf8_lossy(&out.stdout).trim() == "exec-ok",
            "{out:?}"
        );
        let stats = rt
            .container_stats(pb::ContainerStatsRequest {
                container_id: rid.clone(),
            })
            .await?
            .into_inner();
        let mem = stats
            .stats
            .and_then(|s| s.memory)
            .and_then(|m| m.working_set_bytes)
            .map_or(0, |v| v.value);
        ensure!(mem > 0, "no memory in the stats of the restored container");
        let took = s.stop(&rid, 10).await?;
        let st = s.status(&rid).await?;
        ensure!(
            st.state == pb::ContainerState::ContainerExited as i32 && st.exit_code == 143,
            "stopped with SIGTERM: {st:?}"
        );
        ensure!(took < Duration::from_secs(9), "stop waited {took:?}");
        let lines = cri::lines_of(&cri::wait_log(&new_log, 5, |_| true).await?, "stdout");
        ensure!(
            lines.iter().any(|l| l == "term"),
            "no trap output: {lines:?}"
        );
        s.remove(&rid).await?;
        s.remove_pod(&new).await?;
        Ok(())
    })
}

fn restore_times() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let mut rt = s.rt.clone();
        let pod = s.pod(s.pod_config("ck-rbench")).await?;
        let busybox = s.image("busybox");
        let cases = [
            ("small", COUNTER.to_string()),
            (
                "rss200",
                "echo ready; dd if=/dev/zero bs=200M count=1 2>/dev/null | sleep 100000".into(),
            ),
        ];
        for (name, script) in cases {
            let id = s
                .ready(&pod, &pod.container(name, &busybox).sh(&script))
                .await?;
            tokio::time::sleep(Duration::from_secs(2)).await;
            let at = dir.path().join(format!("{name}.tar"));
            let t = Instant::now();
            checkpoint(&mut rt, &id, &at)
                .await
                .with_context(|| format!("checkpoint {name}"))?;
            let dumped = t.elapsed();
            s.stop(&id, 0).await?;
            s.remove(&id).await?;
            let size = std::fs::metadata(&at)?.len();
            let rc = pod
                .container(&format!("{name}-restored"), &at.display().to_string())
                .build();
            let t = Instant::now();
            let rid = s.create(&pod, &rc).await?;
            let created = t.elapsed();
            let t = Instant::now();
            s.start(&rid).await?;
            let started = t.elapsed();
            let st = s.status(&rid).await?;
            ensure!(
                st.state == pb::ContainerState::ContainerRunning as i32,
                "{name}: {st:?}"
            );
            let rss = rss_mib(&mut rt, &rid).await?;
            println!(
                "checkpoint/restore {name}: checkpoint {dumped:?}, archive {:.1} MiB, \
                 restore create {created:?} + start {started:?}, working set after {rss:.1} MiB",
                size as f64 / (1 << 20) as f64
            );
            if name == "rss200" {
                ensure!(
                    rss > 190.0,
                    "the restored buffer is not resident: {rss} MiB"
                );
            }
            s.stop(&rid, 0).await?;
            s.remove(&rid).await?;
            remove_file(&at)?;
        }
        Ok(())
    })
}

fn remove_file(p: &Path) -> Result<()> {
    std::fs::remove_file(p).with_context(|| format!("remove {}", p.display()))
}

async fn rss_mib(rt: &mut cri::Rt, id: &str) -> Result<f64> {
    let st = rt
        .container_stats(pb::ContainerStatsRequest {
            container_id: id.into(),
        })
        .await?
        .into_inner();
    Ok(st
        .stats
        .and_then(|s| s.memory)
        .and_then(|m| m.working_set_bytes)
        .map_or(0, |v| v.value) as f64
        / (1 << 20) as f64)
}
