//! Lists never miss a live object (issue 28 item 5): 20 pods torn down in parallel (their
//! containers stopped and removed one by one, or all at once by StopPodSandbox and
//! RemovePodSandbox, and StartContainer racing RemoveContainer) while two tasks list in a
//! tight loop. Every container and pod whose removal has not been asked for when a list
//! returns is in it, and no container whose monitor runs is ever missing from one.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, Rt};
use crate::support::{block_on, leaks, trial, Daemon, Need};

const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "faults::lists_never_miss_a_live_object_while_20_pods_are_torn_down",
        NEEDS,
        stress,
    )]
}

const PODS: usize = 20;
/// Runs until stopped; "started" once running.
const SLEEPER: &str = "echo started; while :; do sleep 1; done";

/// When the removal of each object was asked for (RemoveContainer, or RemovePodSandbox for
/// a pod and all its containers); absent: not yet.
#[derive(Default)]
struct Asked {
    removal: Mutex<HashMap<String, Instant>>,
}

impl Asked {
    fn mark(&self, ids: &[String]) {
        let mut m = self.removal.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        for id in ids {
            m.entry(id.clone()).or_insert(now);
        }
    }
    /// Whether removal of `id` was asked for before `at`.
    fn before(&self, id: &str, at: Instant) -> bool {
        let m = self.removal.lock().unwrap_or_else(|e| e.into_inner());
        m.get(id).is_some_and(|t| *t <= at)
    }
}

/// Container id → pid of every live `bosun monitor --id <id>` (one scan of /proc).
fn live_monitors() -> HashMap<String, i32> {
    cri::pids()
        .into_iter()
        .filter_map(|p| {
            let argv = cri::cmdline(p);
            let id = argv
                .windows(3)
                .find(|w| w[0] == "monitor" && w[1] == "--id")
                .map(|w| w[2].clone())?;
            cri::proc_state(p)
                .is_some_and(|(s, _)| s != 'Z')
                .then_some((id, p))
        })
        .collect()
}

struct World {
    pods: Vec<(Pod, Vec<String>)>,
    /// Created, never started: raced by StartContainer and RemoveContainer.
    raced: Vec<String>,
}

async fn set_up(d: &Daemon, image: &str) -> Result<World> {
    let mut rt = cri::client(d).await?;
    let mut pods = Vec::new();
    let mut raced = Vec::new();
    for i in 0..PODS {
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, &format!("list{i}"))).await?;
        let mut ids = Vec::new();
        for name in ["a", "b"] {
            let c = cri::sh_config(&pod, name, image, SLEEPER);
            ids.push(cri::create_start(&mut rt, &pod, &c).await?);
        }
        if i < PODS / 2 {
            let c = cri::sh_config(&pod, "raced", image, SLEEPER);
            raced.push(cri::create(&mut rt, &pod, &c).await?);
        }
        pods.push((pod, ids));
    }
    Ok(World { pods, raced })
}

/// What one lister saw: lists made, the slowest list, violations.
struct Seen {
    lists: usize,
    slowest: std::time::Duration,
    bad: Vec<String>,
}

/// Lists until `done`, checking each answer (`scan`: also against the live monitors).
async fn lister(
    mut rt: Rt,
    all_containers: HashSet<String>,
    all_pods: HashSet<String>,
    asked: Arc<Asked>,
    done: Arc<AtomicBool>,
    scan: bool,
) -> Result<Seen> {
    let mut seen = Seen {
        lists: 0,
        slowest: std::time::Duration::ZERO,
        bad: Vec::new(),
    };
    while !done.load(Ordering::Acquire) {
        let t = Instant::now();
        let listed: HashSet<String> = cri::list_containers(&mut rt, None)
            .await?
            .into_iter()
            .map(|c| c.id)
            .collect();
        let at = Instant::now();
        let pods: HashSet<String> = cri::list_pods(&mut rt, None)
            .await?
            .into_iter()
            .map(|p| p.id)
            .collect();
        let pods_at = Instant::now();
        seen.slowest = seen.slowest.max(pods_at - t);
        seen.lists += 1;
        let n = seen.lists;
        for c in all_containers.difference(&listed) {
            if !asked.before(c, at) {
                seen.bad.push(format!(
                    "list {n}: container {c} missing, its removal not asked for"
                ));
            }
        }
        for p in all_pods.difference(&pods) {
            if !asked.before(p, pods_at) {
                seen.bad.push(format!(
                    "list {n}: pod {p} missing, its removal not asked for"
                ));
            }
        }
        if scan {
            let monitors = tokio::task::spawn_blocking(live_monitors).await?;
            for (c, pid) in monitors {
                if all_containers.contains(&c) && !listed.contains(&c) {
                    seen.bad.push(format!(
                        "list {n}: container {c} missing while its monitor (pid {pid}) runs"
                    ));
                }
            }
        }
    }
    Ok(seen)
}

/// Tears pod `i` down: the first half container by container (stops in parallel, then
/// removals in parallel, the created one raced by a start), the second half at once.
async fn tear_down(
    mut rt: Rt,
    i: usize,
    pod: Pod,
    ids: Vec<String>,
    raced: Option<String>,
    asked: Arc<Asked>,
    outcomes: Arc<Mutex<Vec<&'static str>>>,
) -> Result<()> {
    if let Some(c) = raced {
        let (mut a, mut b) = (rt.clone(), rt.clone());
        let start = async {
            a.start_container(pb::StartContainerRequest {
                container_id: c.clone(),
            })
            .await
        };
        let remove = async {
            asked.mark(std::slice::from_ref(&c));
            cri::remove(&mut b, &c).await
        };
        let (started, removed) = tokio::join!(start, remove);
        removed?;
        let outcome = match &started {
            Ok(_) => "started, then removed",
            Err(s) if s.code() == tonic::Code::NotFound => "removed first: nothing started",
            Err(_) => "removed first: the start went on",
        };
        outcomes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(outcome);
        if let Err(s) = started {
            ensure!(
                s.code() == tonic::Code::NotFound,
                "StartContainer raced by RemoveContainer: {:?} {}",
                s.code(),
                s.message()
            );
        }
    }
    if i < PODS / 2 {
        let stops = ids.iter().map(|c| {
            let mut rt = rt.clone();
            async move { cri::stop(&mut rt, c, 0).await.map(drop) }
        });
        for r in futures::future::join_all(stops).await {
            r?;
        }
        let removals = ids.iter().map(|c| {
            let (mut rt, asked) = (rt.clone(), asked.clone());
            async move {
                asked.mark(std::slice::from_ref(c));
                cri::remove(&mut rt, c).await
            }
        });
        for r in futures::future::join_all(removals).await {
            r?;
        }
    }
    rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: pod.id.clone(),
    })
    .await?;
    let mut all = ids;
    all.push(pod.id.clone());
    asked.mark(&all);
    cri::remove_pod(&mut rt, &pod.id).await
}

fn stress() -> Result<()> {
    let d = cri::daemon()?;
    let image = cri::import(&d, "busybox")?;
    let t = Instant::now();
    let world = cri::with_log(&d, block_on(set_up(&d, &image)))?;
    eprintln!(
        "{} pods, {} containers up in {:.1} s",
        world.pods.len(),
        world.pods.len() * 2 + world.raced.len(),
        t.elapsed().as_secs_f64()
    );
    let mut seen: Vec<String> = world.pods.iter().map(|(p, _)| p.id.clone()).collect();
    let all_containers: HashSet<String> = world
        .pods
        .iter()
        .flat_map(|(_, ids)| ids.iter().cloned())
        .chain(world.raced.iter().cloned())
        .collect();
    let all_pods: HashSet<String> = seen.iter().cloned().collect();
    let asked = Arc::new(Asked::default());
    let done = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let t = Instant::now();
    let outcome = block_on(async {
        let rt = cri::client(&d).await?;
        let listers: Vec<_> = [false, false, false, true]
            .into_iter()
            .map(|scan| {
                tokio::spawn(lister(
                    rt.clone(),
                    all_containers.clone(),
                    all_pods.clone(),
                    asked.clone(),
                    done.clone(),
                    scan,
                ))
            })
            .collect();
        let mut raced = world.raced.clone().into_iter();
        let downs: Vec<_> = world
            .pods
            .iter()
            .cloned()
            .enumerate()
            .map(|(i, (pod, ids))| {
                let r = if i < PODS / 2 { raced.next() } else { None };
                let (asked, torn, rt) = (asked.clone(), torn.clone(), rt.clone());
                let outcomes = outcomes.clone();
                tokio::spawn(async move {
                    let r = tear_down(rt, i, pod, ids, r, asked, outcomes).await;
                    torn.fetch_add(1, Ordering::Relaxed);
                    r
                })
            })
            .collect();
        let downs = futures::future::join_all(downs).await;
        done.store(true, Ordering::Release);
        let lists = futures::future::join_all(listers).await;
        Ok::<_, anyhow::Error>((lists, downs))
    });
    let (lists, downs) = cri::with_log(&d, outcome)?;
    let mut problems = Vec::new();
    for r in downs {
        if let Err(e) = r? {
            problems.push(format!("teardown: {e:#}"));
        }
    }
    let mut total = 0;
    let mut slowest = std::time::Duration::ZERO;
    for r in lists {
        let seen = r??;
        total += seen.lists;
        slowest = slowest.max(seen.slowest);
        problems.extend(seen.bad);
    }
    eprintln!(
        "{total} lists (the slowest pair {} ms) while {} pods were torn down in {:.1} s",
        slowest.as_millis(),
        torn.load(Ordering::Relaxed),
        t.elapsed().as_secs_f64()
    );
    let mut races: HashMap<&str, usize> = HashMap::new();
    for o in outcomes.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        *races.entry(o).or_default() += 1;
    }
    eprintln!("StartContainer racing RemoveContainer: {races:?}");
    ensure!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems[..problems.len().min(40)].join("\n")
    );
    seen.sort();
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            ensure!(cri::list_containers(&mut rt, None).await?.is_empty());
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            Ok(())
        }),
    )?;
    leaks::assert_none(&d, &seen)
}
