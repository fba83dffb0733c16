//! Restore with real runc and CRIU (where `criu check` passes: the VM lane's guest): a counter checkpointed, its pod removed, created in a new pod from the archive (and from a checkpoint OCI image) and started goes on counting from where it was, into the new log; status, exec, stats and stop work on it. Also the restore times for a small and a 200 MiB-RSS container.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::checkpoint::{checkpoint, last_count, member, NEEDS_CRIU};
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
    ]
}

/// A counter kept in the shell's memory, a line every 0.1 s; SIGTERM ends it with 143.
const COUNTER: &str =
    "trap 'echo term; exit 143' TERM; i=0; echo ready; while :; do i=$((i+1)); echo n=$i; sleep 0.1; done";

/// `text` up to its last newline.
fn whole_lines(text: &str) -> &str {
    text.rfind('\n').map_or("", |end| &text[..=end])
}

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
        // The new log starts with the archive's (the log up to the checkpoint, as CRI-O
        // restores it), then what the restored counter writes.
        let archived = cri::lines_of(
            &cri::parse_log(whole_lines(&String::from_utf8(member(
                &at,
                "container.log",
            )?)?))?,
            "stdout",
        );
        let new_log = new.log_of(&rc);
        let lines = cri::lines_of(
            &cri::wait_log(&new_log, 30, |l| {
                l.len() > archived.len() && last_count(l) >= first_count(&l[archived.len()..]) + 5
            })
            .await?,
            "stdout",
        );
        ensure!(
            lines.starts_with(&archived),
            "the new log does not start with the archived one: {lines:?}"
        );
        let after = &lines[archived.len()..];
        let first = first_count(after);
        ensure!(
            first >= seen && !after.iter().any(|l| l == "ready"),
            "the counter started over ({first} < {seen} seen before the checkpoint): {after:?}"
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
        ensure!(
            mem > 0,
            "no memory in the stats of the restored container; {}",
            where_is(s, &rid)
        );
        // The daemon killed (-9) and started again: the restored container is recovered as
        // any other, still running and counting.
        s.restart().await?;
        let st = s.status(&rid).await?;
        ensure!(
            st.state == pb::ContainerState::ContainerRunning as i32,
            "after a daemon restart: {st:?}"
        );
        let now = last_count(&cri::lines_of(
            &cri::wait_log(&new_log, 5, |_| true).await?,
            "stdout",
        ));
        cri::wait_log(&new_log, 30, |l| last_count(l) >= now + 3).await?;
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

/// Creates a container from checkpoint `at` in `pod` and starts it (the checkpointed one
/// gone): the create and start times and the working set after, printed; it is removed.
pub(super) async fn restore_and_measure(
    s: &crate::support::Scene,
    pod: &cri::Pod,
    name: &str,
    at: &Path,
) -> Result<f64> {
    let rc = pod
        .container(&format!("{name}-restored"), &at.display().to_string())
        .build();
    let t = Instant::now();
    let rid = s.create(pod, &rc).await?;
    let created = t.elapsed();
    let t = Instant::now();
    s.start(&rid).await?;
    let started = t.elapsed();
    let st = s.status(&rid).await?;
    ensure!(
        st.state == pb::ContainerState::ContainerRunning as i32,
        "{name}: {st:?}"
    );
    let rss = super::checkpoint::container_rss_kib(&mut s.rt.clone(), &rid).await? as f64 / 1024.0;
    println!(
        "restore {name}: create {created:?} + start {started:?}, working set after {rss:.1} MiB"
    );
    if rss == 0.0 {
        println!(
            "restore {name}: no memory in its stats; {}",
            where_is(s, &rid)
        );
    }
    s.stop(&rid, 0).await?;
    s.remove(&rid).await?;
    Ok(rss)
}

/// The cgroup of container `id`'s init, for a failure's message.
fn where_is(s: &crate::support::Scene, id: &str) -> String {
    match cri::init_pid(&s.daemon, id) {
        Ok(pid) => format!(
            "init {pid} in cgroup {:?}",
            std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default()
        ),
        Err(e) => format!("init pid: {e:#}"),
    }
}
