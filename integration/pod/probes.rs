//! Supervised pods' probes and postStart hooks: liveness restarts (with the probe's own grace),
//! startup gating, readiness flipping Ready, each probe kind failing with its message,
//! timeouts, grpc health checks, postStart holding Running back and failing a container.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use k8s_openapi::api::core::v1 as k;

use crate::support::manifest::{busybox, ContainerManifest, PodManifest, ProbeManifest};
use crate::support::pods;
use crate::support::trial;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::probes::liveness_failure_restarts_with_the_probe_grace",
            NEEDS,
            liveness_restart,
        ),
        trial(
            "pod::probes::startup_probe_gates_liveness_and_readiness",
            NEEDS,
            startup_gating,
        ),
        trial(
            "pod::probes::readiness_flips_ready_without_restarts",
            NEEDS,
            readiness_flips,
        ),
        trial(
            "pod::probes::http_tcp_exec_failures_and_timeouts_are_reported",
            NEEDS,
            failures,
        ),
        trial("pod::probes::grpc_health_probe", NEEDS, grpc),
        trial(
            "pod::probes::post_start_holds_running_and_its_failure_restarts",
            NEEDS,
            post_start,
        ),
    ]
}

/// A liveness failure kills the container with the probe's terminationGracePeriodSeconds (1 s,
/// not the pod's 30: the container ignores TERM) and restarts it.
fn liveness_restart() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = PodManifest::new("live")
        .grace(30)
        .container(
            busybox("main")
                .sh("trap '' TERM; touch /tmp/alive; sleep 2; rm /tmp/alive; while true; do sleep 1; done")
                .liveness(
                    ProbeManifest::exec(&["test", "-f", "/tmp/alive"])
                        .period(1)
                        .failures(2)
                        .grace(1),
                ),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    // Timed from the first run (the pod's start is the machine's speed, not the grace's).
    pods::wait_for(&d, "live", 30, "running", |p| pods::running(p, "main"))?;
    let t = Instant::now();
    let p = pods::wait_for(&d, "live", 30, "a restart", |p| {
        pods::restarts(p, "main") >= 1 && pods::running(p, "main")
    })?;
    let took = t.elapsed();
    println!("liveness restart after {took:.2?}");
    // ≤ 2 s alive + 2 failures at 1 s + 1 s grace + back-off 1 s ≈ 6 s; 30 s grace would be > 30.
    ensure!(
        took < crate::support::scaled(Duration::from_secs(15)).min(Duration::from_secs(29)),
        "restart took {took:?}"
    );
    let last = pods::container(&p, "main")
        .and_then(|c| c.last_state)
        .and_then(|s| s.terminated)
        .context("no lastState")?;
    ensure!(last.exit_code == 137, "killed with {}", last.exit_code);
    let events = pods::events(&d, "live")?;
    ensure!(
        events.contains("Liveness probe failed")
            && events.contains("failed liveness probe, will be restarted"),
        "{events}"
    );
    pods::delete_and_check(&d, "live")
}

/// Until the startupProbe succeeds the container is not started and not ready, and a liveness
/// probe that would fail right now never runs.
fn startup_gating() -> Result<()> {
    let d = pods::daemon(10, "")?;
    // Each exec probe's runc exec must fit its timeout on a slow lane too (1 s here), and the
    // container stays unstarted long enough for this test to look twice, a second apart, after
    // it saw it running (4 s here; under qemu TCG one `pod get` alone can take seconds).
    let t = crate::support::time_scale();
    let (unstarted, threshold) = (4 * t, 20 * t);
    let (t, threshold) = (t as i32, threshold as i32);
    let started = || {
        ProbeManifest::exec(&["test", "-f", "/tmp/started"])
            .period(1)
            .timeout(t)
    };
    let yaml = PodManifest::new("slow")
        .grace(1)
        .container(
            busybox("main")
                .sh(&format!(
                    "sleep {unstarted}; touch /tmp/started; while true; do sleep 1; done"
                ))
                .startup(started().failures(threshold))
                .liveness(started().failures(1))
                .readiness(ProbeManifest::exec(&["true"]).period(1).timeout(t)),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    let p = pods::wait_for(&d, "slow", 30, "running", |p| pods::running(p, "main"))?;
    let c = pods::container(&p, "main").context("status")?;
    ensure!(
        c.started == Some(false) && !c.ready,
        "before startup: {c:?}"
    );
    std::thread::sleep(Duration::from_secs(1));
    let p = pods::get(&d, "slow")?.context("gone")?;
    let c = pods::container(&p, "main").context("status")?;
    ensure!(
        c.started == Some(false) && !c.ready,
        "still before startup: {c:?}"
    );
    let p = pods::wait_for(&d, "slow", 20, "started and Ready", |p| {
        pods::container(p, "main").is_some_and(|c| c.started == Some(true) && c.ready)
    })?;
    ensure!(pods::condition(&p, "Ready") == "True");
    ensure!(
        pods::restarts(&p, "main") == 0,
        "liveness ran before startup succeeded"
    );
    pods::delete_and_check(&d, "slow")
}

/// Readiness follows a file on the host: Ready and ContainersReady go True and False with it,
/// the container keeps running.
fn readiness_flips() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let m = d.dir().join("ready-dir");
    std::fs::create_dir_all(&m)?;
    // The exec probe's runc exec must fit its timeout on a slow lane too (1 s here).
    let t = crate::support::time_scale();
    let yaml = PodManifest::new("flip")
        .grace(1)
        .container(
            busybox("main")
                .command(&["sleep", "1000"])
                .readiness(
                    ProbeManifest::exec(&["test", "-f", "/m/ready"])
                        .period(1)
                        .timeout(t as i32)
                        .failures(1),
                )
                .mount("m", "/m"),
        )
        .host_path("m", &m.to_string_lossy(), None)
        .yaml();
    pods::apply(&d, &yaml)?;
    pods::wait_for(&d, "flip", 30, "running, not ready", |p| {
        pods::running(p, "main") && pods::condition(p, "Ready") == "False"
    })?;
    std::fs::write(m.join("ready"), b"")?;
    pods::wait_for(&d, "flip", 10, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    std::fs::remove_file(m.join("ready"))?;
    let p = pods::wait_for(&d, "flip", 10, "not Ready", |p| {
        pods::condition(p, "Ready") == "False" && pods::condition(p, "ContainersReady") == "False"
    })?;
    ensure!(pods::running(&p, "main") && pods::restarts(&p, "main") == 0);
    let table = pods::cli(&d, &["get", "flip"])?;
    ensure!(
        table.contains("0/1") && table.contains("Running"),
        "{table}"
    );
    pods::delete_and_check(&d, "flip")
}

/// An httpGet answered 404, a tcpSocket to a closed port and an exec probe outliving its
/// timeout each fail with the kubelet's kind of message; the pod is not Ready.
fn failures() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let header = k::HTTPHeader {
        name: "X-Test".into(),
        value: "1".into(),
    };
    let yaml = PodManifest::new("failing")
        .grace(1)
        .container(
            busybox("web")
                .sh("mkdir -p /www; exec httpd -f -p 8080 -h /www")
                .readiness(
                    ProbeManifest::http("/missing", 8080)
                        .with(|p| {
                            if let Some(get) = p.http_get.as_mut() {
                                get.http_headers = Some(vec![header]);
                            }
                        })
                        .period(1),
                ),
        )
        .container(
            busybox("tcp")
                .command(&["sleep", "1000"])
                .readiness(ProbeManifest::tcp(9999).period(1)),
        )
        .container(
            busybox("slow")
                .command(&["sleep", "1000"])
                .readiness(ProbeManifest::exec(&["sleep", "5"]).period(2).timeout(1)),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let want = ["statuscode: 404", "dial tcp", "timed out"];
    loop {
        let events = pods::events(&d, "failing")?;
        if want.iter().all(|w| events.contains(w)) {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "missing probe failures; events:\n{events}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let p = pods::get(&d, "failing")?.context("gone")?;
    ensure!(pods::condition(&p, "Ready") == "False");
    for c in ["web", "tcp", "slow"] {
        ensure!(
            pods::running(&p, c) && pods::restarts(&p, c) == 0,
            "{c} restarted"
        );
    }
    let describe = pods::cli(&d, &["describe", "failing"])?;
    ensure!(describe.contains("Last result: Failure"), "{describe}");
    pods::delete_and_check(&d, "failing")
}

/// grpc.health.v1 probes against the grpc-health test image: SERVING makes the pod Ready;
/// NOT_SERVING (written into the status file by exec) takes Ready away.
fn grpc() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let image = cri::import(&d, "grpc-health")?;
    let yaml = PodManifest::new("grpc")
        .grace(2)
        .container(
            ContainerManifest::new("server", &image)
                .args(&["--port", "50051", "--service", "checkout"])
                .readiness(
                    ProbeManifest::grpc(50051, Some("checkout"))
                        .period(1)
                        .failures(1),
                )
                .liveness(ProbeManifest::grpc(50051, None).period(2)),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    let p = pods::wait_for(&d, "grpc", 30, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    let id = pods::container(&p, "server")
        .and_then(|c| c.container_id)
        .context("no container id")?;
    let id = id.trim_start_matches("bosun://");
    let out = d.cli(&[
        "exec",
        id,
        "--",
        "sh",
        "-c",
        "echo NOT_SERVING > /tmp/health-status",
    ])?;
    ensure!(
        out.status.success(),
        "exec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    pods::wait_for(&d, "grpc", 10, "not Ready", |p| {
        pods::condition(p, "Ready") == "False"
    })?;
    pods::delete_and_check(&d, "grpc")
}

/// A container is not Running until its postStart hook finished; a failing postStart kills it
/// (FailedPostStartHook) and it is restarted.
fn post_start() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = PodManifest::new("hooked")
        .grace(1)
        .container(
            busybox("slowhook")
                .command(&["sleep", "1000"])
                .post_start("sleep 3; touch /tmp/hooked"),
        )
        .container(
            busybox("badhook")
                .command(&["sleep", "1000"])
                .post_start("echo nope; exit 1"),
        )
        .yaml();
    pods::apply(&d, &yaml)?;
    let t = Instant::now();
    let mut seen_waiting = false;
    let p = loop {
        let p = pods::get(&d, "hooked")?.context("gone")?;
        if pods::running(&p, "slowhook") {
            break p;
        }
        seen_waiting |= pods::container(&p, "slowhook").is_some();
        ensure!(
            t.elapsed() < Duration::from_secs(30),
            "slowhook never Running"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let took = t.elapsed();
    ensure!(seen_waiting, "no status before Running");
    ensure!(
        took >= Duration::from_millis(2500),
        "Running after {took:?}, before the hook ended"
    );
    let _ = p;
    pods::wait_for(&d, "hooked", 30, "badhook restarted", |p| {
        pods::restarts(p, "badhook") >= 1
    })?;
    let events = pods::events(&d, "hooked")?;
    ensure!(events.contains("FailedPostStartHook"), "{events}");
    pods::delete_and_check(&d, "hooked")
}
