//! Restart policies and the phases they lead to, CrashLoopBackOff growing and capped, the
//! back-off reset after a quiet run, sidecars always restarted, logs followed across restarts.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::support::cri::NEEDS;
use crate::support::manifest::{busybox, PodManifest};
use crate::support::pods;
use crate::support::Scenario;
use crate::support::{trial, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::lifecycle::phases_follow_the_restart_policy",
            NEEDS,
            phases,
        ),
        trial(
            "pod::lifecycle::crash_loop_back_off_grows_and_caps",
            PUNCTUAL,
            crash_loop,
        ),
        trial(
            "pod::lifecycle::back_off_resets_after_a_quiet_run_and_sidecars_always_restart",
            PUNCTUAL,
            backoff_reset_and_sidecar_restart,
        ),
        trial(
            "pod::lifecycle::logs_follow_a_container_across_its_restarts",
            NEEDS,
            logs_follow,
        ),
    ]
}

/// Back-off tests tell 1, 2 and 4 s apart: only where the clock is the test's own.
const PUNCTUAL: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Punctual];

/// Never: exit 0 → Succeeded, exit 1 → Failed; OnFailure: exit 0 → Succeeded, exit 1 →
/// restarted; Always: exit 0 → restarted. The termination message comes from the file.
fn phases() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        for (name, policy, code) in [
            ("never-ok", "Never", 0),
            ("never-fail", "Never", 1),
            ("onfailure-ok", "OnFailure", 0),
            ("onfailure-fail", "OnFailure", 1),
            ("always-ok", "Always", 0),
        ] {
            pods::apply(d, &pods::one_shot(name, policy, code))?;
        }
        for (name, want) in [
            ("never-ok", "Succeeded"),
            ("never-fail", "Failed"),
            ("onfailure-ok", "Succeeded"),
        ] {
            let p = pods::wait_for(d, name, 30, want, |p| pods::phase(p) == want)?;
            let t = pods::container(&p, "main")
                .and_then(|c| c.state)
                .and_then(|s| s.terminated)
                .context("not terminated")?;
            ensure!(
                t.message.as_deref().map(str::trim) == Some("bye"),
                "{name}: termination message {:?}",
                t.message
            );
            ensure!(
                pods::condition(&p, "Ready") == "False",
                "{name} still Ready"
            );
        }
        for name in ["onfailure-fail", "always-ok"] {
            let p = pods::wait_for(d, name, 30, "a restart", |p| pods::restarts(p, "main") >= 1)?;
            let ph = pods::phase(&p);
            ensure!(
                ph == "Running" || ph == "Pending",
                "{name}: phase {ph} while restarting"
            );
            let last = pods::container(&p, "main")
                .and_then(|c| c.last_state)
                .and_then(|s| s.terminated)
                .context("no lastState.terminated")?;
            ensure!(
                last.finished_at.is_some() && last.started_at.is_some(),
                "{last:?}"
            );
        }
        for name in [
            "never-ok",
            "never-fail",
            "onfailure-ok",
            "onfailure-fail",
            "always-ok",
        ] {
            pods::cli(
                d,
                &[
                    "delete",
                    name,
                    "--wait=false",
                    "--grace-period",
                    "0",
                    "--force",
                ],
            )?;
        }
        for name in [
            "never-ok",
            "never-fail",
            "onfailure-ok",
            "onfailure-fail",
            "always-ok",
        ] {
            pods::wait_gone(d, name, 30)?;
        }
        Ok(())
    })
}

/// A container that always fails is restarted after 1, 2, 4 s, then every 4 s (the configured
/// cap), and waits in CrashLoopBackOff in between.
fn crash_loop() -> Result<()> {
    let d = pods::daemon(4, "")?;
    let yaml = PodManifest::new("crash")
        .grace(1)
        .container(busybox("main").sh("exit 3"))
        .yaml();
    pods::apply(&d, &yaml)?;
    let start = Instant::now();
    let mut seen_backoff = false;
    let mut starts: Vec<(i32, Instant)> = Vec::new();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(p) = pods::get(&d, "crash")? {
            let n = pods::restarts(&p, "main");
            if starts.last().is_none_or(|(last, _)| n > *last) {
                starts.push((n, Instant::now()));
            }
            seen_backoff |= pods::waiting_reason(&p, "main") == "CrashLoopBackOff";
            if n >= 5 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1].1 - w[0].1).as_secs_f64())
        .collect();
    println!("restart gaps (s): {gaps:.2?}");
    ensure!(seen_backoff, "never saw CrashLoopBackOff");
    ensure!(starts.len() >= 5, "restarts seen: {starts:?}");
    // gaps[0] is 1→2 (2 s back-off), then 4, 4 (capped); generous windows.
    let within = |g: f64, want: f64| g > want - 0.8 && g < want + 2.0;
    ensure!(
        within(gaps[1], 2.0),
        "second back-off {:.2} s, want ~2",
        gaps[1]
    );
    ensure!(
        within(gaps[2], 4.0),
        "third back-off {:.2} s, want ~4",
        gaps[2]
    );
    ensure!(
        within(gaps[3], 4.0),
        "capped back-off {:.2} s, want ~4",
        gaps[3]
    );
    let table = pods::cli(&d, &["get", "crash"])?;
    ensure!(
        table.contains("CrashLoopBackOff")
            || table.contains("Error")
            || table.contains("ExitCode:3"),
        "{table}"
    );
    let events = pods::events(&d, "crash")?;
    ensure!(events.contains("BackOff"), "no BackOff event:\n{events}");
    pods::delete_and_check(&d, "crash")
}

/// With a 4 s cap the back-off is forgotten after 8 s without a restart (twice the cap, the
/// kubelet's rule; 10 min with its default cap): a container that crashed three times, then
/// ran 10 s, is restarted after the initial 1 s, not the capped 4 s. In the same pod
/// (restartPolicy OnFailure) a sidecar that exits 0 is restarted all the same.
fn backoff_reset_and_sidecar_restart() -> Result<()> {
    Scenario::supervisor(4).run_sync(|d| {
        let m = d.dir().join("markers");
        std::fs::create_dir_all(&m)?;
        // Start n writes "start<n> <uptime>"; the 4th run lasts 10 s; every run exits 1.
        let script = "n=$(cat /m/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /m/n; \
                      read up rest < /proc/uptime; echo start$n $up >> /m/log; \
                      if [ $n -eq 4 ]; then sleep 10; fi; exit 1";
        let yaml = PodManifest::new("quiet")
            .restart_policy("OnFailure")
            .grace(1)
            .init_container(
                busybox("side")
                    .restart_policy("Always")
                    .sh("sleep 1; exit 0"),
            )
            .container(busybox("main").sh(script).mount("m", "/m"))
            .host_path("m", &m.to_string_lossy(), Some("Directory"))
            .yaml();
        pods::apply(d, &yaml)?;
        let log = m.join("log");
        let deadline = Instant::now() + Duration::from_secs(60);
        while pods::marker(&log, "start6").is_err() {
            ensure!(
                Instant::now() < deadline,
                "six starts not reached in 60 s:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        let t = |n: u32| pods::marker(&log, &format!("start{n}"));
        let gaps = [
            t(2)? - t(1)?,
            t(3)? - t(2)?,
            t(4)? - t(3)?,
            t(5)? - t(4)? - 10.0,
            t(6)? - t(5)?,
        ];
        println!("back-off before starts 2..6 (s, the 10 s run taken out of the 4th): {gaps:.2?}");
        let within = |g: f64, want: f64| g > want - 0.8 && g < want + 1.5;
        ensure!(within(gaps[2], 4.0), "capped back-off {gaps:.2?}");
        ensure!(
            within(gaps[3], 1.0),
            "after a 10 s run (> 2 × 4 s cap) the back-off starts over at 1 s: {gaps:.2?}"
        );
        ensure!(within(gaps[4], 2.0), "then grows again: {gaps:.2?}");
        let p = pods::get(d, "quiet")?.context("pod")?;
        let side = pods::restarts(&p, "side");
        ensure!(
            side >= 2,
            "the sidecar (exit 0 every second) restarted {side} times under restartPolicy OnFailure"
        );
        pods::delete_and_check(d, "quiet")?;
        Ok(())
    })
}

/// `bosun pod logs -f` keeps printing as the container restarts: each run writes a new log file
/// and the follower moves on to it, without being started again.
fn logs_follow() -> Result<()> {
    Scenario::supervisor(1).run_sync(|d| {
        let yaml = PodManifest::new("chatty")
            .grace(1)
            .container(busybox("main").sh(r#"echo "run at $(cat /proc/uptime)"; sleep 1; exit 1"#))
            .yaml();
        pods::apply(d, &yaml)?;
        pods::wait_for(d, "chatty", 30, "running", |p| pods::running(p, "main"))?;
        let follower = pods::Follower::start(d, &["logs", "-f", "chatty"])?;
        let deadline = Instant::now() + Duration::from_secs(40);
        let mut runs = Vec::new();
        while runs.len() < 3 {
            match follower.line(deadline) {
                Some(line) if line.starts_with("run at ") => runs.push(line),
                Some(other) => anyhow::bail!("unexpected log line {other:?}"),
                None => break,
            }
        }
        drop(follower);
        ensure!(
            runs.len() == 3,
            "logs -f printed {runs:?}, want the first three runs"
        );
        let p = pods::get(d, "chatty")?.context("chatty is gone")?;
        ensure!(pods::restarts(&p, "main") >= 2, "fewer than two restarts");
        pods::cli(d, &["delete", "chatty", "--grace-period", "1"])?;
        pods::wait_gone(d, "chatty", 30)?;
        Ok(())
    })
}
