//! Supervised pods' graceful termination: preStop before the stop signal, a preStop overrun
//! getting 2 s more, TERM-ignoring containers killed at the deadline, a second delete only
//! shortening, force deletion, and daemon kill -9 mid-life and mid-termination.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::support::cri::NEEDS;
use crate::support::manifest::{busybox, PodManifest, ProbeManifest};
use crate::support::pods;
use crate::support::Scenario;
use crate::support::{scaled, trial, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::termination::pre_stop_runs_before_the_stop_signal",
            NEEDS,
            pre_stop_first,
        ),
        trial(
            "pod::termination::pre_stop_overrun_gets_two_more_seconds_then_kill",
            NEEDS,
            pre_stop_overrun,
        ),
        trial(
            "pod::termination::term_ignoring_container_is_killed_at_the_deadline",
            NEEDS,
            term_ignored,
        ),
        trial(
            "pod::termination::a_second_delete_only_shortens_the_grace",
            NEEDS,
            second_delete,
        ),
        trial(
            "pod::termination::force_delete_removes_the_pod_at_once",
            NEEDS,
            force_delete,
        ),
        trial(
            "pod::termination::daemon_kill9_mid_life_keeps_pods_running",
            NEEDS,
            kill9_mid_life,
        ),
        trial(
            "pod::termination::daemon_kill9_mid_termination_restarts_with_full_grace",
            NEEDS,
            kill9_mid_termination,
        ),
    ]
}

/// A pod whose container ignores TERM (or marks it), with grace `grace` and an optional
/// preStop command.
fn stubborn(name: &str, grace: u32, pre_stop: Option<&str>, markers: Option<&str>) -> String {
    let trap = match markers {
        Some(_) => "trap 'read up rest < /proc/uptime; echo term $up >> /m/log' TERM; ",
        None => "trap '' TERM; ",
    };
    let mut main = busybox("main").sh(&format!(
        "{trap}touch /tmp/up; while true; do sleep 0.2; done"
    ));
    if let Some(script) = pre_stop {
        main = main.pre_stop(script);
    }
    let mut pod = PodManifest::new(name).grace(grace.into());
    if let Some(dir) = markers {
        main = main.mount("m", "/m");
        pod = pod.host_path("m", dir, None);
    }
    pod.container(main).yaml()
}

fn start(d: &Daemon, yaml: &str, name: &str) -> Result<()> {
    pods::apply(d, yaml)?;
    pods::wait_for(d, name, 30, "running", |p| pods::running(p, "main"))?;
    // The shell sets its trap first thing; give it a moment.
    std::thread::sleep(Duration::from_millis(300));
    Ok(())
}

/// Deletes without waiting and measures until the pod is gone.
fn delete_timed(d: &Daemon, name: &str, extra: &[&str]) -> Result<Duration> {
    let t = Instant::now();
    let mut args = vec!["delete", name, "--wait=false"];
    args.extend_from_slice(extra);
    pods::cli(d, &args)?;
    pods::wait_gone(d, name, 60)?;
    Ok(t.elapsed())
}

/// preStop runs to its end before the container sees the stop signal.
fn pre_stop_first() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        let m = d.dir().join("markers");
        std::fs::create_dir_all(&m)?;
        let yaml = stubborn(
            "prestop",
            10,
            Some("sleep 1; read up rest < /proc/uptime; echo prestop $up >> /m/log"),
            Some(&m.to_string_lossy()),
        );
        start(d, &yaml, "prestop")?;
        let took = delete_timed(d, "prestop", &[])?;
        println!("deleted in {took:.2?}");
        let log = m.join("log");
        let pre = pods::marker(&log, "prestop")?;
        let term = pods::marker(&log, "term")?;
        ensure!(
            pre <= term,
            "TERM ({term}) came before preStop ended ({pre})"
        );
        // The trap does not exit: the container is killed at the deadline (10 s).
        ensure!(took > Duration::from_secs(8), "gone after {took:?}");
        Ok(())
    })
}

/// preStop still running when the grace (2 s) ends: 2 s more, then KILL: about 4 s in all.
fn pre_stop_overrun() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        start(
            d,
            &stubborn("overrun", 2, Some("sleep 30"), None),
            "overrun",
        )?;
        let took = delete_timed(d, "overrun", &[])?;
        println!("deleted in {took:.2?} (grace 2 s + 2 s)");
        ensure!(
            // Under the preStop's 30 s whatever the lane's speed.
            took > Duration::from_millis(3500)
                && took < scaled(Duration::from_secs(8)).min(Duration::from_secs(25)),
            "gone after {took:?}, want ~4 s"
        );
        Ok(())
    })
}

/// No preStop, TERM ignored: KILL when the 3 s grace ends.
fn term_ignored() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        start(d, &stubborn("stubborn", 3, None, None), "stubborn")?;
        let took = delete_timed(d, "stubborn", &[])?;
        println!("deleted in {took:.2?} (grace 3 s)");
        ensure!(
            took > Duration::from_millis(2500)
                && took < scaled(Duration::from_secs(7)).min(Duration::from_secs(25)),
            "gone after {took:?}, want ~3 s"
        );
        let events = pods::cli(d, &["events"])?;
        ensure!(
            events.contains("Killing") || events.is_empty() || events.contains("No events"),
            "{events}"
        );
        Ok(())
    })
}

/// A second delete with 1 s cuts a 30 s grace short; a later, longer one does not extend 2 s.
fn second_delete() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        start(d, &stubborn("shorter", 30, None, None), "shorter")?;
        pods::cli(d, &["delete", "shorter", "--wait=false"])?;
        std::thread::sleep(Duration::from_secs(1));
        let p = pods::get(d, "shorter")?.context("gone too early")?;
        ensure!(
            p.metadata.deletion_timestamp.is_some(),
            "no deletionTimestamp"
        );
        let took = delete_timed(d, "shorter", &["--grace-period", "1"])?;
        println!("second delete (1 s) took {took:.2?}");
        // A 30 s grace cut to 1 s (the teardown's time on top; a slow lane has more of it).
        ensure!(
            took < scaled(Duration::from_secs(5)).min(Duration::from_secs(25)),
            "took {took:?}"
        );

        start(d, &stubborn("longer", 2, None, None), "longer")?;
        let t = Instant::now();
        pods::cli(d, &["delete", "longer", "--wait=false"])?;
        pods::cli(
            d,
            &["delete", "longer", "--wait=false", "--grace-period", "30"],
        )?;
        pods::wait_gone(d, "longer", 60)?;
        let took = t.elapsed();
        println!("2 s grace then a 30 s delete: gone after {took:.2?}");
        ensure!(
            took < scaled(Duration::from_secs(6)).min(Duration::from_secs(25)),
            "the longer delete extended the grace: {took:?}"
        );
        Ok(())
    })
}

/// --grace-period 0 --force: the pod leaves the API at once; its containers still get the
/// minimum grace and are gone soon after.
fn force_delete() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        start(d, &stubborn("forced", 30, None, None), "forced")?;
        let t = Instant::now();
        pods::cli(
            d,
            &[
                "delete",
                "forced",
                "--grace-period",
                "0",
                "--force",
                "--wait=false",
            ],
        )?;
        ensure!(
            pods::get(d, "forced")?.is_none(),
            "still listed after a forced delete"
        );
        println!("forced delete answered in {:.2?}", t.elapsed());
        // Containers go within the minimum grace (2 s) plus removal.
        Ok(())
    })
}

/// kill -9 of the daemon: the pod keeps running; the restarted daemon reports the same
/// container (no restart), probes it again and keeps the transition times of the conditions
/// that did not change.
fn kill9_mid_life() -> Result<()> {
    let mut d = pods::daemon(10, "")?;
    // The probe's runc exec must fit its timeout on a slow lane too (1 s, the default, here).
    let timeout = crate::support::time_scale();
    let yaml = PodManifest::new("survivor")
        .grace(1)
        .container(
            busybox("main").command(&["sleep", "1000"]).readiness(
                ProbeManifest::exec(&["true"])
                    .period(1)
                    .timeout(timeout as i32),
            ),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    let before = pods::wait_for(&d, "survivor", 30, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    let id = pods::container(&before, "main").and_then(|c| c.container_id);
    let uid = before.metadata.uid.clone();
    // Whole seconds: make sure a restart would show as a different time.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    d.kill9();
    d.restart()?;
    let after = pods::wait_for(&d, "survivor", 30, "Ready again", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    ensure!(after.metadata.uid == uid, "uid changed");
    ensure!(
        pods::container(&after, "main").and_then(|c| c.container_id) == id,
        "the container was replaced"
    );
    ensure!(pods::restarts(&after, "main") == 0, "restarted");
    // Ready and ContainersReady really go False until the readiness probe passes again (the
    // kubelet's rule after its restart too), so only these two keep their times.
    for kind in ["PodReadyToStartContainers", "Initialized"] {
        let (was, is) = (
            pods::transition(&before, kind),
            pods::transition(&after, kind),
        );
        ensure!(
            !was.is_empty() && was == is,
            "{kind}: lastTransitionTime {was:?} became {is:?} over a daemon restart"
        );
    }
    pods::delete_and_check(&d, "survivor")
}

/// kill -9 during a termination: the restarted daemon terminates again with the full grace
/// (pod-safety: it cannot know how much of the grace the container already had).
fn kill9_mid_termination() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        start(d, &stubborn("dying", 4, None, None), "dying")?;
        pods::cli(d, &["delete", "dying", "--wait=false"])?;
        std::thread::sleep(Duration::from_millis(2500));
        d.kill9();
        let t = Instant::now();
        d.restart()?;
        let p = pods::get(d, "dying")?.context("the pod was forgotten")?;
        ensure!(
            p.metadata.deletion_timestamp.is_some(),
            "no longer terminating"
        );
        pods::wait_gone(d, "dying", 60)?;
        let took = t.elapsed();
        println!("after restart, gone in {took:.2?} (full grace 4 s)");
        ensure!(
            took > Duration::from_millis(3500) && took < scaled(Duration::from_secs(10)),
            "gone {took:?} after the restart, want ~4 s (a full grace)"
        );
        Ok(())
    })
}
