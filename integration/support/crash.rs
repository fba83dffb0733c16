//! The crash tests' fixture: a daemon attaching pods as a suite needs, the RPC a failpoint
//! kills it in, suites of kill points ending in the full leak check, and the checks a
//! recovered pod must pass.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::cri::{self, Pod, Rt};
use super::{block_on, leaks, Daemon, Need};

/// Root, runc, the test images and the CNI plugins (every pod here has its own network).
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

/// Exits 3 on SIGTERM; "started" once the trap is set.
pub const TRAP3: &str = "trap 'exit 3' TERM; echo started; while :; do sleep 0.1; done";

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

/// The containers of `pod`.
pub async fn pod_containers(rt: &mut Rt, pod: &str) -> Result<Vec<pb::Container>> {
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

/// A pod of `config` with one container running `script` (started, and its `started` line
/// seen, when `start`).
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
