//! kill -9 of the daemon at every step boundary of RunPodSandbox, CreateContainer,
//! StartContainer, StopContainer, StopPodSandbox and RemovePodSandbox (failpoints: test builds
//! only, see src/failpoint.rs), and while a container exits during recovery. After the restart
//! each object is complete and usable, or removable with nothing left; every exit code is right;
//! nothing of any pod is left once it is removed (support::leaks).

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::crash::{
    call, check_created, pod_containers, pod_with_container, remove_all_and_check,
    run_pod_killed_at, stopped_again_and_released, suite, Net, Rpc, NEEDS, TRAP3,
};
use crate::support::cri;
use crate::support::{block_on, trial, wait_until, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "crash::run_pod_sandbox_at_every_step",
            NEEDS,
            run_pod_sandbox,
        ),
        trial(
            "crash::create_container_at_every_step",
            NEEDS,
            create_container,
        ),
        trial(
            "crash::start_container_at_every_step",
            NEEDS,
            start_container,
        ),
        trial("crash::stop_container_at_every_step", NEEDS, stop_container),
        trial(
            "crash::stop_pod_sandbox_at_every_step",
            NEEDS,
            stop_pod_sandbox,
        ),
        trial(
            "crash::remove_pod_sandbox_at_every_step",
            NEEDS,
            remove_pod_sandbox,
        ),
        trial(
            "crash::a_container_exiting_during_recovery_is_reported_exited",
            NEEDS,
            exit_during_recovery,
        ),
    ]
}

/// Ignores SIGTERM (only the KILL at the deadline ends it: 137).
const NO_TERM: &str = "trap '' TERM; echo started; while :; do sleep 0.1; done";

const RUN_POD_POINTS: &[&str] = &[
    "sandbox.create.meta-written=kill",
    "sandbox.run.recorded=kill",
    "sandbox.run.namespaces=kill",
    "cni.add.recorded=kill",
    "cni.add.plugin-running=kill",
    "cni.add.plugin-done=kill",
    "cni.add.plugin-running=2@kill",
    "cni.add.plugin-done=2@kill",
    "cni.add.done=kill",
    "sandbox.run.network=kill",
    "sandbox.run.files=kill",
    "sandbox.run.ready=kill",
];

/// Killed inside RunPodSandbox: the pod is READY and usable, or NOTREADY and removable (the
/// kubelet then runs the next attempt, which works), or absent (the same request works).
fn run_pod_sandbox() -> Result<()> {
    suite(Net::Plugins, RUN_POD_POINTS, |d, spec, image, seen| {
        let config = cri::pod_config(d, "crash-run");
        run_pod_killed_at(d, spec, image, seen, &config)
    })
}

const CREATE_POINTS: &[&str] = &[
    "container.create.leased=kill",
    "container.create.meta-written=kill",
    "container.create.recorded=kill",
    "container.create.rootfs=kill",
    "container.create.done=kill",
];

/// Killed inside CreateContainer: the container is CREATED and starts to its exit code, or
/// is removable; the kubelet's next attempt works either way.
fn create_container() -> Result<()> {
    suite(Net::Embedded, CREATE_POINTS, |d, spec, image, _| {
        let pod = cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                cri::run_pod(&mut rt, cri::pod_config(d, "crash-create")).await
            }),
        )?;
        let config = cri::sh_config(&pod, "made", image, "echo made; exit 7");
        d.crash_at(spec, |d| call(d, Rpc::Create(&pod, &config)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                check_created(&mut rt, &pod.id).await?;
                let found = pod_containers(&mut rt, &pod.id).await?;
                ensure!(
                    found.len() <= 1,
                    "two containers for one request: {found:?}"
                );
                for c in &found {
                    if c.state == pb::ContainerState::ContainerCreated as i32 {
                        cri::start(&mut rt, &c.id).await?;
                        let s = cri::wait_exited(&mut rt, &c.id, 20).await?;
                        cri::check_exit(&s, 7, "Error")?;
                    }
                    cri::remove(&mut rt, &c.id).await?;
                }
                let mut again = config.clone();
                if let Some(m) = again.metadata.as_mut() {
                    m.attempt = 1;
                }
                let id = cri::create_start(&mut rt, &pod, &again).await?;
                let s = cri::wait_exited(&mut rt, &id, 20).await?;
                cri::check_exit(&s, 7, "Error")?;
                // The only image lease left is the retry's: one a crash left without its
                // container would hold the image's layers from GC for good.
                let leases = image_leases(d);
                ensure!(
                    leases == [id.clone()],
                    "image leases {leases:?}, want [{id}]"
                );
                Ok(())
            }),
        )?;
        Ok(())
    })
}

/// The owners of the image leases in the daemon's root (`<root>/leases/<owner>.json`).
fn image_leases(d: &Daemon) -> Vec<String> {
    std::fs::read_dir(d.root().join("leases"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().into_owned();
                    name.strip_suffix(".json").map(str::to_string)
                })
                .collect()
        })
        .unwrap_or_default()
}

const START_POINTS: &[&str] = &[
    "container.start.before-runc=kill",
    "container.start.monitor-spawned=kill",
    "container.start.launched=kill",
    "container.start.runc-started=kill",
    "container.start.done=kill",
];

/// Killed inside StartContainer: the container is CREATED (and starts) or RUNNING, and its
/// stop gives the trap's exit code.
fn start_container() -> Result<()> {
    suite(Net::Embedded, START_POINTS, |d, spec, image, _| {
        let (pod, id) = pod_with_container(d, image, TRAP3, false)?;
        d.crash_at(spec, |d| call(d, Rpc::Start(&id)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                check_created(&mut rt, &pod.id).await?;
                let s = cri::status(&mut rt, &id).await?;
                match cri::state_of(&s) {
                    pb::ContainerState::ContainerCreated
                        if spec.starts_with("container.start.before-runc") =>
                    {
                        cri::start(&mut rt, &id).await?
                    }
                    pb::ContainerState::ContainerRunning => {
                        ensure!(s.started_at > 0, "running without a start time: {s:?}")
                    }
                    other => anyhow::bail!("after the restart: {other:?} {s:?}"),
                }
                let log = pod.log_dir().join("main.log");
                cri::wait_log(&log, 10, |l| l.iter().any(|x| x == "started")).await?;
                cri::stop(&mut rt, &id, 10).await?;
                cri::check_exit(&cri::status(&mut rt, &id).await?, 3, "Error")
            }),
        )?;
        Ok(())
    })
}

/// `(failpoint, script, StopContainer timeout, exit code)`.
const STOP_CASES: &[(&str, &str, i64, i32)] = &[
    ("container.stop.signalled=kill", TRAP3, 10, 3),
    ("container.stop.killed=kill", NO_TERM, 1, 137),
    ("container.exit.observed=kill", TRAP3, 10, 3),
    ("container.exit.recorded=kill", TRAP3, 10, 3),
];

/// Killed inside StopContainer: the container ends as the stop made it (the trap's code, or
/// 137 after the deadline), reported with that code after the restart.
fn stop_container() -> Result<()> {
    let specs: Vec<&str> = STOP_CASES.iter().map(|c| c.0).collect();
    suite(Net::Embedded, &specs, |d, spec, image, _| {
        let &(_, script, timeout, code) =
            STOP_CASES.iter().find(|c| c.0 == spec).context("case")?;
        let (pod, id) = pod_with_container(d, image, script, true)?;
        d.crash_at(spec, |d| call(d, Rpc::Stop(&id, timeout)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                check_created(&mut rt, &pod.id).await?;
                let s = cri::wait_exited(&mut rt, &id, 20).await?;
                cri::check_exit(&s, code, "Error")?;
                cri::stop(&mut rt, &id, 0).await?;
                cri::check_exit(&cri::status(&mut rt, &id).await?, code, "Error")
            }),
        )?;
        Ok(())
    })
}

const STOP_POD_POINTS: &[&str] = &[
    "container.stop.killed=kill",
    "sandbox.stop.killed=kill",
    "cni.del.plugin-running=kill",
    "cni.del.plugin-done=kill",
    "cni.del.plugin-running=2@kill",
    "cni.del.plugin-done=2@kill",
    "cni.del.done=kill",
    "sandbox.stop.detached=kill",
    "sandbox.stop.torn-down=kill",
];

/// Killed inside StopPodSandbox: its container was killed (137); StopPodSandbox again
/// finishes the network teardown exactly, and the pod is removable with nothing left.
fn stop_pod_sandbox() -> Result<()> {
    suite(Net::Plugins, STOP_POD_POINTS, |d, spec, image, seen| {
        let (pod, id) = pod_with_container(d, image, TRAP3, true)?;
        seen.push(pod.id.clone());
        d.crash_at(spec, |d| call(d, Rpc::StopPod(&pod.id)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                stopped_again_and_released(d, &mut rt, &pod.id, &id).await
            }),
        )
    })
}

const REMOVE_POD_POINTS: &[&str] = &[
    "sandbox.remove.stopped=kill",
    "container.remove.marked=kill",
    "container.discard.files=kill",
    "container.remove.meta-removed=kill",
    "container.remove.meta-removed=2@kill",
    "sandbox.remove.containers=kill",
    "sandbox.remove.dir=kill",
    "sandbox.remove.meta-removed=kill",
];

/// Killed inside RemovePodSandbox (a pod with an exited and a running container): what is
/// left is listed consistently and RemovePodSandbox again removes everything.
fn remove_pod_sandbox() -> Result<()> {
    suite(Net::Plugins, REMOVE_POD_POINTS, |d, spec, image, seen| {
        let (pod, _) = pod_with_container(d, image, TRAP3, true)?;
        seen.push(pod.id.clone());
        let quit = cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                let c = cri::sh_config(&pod, "quit", image, "exit 4");
                let id = cri::create_start(&mut rt, &pod, &c).await?;
                cri::check_exit(&cri::wait_exited(&mut rt, &id, 20).await?, 4, "Error")?;
                Ok(id)
            }),
        )?;
        d.crash_at(spec, |d| call(d, Rpc::RemovePod(&pod.id)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                if !cri::list_pods(&mut rt, None).await?.is_empty() {
                    check_created(&mut rt, &pod.id).await?;
                }
                // A container still listed kept its real exit.
                if let Ok(s) = cri::status(&mut rt, &quit).await {
                    cri::check_exit(&s, 4, "Error")?;
                }
                Ok(())
            }),
        )?;
        Ok(())
    })
}

/// The pid of container `id`'s init, from runc's state.
fn init_pid(d: &Daemon, id: &str) -> Result<i32> {
    let runc = crate::support::runc_bin().context("runc")?;
    let out = std::process::Command::new(runc)
        .arg("--root")
        .arg(d.state().join("runc"))
        .args(["state", id])
        .output()?;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("runc state {id}: {}", String::from_utf8_lossy(&out.stderr)))?;
    v["pid"]
        .as_i64()
        .and_then(|p| i32::try_from(p).ok())
        .context("runc state without a pid")
}

/// A container ends while the restarted daemon is between reconciling (monitor alive: still
/// RUNNING) and re-adopting it (monitor gone): it must come out EXITED with its real code, be
/// removable, and the container that keeps running must stay adopted (issue 16).
fn exit_during_recovery() -> Result<()> {
    let mut d = cri::daemon()?;
    let image = cri::import(&d, "busybox")?;
    let (pod, ending) = pod_with_container(&d, &image, TRAP3, true)?;
    let staying = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let c = cri::sh_config(&pod, "stays", &image, TRAP3);
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;
            Ok(id)
        }),
    )?;
    let pid = init_pid(&d, &ending)?;
    d.kill9();
    d.set_failpoints(Some("recover.reconciled=pause"));
    d.launch()?;
    let pause = d.failpoint_dir().join("recover.reconciled.paused");
    ensure!(
        wait_until(20, || pause.exists()),
        "the daemon never paused in recovery; log:\n{}",
        d.log()
    );
    // The container ends now; its monitor records the exit and goes.
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(pid).context("pid")?,
        rustix::process::Signal::TERM,
    )?;
    ensure!(
        wait_until(10, || cri::monitors_of(&ending).is_empty()),
        "the monitor of {ending} did not finish"
    );
    std::fs::remove_file(&pause)?;
    d.wait_serving(20)?;
    d.set_failpoints(None);
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let s = cri::status(&mut rt, &ending).await?;
            cri::check_exit(&s, 3, "Error")?;
            let s = cri::status(&mut rt, &staying).await?;
            ensure!(
                cri::state_of(&s) == pb::ContainerState::ContainerRunning,
                "the other container: {s:?}"
            );
            cri::stop(&mut rt, &staying, 10).await?;
            cri::check_exit(&cri::status(&mut rt, &staying).await?, 3, "Error")?;
            cri::remove(&mut rt, &ending).await?;
            Ok(())
        }),
    )?;
    let mut seen = vec![pod.id];
    remove_all_and_check(&d, &mut seen)
}
