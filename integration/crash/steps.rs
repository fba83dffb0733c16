//! kill -9 of the daemon at every step boundary of RunPodSandbox, CreateContainer,
//! StartContainer, StopContainer, StopPodSandbox and RemovePodSandbox (failpoints: test builds
//! only, see src/failpoint.rs), and while a container exits during recovery. After the restart
//! each object is complete and usable, or removable with nothing left; every exit code is right;
//! nothing of any pod is left once it is removed (support::leaks).

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, Rt};
use crate::support::{block_on, leaks, trial, wait_until, Daemon, Need};

/// Root, runc, the test images and the CNI plugins (every pod here has its own network).
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

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

/// Exits 3 on SIGTERM; "started" once the trap is set.
pub const TRAP3: &str = "trap 'exit 3' TERM; echo started; while :; do sleep 0.1; done";
/// Ignores SIGTERM (only the KILL at the deadline ends it: 137).
const NO_TERM: &str = "trap '' TERM; echo started; while :; do sleep 0.1; done";

/// The RPC a scenario kills the daemon in.
pub enum Rpc<'a> {
    RunPod(&'a pb::PodSandboxConfig),
    Create(&'a Pod, &'a pb::ContainerConfig),
    Start(&'a str),
    Stop(&'a str, i64),
    StopPod(&'a str),
    RemovePod(&'a str),
}

/// Makes `rpc` on a fresh connection.
pub fn call(d: &Daemon, rpc: Rpc) -> Result<()> {
    block_on(async {
        let mut rt = cri::client(d).await?;
        match rpc {
            Rpc::RunPod(config) => cri::run_pod(&mut rt, config.clone()).await.map(drop),
            Rpc::Create(pod, config) => cri::create(&mut rt, pod, config).await.map(drop),
            Rpc::Start(id) => cri::start(&mut rt, id).await,
            Rpc::Stop(id, timeout) => cri::stop(&mut rt, id, timeout).await.map(drop),
            Rpc::StopPod(id) => {
                let req = pb::StopPodSandboxRequest {
                    pod_sandbox_id: id.into(),
                };
                rt.stop_pod_sandbox(req).await.map(drop).map_err(Into::into)
            }
            Rpc::RemovePod(id) => {
                let req = pb::RemovePodSandboxRequest {
                    pod_sandbox_id: id.into(),
                };
                rt.remove_pod_sandbox(req)
                    .await
                    .map(drop)
                    .map_err(Into::into)
            }
        }
    })
}

/// Masquerade on, as the embedded network runs outside tests (with a CNI config, bridge's
/// `ipMasq`: DEL must remove a chain and a POSTROUTING rule per pod, which a DEL cut short
/// can leave).
pub const MASQUERADE: &str = "[network]\nmasquerade = true\n";

/// How a crash suite's daemon attaches its pods.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Net {
    /// The embedded network (netlink and nftables in the daemon), as a daemon without a CNI
    /// config runs.
    Embedded,
    /// A CNI config in the conf dir (Debian's bridge with `ipMasq`, host-local): plugin
    /// processes whose ADD and DEL a crash can cut short, and per-pod masquerade rules.
    Plugins,
}

/// A daemon for the crash tests, attaching pods as `net` says.
pub fn daemon(net: Net) -> Result<Daemon> {
    match net {
        Net::Embedded => cri::daemon(),
        Net::Plugins => {
            let d = cri::daemon_with(MASQUERADE)?;
            d.net().write_conflist_with(true)?;
            Ok(d)
        }
    }
}

/// One daemon (with `extra` config) for `specs`: each scenario runs with the busybox image and
/// the list of sandbox ids seen so far, then every pod left is removed and nothing may be
/// left of them. Failures name the spec.
pub fn suite(
    net: Net,
    specs: &[&str],
    mut scenario: impl FnMut(&mut Daemon, &str, &str, &mut Vec<String>) -> Result<()>,
) -> Result<()> {
    let mut d = daemon(net)?;
    let image = cri::import(&d, "busybox")?;
    let mut seen = Vec::new();
    for spec in specs {
        let t = std::time::Instant::now();
        scenario(&mut d, spec, &image, &mut seen)
            .and_then(|()| remove_all_and_check(&d, &mut seen))
            .with_context(|| format!("killed at {spec}"))?;
        eprintln!(
            "{spec}: recovered and clean in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    Ok(())
}

/// A pod's CRI status checks the kubelet's client makes: a creation time.
pub async fn check_created(rt: &mut Rt, pod: &str) -> Result<()> {
    let s = cri::pod_status(rt, pod).await?;
    ensure!(s.created_at > 0, "pod {pod}: CreatedAt {}", s.created_at);
    for c in pod_containers(rt, pod).await? {
        let s = cri::status(rt, &c.id).await?;
        ensure!(
            s.created_at > 0,
            "container {}: CreatedAt {} ({:?})",
            c.id,
            s.created_at,
            s
        );
    }
    Ok(())
}

async fn pod_containers(rt: &mut Rt, pod: &str) -> Result<Vec<pb::Container>> {
    cri::list_containers(
        rt,
        Some(pb::ContainerFilter {
            pod_sandbox_id: pod.into(),
            ..Default::default()
        }),
    )
    .await
}

/// The pod works: it has an address on the test network and runs a container to its exit
/// code.
async fn check_usable(d: &Daemon, rt: &mut Rt, pod: &Pod, image: &str) -> Result<()> {
    let st = cri::pod_status(rt, &pod.id).await?;
    ensure!(
        st.state == pb::PodSandboxState::SandboxReady as i32,
        "pod {} is not ready: {st:?}",
        pod.id
    );
    let ip = st.network.map(|n| n.ip).unwrap_or_default();
    ensure!(
        d.net().contains(&ip),
        "pod {} has address {ip:?}, not one in {}",
        pod.id,
        d.net().subnet()
    );
    let c = cri::sh_config(pod, &cri::unique("probe"), image, "echo hi; exit 5");
    let id = cri::create_start(rt, pod, &c).await?;
    let s = cri::wait_exited(rt, &id, 20).await?;
    cri::check_exit(&s, 5, "Error")
}

/// `config` as the kubelet sends it for the next attempt of the same pod.
fn next_attempt(config: &pb::PodSandboxConfig) -> pb::PodSandboxConfig {
    let mut c = config.clone();
    if let Some(m) = c.metadata.as_mut() {
        m.attempt += 1;
    }
    c
}

/// The pods of this test's daemon named as `config`'s.
async fn pods_named(rt: &mut Rt, config: &pb::PodSandboxConfig) -> Result<Vec<pb::PodSandbox>> {
    let name = config.metadata.as_ref().map(|m| m.name.clone());
    Ok(cri::list_pods(rt, None)
        .await?
        .into_iter()
        .filter(|p| p.metadata.as_ref().map(|m| m.name.clone()) == name)
        .collect())
}

/// Removes every pod left (stop, then remove: both must succeed) and checks nothing is left.
pub fn remove_all_and_check(d: &Daemon, seen: &mut Vec<String>) -> Result<()> {
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            for p in cri::list_pods(&mut rt, None).await? {
                seen.push(p.id.clone());
                cri::remove_pod(&mut rt, &p.id).await?;
            }
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            ensure!(cri::list_containers(&mut rt, None).await?.is_empty());
            Ok(())
        }),
    )?;
    leaks::assert_none(d, seen)
}

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

/// RunPodSandbox of `config` killed at `spec`, then the checks of [`run_pod_sandbox`].
pub fn run_pod_killed_at(
    d: &mut Daemon,
    spec: &str,
    image: &str,
    seen: &mut Vec<String>,
    config: &pb::PodSandboxConfig,
) -> Result<()> {
    d.crash_at(spec, |d| call(d, Rpc::RunPod(config)))?;
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let found = pods_named(&mut rt, config).await?;
            ensure!(found.len() <= 1, "two pods for one request: {found:?}");
            seen.extend(found.iter().map(|p| p.id.clone()));
            let pod = match found.first() {
                Some(p) => {
                    check_created(&mut rt, &p.id).await?;
                    if p.state == pb::PodSandboxState::SandboxReady as i32 {
                        Pod {
                            id: p.id.clone(),
                            config: config.clone(),
                        }
                    } else {
                        cri::remove_pod(&mut rt, &p.id).await?;
                        cri::run_pod(&mut rt, next_attempt(config)).await?
                    }
                }
                None => cri::run_pod(&mut rt, config.clone()).await?,
            };
            seen.push(pod.id.clone());
            check_usable(d, &mut rt, &pod, image).await
        }),
    )
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

/// A pod with one container created (not started) from `script`; waits for nothing.
pub fn pod_with_container(
    d: &Daemon,
    image: &str,
    script: &str,
    start: bool,
) -> Result<(Pod, String)> {
    pod_of_config_with_container(d, cri::pod_config(d, "crash"), image, script, start)
}

/// [`pod_with_container`] for a pod of `config`, the container started.
pub fn pod_with_container_in(
    d: &Daemon,
    config: pb::PodSandboxConfig,
    image: &str,
    script: &str,
) -> Result<(Pod, String)> {
    pod_of_config_with_container(d, config, image, script, true)
}

fn pod_of_config_with_container(
    d: &Daemon,
    config: pb::PodSandboxConfig,
    image: &str,
    script: &str,
    start: bool,
) -> Result<(Pod, String)> {
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let pod = cri::run_pod(&mut rt, config).await?;
            let c = cri::sh_config(&pod, "main", image, script);
            let id = cri::create(&mut rt, &pod, &c).await?;
            if start {
                cri::start(&mut rt, &id).await?;
                cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;
            }
            Ok((pod, id))
        }),
    )
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

/// After a crash inside StopPodSandbox of `pod` (whose container `id` ran [`TRAP3`]): the
/// container was killed (137), StopPodSandbox again leaves the pod NOTREADY without an address
/// and no lease is left.
pub async fn stopped_again_and_released(
    d: &Daemon,
    rt: &mut Rt,
    pod: &str,
    id: &str,
) -> Result<()> {
    check_created(rt, pod).await?;
    let s = cri::wait_exited(rt, id, 20).await?;
    cri::check_exit(&s, 137, "Error")?;
    rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: pod.into(),
    })
    .await?;
    let st = cri::pod_status(rt, pod).await?;
    ensure!(
        st.state == pb::PodSandboxState::SandboxNotready as i32
            && st.network.as_ref().is_none_or(|n| n.ip.is_empty()),
        "after StopPodSandbox: {st:?}"
    );
    ensure!(
        d.net().leases().is_empty(),
        "leases: {:?}",
        d.net().leases()
    );
    Ok(())
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
