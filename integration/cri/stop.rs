//! StopContainer semantics with real runc: the stop signal (CRI, image STOPSIGNAL, SIGTERM),
//! the KILL deadline (only ever shortened), cancelled calls, timeout 0, idempotency, and exec'd
//! processes dying with their container. Timing windows are generous; measured times are
//! printed.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, Rt, NEEDS};
use crate::support::{scaled, trial, wait_until, Scenario, Scene};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::stop::term_honouring_container_exits_fast_and_stop_is_idempotent",
            NEEDS,
            term_honoured,
        ),
        trial(
            "cri::stop::term_ignoring_container_is_killed_at_the_deadline",
            NEEDS,
            term_ignored,
        ),
        trial(
            "cri::stop::image_stopsignal_and_cri_stop_signal_override",
            NEEDS,
            stop_signals,
        ),
        trial(
            "cri::stop::a_shorter_second_stop_wins",
            NEEDS,
            shorter_second_stop,
        ),
        trial(
            "cri::stop::a_longer_second_stop_does_not_extend",
            NEEDS,
            longer_second_stop,
        ),
        trial(
            "cri::stop::a_cancelled_stop_call_still_ends_at_the_deadline",
            NEEDS,
            cancelled_stop,
        ),
        trial(
            "cri::stop::timeout_zero_or_negative_kills_at_once",
            NEEDS,
            timeout_zero,
        ),
        trial(
            "cri::stop::exec_processes_die_with_the_container",
            NEEDS,
            exec_processes_die,
        ),
    ]
}

/// Exits 0 on SIGTERM (busybox sh runs the trap between commands: at most 0.1 s late).
const TERM_HONOURING: &str = "trap 'echo got-term; exit 0' TERM; echo ready; \
    while :; do sleep 0.1; done";
/// Ignores SIGTERM: only SIGKILL ends it.
const TERM_IGNORING: &str = "trap '' TERM; echo ready; while :; do sleep 0.1; done";

/// A scenario with one pod (its pid namespace shared when `share_pid`): runs `f(scene, pod,
/// busybox reference)`.
fn with_pod(
    name: &str,
    share_pid: bool,
    f: impl AsyncFnOnce(&Scene, &Pod, &str) -> Result<()>,
) -> Result<()> {
    Scenario::new().run(async |s| {
        let mut cfg = s.pod_config(name);
        if share_pid {
            cfg = cfg.share_pid();
        }
        let pod = s.pod(cfg).await?;
        f(s, &pod, &s.image("busybox")).await
    })
}

/// Creates and starts `sh -c script` and waits until it printed `ready`.
async fn started(s: &Scene, pod: &Pod, name: &str, image: &str, script: &str) -> Result<String> {
    s.ready(pod, &pod.container(name, image).sh(script)).await
}

fn term_honoured() -> Result<()> {
    with_pod("stop-fast", false, async |s, pod, img| {
        let id = started(s, pod, "fast", img, TERM_HONOURING).await?;
        let took = s.stop(&id, 30).await?;
        eprintln!("StopContainer(30) of a TERM-honouring container: {took:?}");
        // Upper bounds here are scaled: the VM lane's TCG is several times slower.
        ensure!(
            took < scaled(Duration::from_secs(3)),
            "a TERM-honouring container took {took:?} to stop"
        );
        let st = s.status(&id).await?;
        cri::check_exit(&st, 0, "Completed")?;
        let log = cri::lines_of(&cri::read_log(&pod.log_dir().join("fast.log"))?, "stdout");
        ensure!(log.iter().any(|l| l == "got-term"), "{log:?}");
        // Idempotent: stopped, unknown, removed.
        let took = s
            .stop(&id, 30)
            .await
            .context("stop of a stopped container")?;
        ensure!(
            took < scaled(Duration::from_secs(1)),
            "stopping a stopped container took {took:?}"
        );
        ensure!(
            s.status(&id).await? == st,
            "a second stop changed the status"
        );
        s.stop("0123456789abcdef0123456789abcdef", 30)
            .await
            .context("stop of an unknown container")?;
        s.remove(&id).await?;
        s.stop(&id, 30)
            .await
            .context("stop of a removed container")?;
        // RemoveContainer of a running container kills it.
        let running = started(s, pod, "removed-running", img, TERM_IGNORING).await?;
        let t = Instant::now();
        s.remove(&running).await?;
        eprintln!("RemoveContainer of a running container: {:?}", t.elapsed());
        ensure!(
            t.elapsed() < scaled(Duration::from_secs(3)),
            "RemoveContainer of a running container took {:?}",
            t.elapsed()
        );
        ensure!(
            wait_until(5, || cri::monitors_of(&running).is_empty()),
            "the removed container's monitor is still there"
        );
        ensure!(
            s.list_containers(None)
                .await?
                .iter()
                .all(|c| c.id != running),
            "a removed container is listed"
        );
        // A created (never started) container: stop succeeds, it can be removed.
        let c = cri::sh_config(pod, "created", img, "exit 0");
        let created = s.create(pod, &c).await?;
        s.stop(&created, 10)
            .await
            .context("stop of a created container")?;
        s.remove(&created).await?;
        Ok(())
    })
}

fn term_ignored() -> Result<()> {
    with_pod("stop-deadline", false, async |s, pod, img| {
        let id = started(s, pod, "stubborn", img, TERM_IGNORING).await?;
        let took = s.stop(&id, 2).await?;
        eprintln!("StopContainer(2) of a TERM-ignoring container: {took:?}");
        ensure!(
            took >= Duration::from_millis(1900) && took < Duration::from_secs(4),
            "StopContainer(2) returned after {took:?}, want [1.9 s, 4 s)"
        );
        let st = s.status(&id).await?;
        cri::check_exit(&st, 137, "Error")?;
        Ok(())
    })
}

fn stop_signals() -> Result<()> {
    Scenario::new().image("stopsignal").run(async |s| {
        let image = s.image("stopsignal");
        let pod = s.pod(s.pod_config("stop-signals")).await?;
        // The image's own command: `trap 'echo got-usr1; exit 0' USR1; while …`, STOPSIGNAL
        // SIGUSR1. Nothing traps TERM: a SIGTERM would leave it to the KILL (137).
        let c = cri::container_config(&pod, "image-signal", &image);
        let id = s.create_start(&pod, &c).await?;
        let stat = s
            .wait_state(&id, pb::ContainerState::ContainerRunning, 10)
            .await?;
        ensure!(stat.started_at > 0);
        ensure!(
            stat.stop_signal == pb::Signal::Sigusr1 as i32,
            "ContainerStatus.stop_signal {} (want the image's SIGUSR1)",
            stat.stop_signal
        );
        // The trap must be installed before the signal comes.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let took = s.stop(&id, 10).await?;
        eprintln!("stop with the image's STOPSIGNAL: {took:?}");
        let stat = s.status(&id).await?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
        cri::check_exit(&stat, 0, "Completed").with_context(|| format!("log {out:?}"))?;
        ensure!(out == ["got-usr1"], "{out:?}");
        ensure!(took < Duration::from_secs(3), "took {took:?}");

        // CRI stop_signal SIGTERM overrides the image's SIGUSR1.
        let script = "trap 'echo got-usr1; exit 0' USR1; trap 'echo got-term; exit 7' TERM; \
            echo ready; while :; do sleep 0.1; done";
        let mut c = cri::sh_config(&pod, "cri-signal", &image, script);
        c.stop_signal = pb::Signal::Sigterm as i32;
        let id = s.create_start(&pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;
        let st = s.status(&id).await?;
        ensure!(
            st.stop_signal == pb::Signal::Sigterm as i32,
            "ContainerStatus.stop_signal {} (want SIGTERM)",
            st.stop_signal
        );
        let took = s.stop(&id, 10).await?;
        eprintln!("stop with the CRI stop_signal: {took:?}");
        let stat = s.status(&id).await?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
        cri::check_exit(&stat, 7, "Error").with_context(|| format!("log {out:?}"))?;
        ensure!(out == ["ready", "got-term"], "{out:?}");

        // Same command without the override: the image's SIGUSR1.
        let c = cri::sh_config(&pod, "same-script-image-signal", &image, script);
        let id = s.create_start(&pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;
        s.stop(&id, 10).await?;
        let stat = s.status(&id).await?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
        cri::check_exit(&stat, 0, "Completed").with_context(|| format!("log {out:?}"))?;
        ensure!(out == ["ready", "got-usr1"], "{out:?}");
        s.remove_pod(&pod).await?;
        Ok(())
    })
}

/// StopContainer(`timeout`) on a clone of `rt` in a task; yields the call's duration.
fn stop_in_background(
    rt: &Rt,
    id: &str,
    timeout: i64,
) -> tokio::task::JoinHandle<Result<Duration>> {
    let mut c = rt.clone();
    let id = id.to_string();
    tokio::spawn(async move { cri::stop(&mut c, &id, timeout).await })
}

fn shorter_second_stop() -> Result<()> {
    with_pod("stop-shorter", false, async |s, pod, img| {
        let id = started(s, pod, "stubborn", img, TERM_IGNORING).await?;
        let t0 = Instant::now();
        let first = stop_in_background(&s.rt, &id, 30);
        tokio::time::sleep(Duration::from_millis(300)).await;
        ensure!(!first.is_finished(), "StopContainer(30) returned at once");
        let second = s.stop(&id, 1).await?;
        let first = first.await??;
        let total = t0.elapsed();
        eprintln!("stop(30) then stop(1) 0.3 s later: second {second:?}, first {first:?}");
        ensure!(
            second >= Duration::from_millis(900) && second < Duration::from_secs(3),
            "the second stop(1) took {second:?}, want [0.9 s, 3 s)"
        );
        ensure!(
            first < Duration::from_secs(4) && total < Duration::from_secs(5),
            "the first stop(30) took {first:?}: the shorter deadline did not win"
        );
        cri::check_exit(&s.status(&id).await?, 137, "Error")?;
        Ok(())
    })
}

fn longer_second_stop() -> Result<()> {
    with_pod("stop-longer", false, async |s, pod, img| {
        let id = started(s, pod, "stubborn", img, TERM_IGNORING).await?;
        let first = stop_in_background(&s.rt, &id, 2);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let second = s.stop(&id, 30).await?;
        let first = first.await??;
        eprintln!("stop(2) then stop(30) 0.3 s later: first {first:?}, second {second:?}");
        ensure!(
            first >= Duration::from_millis(1900) && first < Duration::from_secs(4),
            "the first stop(2) took {first:?}, want [1.9 s, 4 s)"
        );
        ensure!(
            second < Duration::from_millis(3700),
            "the second stop(30) took {second:?}: it extended the deadline"
        );
        cri::check_exit(&s.status(&id).await?, 137, "Error")?;
        Ok(())
    })
}

fn cancelled_stop() -> Result<()> {
    with_pod("stop-cancelled", false, async |s, pod, img| {
        let id = started(s, pod, "stubborn", img, TERM_IGNORING).await?;
        let t0 = Instant::now();
        let wall0 = cri::now_ns();
        // The client gives up after 0.5 s (a kubelet restart mid-grace): the call is dropped.
        let mut c = s.rt.clone();
        let cancelled = tokio::time::timeout(
            Duration::from_millis(500),
            c.stop_container(pb::StopContainerRequest {
                container_id: id.clone(),
                timeout: 3,
            }),
        )
        .await;
        ensure!(
            cancelled.is_err(),
            "StopContainer(3) returned early: {cancelled:?}"
        );
        drop(c);
        tokio::time::sleep(Duration::from_millis(1500).saturating_sub(t0.elapsed())).await;
        let st = s.status(&id).await?;
        ensure!(
            cri::state_of(&st) == pb::ContainerState::ContainerRunning,
            "killed early after the cancelled stop (at {:?}): {st:?}",
            t0.elapsed()
        );
        let st = s.wait_exited(&id, 10).await?;
        let after = cri::secs(st.finished_at - wall0);
        eprintln!("cancelled stop(3): exited {after:.3} s after the call");
        cri::check_exit(&st, 137, "Error")?;
        ensure!(
            (2.8..5.0).contains(&after),
            "exited {after:.3} s after the cancelled stop(3), want [2.8 s, 5 s)"
        );
        Ok(())
    })
}

fn timeout_zero() -> Result<()> {
    with_pod("stop-zero", false, async |s, pod, img| {
        for (name, timeout) in [("zero", 0), ("negative", -5)] {
            let id = started(s, pod, name, img, TERM_HONOURING).await?;
            let took = s.stop(&id, timeout).await?;
            eprintln!("StopContainer({timeout}): {took:?}");
            ensure!(
                took < Duration::from_millis(1500),
                "stop({timeout}) took {took:?}"
            );
            let st = s.status(&id).await?;
            // SIGKILL without the stop signal first: the TERM trap never ran.
            cri::check_exit(&st, 137, "Error").with_context(|| format!("stop({timeout})"))?;
            let out = cri::lines_of(
                &cri::read_log(&pod.log_dir().join(format!("{name}.log")))?,
                "stdout",
            );
            ensure!(
                !out.iter().any(|l| l == "got-term"),
                "stop({timeout}) sent TERM: {out:?}"
            );
        }
        Ok(())
    })
}

fn exec_processes_die() -> Result<()> {
    // A shared pid namespace: the exec'd process does not die with the container's PID 1 by
    // itself; the runtime has to kill it.
    with_pod("stop-exec", true, async |s, pod, img| {
        // The container also leaves a background child behind when its shell exits.
        let bg = format!("{}", 910_000 + std::process::id() % 90_000);
        let script = format!("sleep {bg} & {TERM_HONOURING}");
        let id = started(s, pod, "with-exec", img, &script).await?;
        let secs = format!("{}", 900_000 + std::process::id() % 90_000);
        let mut c = s.rt.clone();
        let (cid, arg) = (id.clone(), secs.clone());
        let exec = tokio::spawn(async move {
            let t = Instant::now();
            let r = cri::exec(&mut c, &cid, &["sleep", &arg], 60).await;
            (r, t.elapsed())
        });
        let argv = ["sleep", secs.as_str()];
        let mut seen = false;
        for _ in 0..200 {
            if !cri::processes_with_argv(&argv).is_empty() {
                seen = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        ensure!(
            seen,
            "the exec'd sleep never showed up; daemon log:\n{}",
            s.daemon.log()
        );
        let took = s.stop(&id, 10).await?;
        eprintln!("stop with an exec'd process: {took:?}");
        cri::check_exit(&s.status(&id).await?, 0, "Completed")?;
        let (r, exec_took) = tokio::time::timeout(Duration::from_secs(10), exec)
            .await
            .context("ExecSync still running 10 s after the container stopped")??;
        eprintln!(
            "ExecSync after the stop: {:?} after {exec_took:?}",
            r.as_ref().map(|o| o.exit_code)
        );
        let gone = wait_until(5, || cri::processes_with_argv(&argv).is_empty());
        ensure!(
            gone,
            "exec'd process outlived its container: {:?}",
            cri::processes_with_argv(&argv)
        );
        let bg_argv = ["sleep", bg.as_str()];
        let gone = wait_until(5, || cri::processes_with_argv(&bg_argv).is_empty());
        ensure!(
            gone,
            "the container's background process outlived it: {:?}",
            cri::processes_with_argv(&bg_argv)
        );
        Ok(())
    })
}
