//! A bounded random kill -9 churn: workers run, stop and remove pods (hostPorts, masquerade,
//! containers that exit by themselves and ones that are stopped) while the daemon is
//! SIGKILLed at random moments and started again at once. Afterwards every object is
//! consistent (creation times set, exit codes right), everything is removable, and nothing is
//! left on the host (support::leaks, firewall rules included).

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use rand::Rng;

use crate::support::crash::NEEDS;
use crate::support::cri::{self, Rt};
use crate::support::network::HostPortGuard;
use crate::support::{block_on, leaks, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "crash::churn::random_kill9_leaves_nothing_behind",
        NEEDS,
        churn,
    )]
}

/// How long the workers run (kills keep coming meanwhile), × BOSUN_TEST_TIME_SCALE.
const CHURN: Duration = Duration::from_secs(45);
/// Concurrent workers (the CI machine has two cores).
const WORKERS: usize = 3;
/// Time between two kills: uniform in this range, × BOSUN_TEST_TIME_SCALE (a slow lane needs
/// as many times longer for a pod life, and for a restart: under qemu TCG a restart alone took
/// ~6 s and no life ever completed between kills 1.5–4 s apart).
const KILL_EVERY_MS: std::ops::Range<u64> = 1500..4000;
/// Exits 3 on SIGTERM.
const TRAP3: &str = "trap 'exit 3' TERM; while :; do sleep 0.1; done";

/// What the workers did.
#[derive(Default)]
struct Tally {
    pods: AtomicUsize,
    containers: AtomicUsize,
    completed: AtomicUsize,
    errors: AtomicUsize,
    sandboxes: Mutex<Vec<String>>,
}

/// What a worker needs to make pods without the daemon (which the killer owns).
#[derive(Clone)]
struct Env {
    socket: PathBuf,
    template: pb::PodSandboxConfig,
    image: String,
}

impl Env {
    fn pod_config(&self, n: usize, host_port: Option<u16>) -> pb::PodSandboxConfig {
        let name = cri::unique(&format!("churn{n}"));
        let mut c = self.template.clone();
        c.metadata = Some(pb::PodSandboxMetadata {
            name: name.clone(),
            uid: format!("uid-{name}"),
            namespace: cri::NAMESPACE.into(),
            attempt: 0,
        });
        c.hostname = name.clone();
        c.log_directory = PathBuf::from(&self.template.log_directory)
            .with_file_name(&name)
            .display()
            .to_string();
        c.port_mappings = host_port
            .map(|p| pb::PortMapping {
                protocol: pb::Protocol::Tcp as i32,
                container_port: 8080,
                host_port: i32::from(p),
                host_ip: String::new(),
            })
            .into_iter()
            .collect();
        c
    }

    async fn client(&self) -> Result<Rt> {
        let ch = bosun::cli::client::connect(&self.socket).await?;
        Ok(pb::runtime_service_client::RuntimeServiceClient::new(ch))
    }
}

/// One pod's life: run it, start a container that exits by itself with a known code and one
/// that runs until stopped, let them be, stop one container, then stop and remove the pod.
/// Any error ends the life early (the daemon was killed); the pod is left to the end.
async fn life(env: &Env, tally: &Tally, n: usize, host_port: Option<u16>) -> Result<()> {
    let mut rt = env.client().await?;
    let (code, nap, stop_timeout) = {
        let mut r = rand::rng();
        (
            r.random_range(0..10),
            r.random_range(0..6),
            r.random_range(0..3),
        )
    };
    let pod = cri::run_pod(&mut rt, env.pod_config(n, host_port)).await?;
    tally.pods.fetch_add(1, Ordering::Relaxed);
    tally
        .sandboxes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(pod.id.clone());
    let short = cri::sh_config(
        &pod,
        &format!("short-c{code}"),
        &env.image,
        &format!("echo hi; sleep 0.{nap}; exit {code}"),
    );
    let long = cri::sh_config(&pod, "long", &env.image, TRAP3);
    cri::create_start(&mut rt, &pod, &short).await?;
    tally.containers.fetch_add(1, Ordering::Relaxed);
    let long = cri::create_start(&mut rt, &pod, &long).await?;
    tally.containers.fetch_add(1, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(100 * nap)).await;
    cri::stop(&mut rt, &long, stop_timeout).await?;
    cri::remove_pod(&mut rt, &pod.id).await?;
    tally.completed.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn worker(env: Env, tally: Arc<Tally>, stop: Arc<AtomicBool>, w: usize, port: Option<u16>) {
    block_on(async {
        let mut n = 0;
        while !stop.load(Ordering::Relaxed) {
            n += 1;
            // One worker maps a host port on every other pod (portmap rules to leave behind).
            let host_port = port.filter(|_| n % 2 == 0);
            if life(&env, &tally, w * 10_000 + n, host_port).await.is_err() {
                tally.errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
}

/// The exit codes a container of the churn may have ended with, from its name.
fn allowed_codes(name: &str) -> Vec<i32> {
    match name
        .strip_prefix("short-c")
        .and_then(|c| c.parse::<i32>().ok())
    {
        // Its own code, or killed (StopPodSandbox: KILL; StopContainer: TERM or KILL).
        Some(code) => vec![code, 137, 143],
        // The trap's code on TERM, or KILL.
        None => vec![3, 137],
    }
}

/// Every object after the last restart: creation times set, a RUNNING container has its
/// monitor, an EXITED container that ran has an exit code it can have had.
async fn check_consistent(rt: &mut Rt, daemon_log: &str) -> Result<(usize, usize)> {
    let pods = cri::list_pods(rt, None).await?;
    for p in &pods {
        let s = cri::pod_status(rt, &p.id).await?;
        ensure!(s.created_at > 0, "pod without CreatedAt: {s:?}");
    }
    let containers = cri::list_containers(rt, None).await?;
    for c in &containers {
        let s = cri::status(rt, &c.id).await?;
        ensure!(s.created_at > 0, "container without CreatedAt: {s:?}");
        let name = s
            .metadata
            .as_ref()
            .map(|m| m.name.clone())
            .unwrap_or_default();
        match cri::state_of(&s) {
            pb::ContainerState::ContainerRunning => ensure!(
                !cri::monitors_of(&c.id).is_empty(),
                "RUNNING without a monitor: {s:?}"
            ),
            pb::ContainerState::ContainerExited if s.started_at > 0 => {
                let reason = if s.exit_code == 0 {
                    "Completed"
                } else {
                    "Error"
                };
                ensure!(
                    allowed_codes(&name).contains(&s.exit_code) && s.reason == reason,
                    "{name}: exit code {} reason {:?}: {s:?}\n--- its log:\n{}\n--- the daemon on it:\n{}",
                    s.exit_code,
                    s.reason,
                    std::fs::read_to_string(&s.log_path).unwrap_or_default(),
                    daemon_log
                        .lines()
                        .filter(|l| l.contains(&c.id) && !l.contains("h2::"))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
            _ => {}
        }
    }
    Ok((pods.len(), containers.len()))
}

fn churn() -> Result<()> {
    let mut d = cri::daemon_with(crate::support::crash::MASQUERADE)?;
    let _ports = HostPortGuard::new();
    let image = cri::import(&d, "busybox")?;
    let env = Env {
        socket: d.socket(),
        template: cri::pod_config(&d, "churn"),
        image,
    };
    let tally = Arc::new(Tally::default());
    let stop = Arc::new(AtomicBool::new(false));
    let port = std::net::TcpListener::bind("0.0.0.0:0")?
        .local_addr()?
        .port();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (env, tally, stop) = (env.clone(), tally.clone(), stop.clone());
            let port = (w == 0).then_some(port);
            std::thread::spawn(move || worker(env, tally, stop, w, port))
        })
        .collect();
    let started = Instant::now();
    let (mut kills, mut exit_ms, mut up_ms, mut waited) = (0, Vec::new(), Vec::new(), 0);
    let mut rng = rand::rng();
    let scale = u64::from(crate::support::time_scale());
    let kill_every = KILL_EVERY_MS.start * scale..KILL_EVERY_MS.end * scale;
    while started.elapsed() < crate::support::scaled(CHURN) {
        std::thread::sleep(Duration::from_millis(rng.random_range(kill_every.clone())));
        // kill -9 and start again at once, without waiting for the old process to go.
        let t = Instant::now();
        let mut old = d.kill_nowait().context("no daemon to kill")?;
        d.launch()?;
        old.wait()?;
        exit_ms.push(t.elapsed().as_millis());
        d.wait_serving(30)?;
        up_ms.push(t.elapsed().as_millis());
        kills += 1;
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        let _ = w.join();
    }
    // One more crash with whatever the workers left, then the checks.
    d.restart()?;
    let log = d.log();
    // What kept the killed daemons (evidence for issue 16 item 5).
    for l in log
        .lines()
        .filter(|l| l.contains("was killed but has not exited yet"))
    {
        waited += 1;
        if let Some(why) = l.split("last thread: ").nth(1) {
            eprintln!("a restarted daemon waited for the killed one: {why}");
        }
    }
    ensure!(
        !log.contains("panicked"),
        "the daemon panicked; log:\n{log}"
    );
    let (pods_left, containers_left) = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let left = check_consistent(&mut rt, &log).await?;
            for p in cri::list_pods(&mut rt, None).await? {
                tally
                    .sandboxes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(p.id.clone());
                cri::remove_pod(&mut rt, &p.id).await?;
            }
            ensure!(cri::list_containers(&mut rt, None).await?.is_empty());
            Ok(left)
        }),
    )?;
    let ids = tally
        .sandboxes
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    eprintln!(
        "churn: {kills} kills in {:.0} s; pods run {} (lives completed {}), containers {}, \
         interrupted lives {}; left after the churn: {pods_left} pods, {containers_left} \
         containers; kill → old daemon gone: max {} ms; kill → serving again: median {} ms, \
         max {} ms; daemons that waited for a killed one: {waited}",
        started.elapsed().as_secs_f64(),
        tally.pods.load(Ordering::Relaxed),
        tally.completed.load(Ordering::Relaxed),
        tally.containers.load(Ordering::Relaxed),
        tally.errors.load(Ordering::Relaxed),
        exit_ms.iter().max().copied().unwrap_or(0),
        median(&mut up_ms),
        up_ms.iter().max().copied().unwrap_or(0),
    );
    ensure!(kills >= 5, "only {kills} kills");
    ensure!(
        tally.completed.load(Ordering::Relaxed) > 0,
        "no pod life completed between the kills"
    );
    leaks::assert_none(&d, &ids)
}

fn median(v: &mut [u128]) -> u128 {
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}
