//! Container cgroups with the test daemons' driver: kubelet-style parents in either form, the wrong form refused, RuntimeConfig, and the kill that reaches every process of a cgroup.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cgroup::{self, Driver};
use crate::support::cri::{self, Rt, NEEDS};
use crate::support::Scenario;
use crate::support::{block_on, trial, wait_until, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cgroups::kubelet_style_parents_place_containers_for_the_driver",
            NEEDS,
            kubelet_style_parents,
        ),
        trial(
            "cgroups::kill_at_the_deadline_reaches_every_process_of_the_cgroup",
            NEEDS,
            kill_reaches_every_process,
        ),
        trial(
            "cgroups::starts_and_execs_warm_the_migration_lock_from_the_daemons_own_cgroup",
            NEEDS,
            warm_from_own_cgroup,
        ),
    ]
}

/// The cgroup of `pid` as /proc/PID/cgroup names it: the unified line on v2, the memory
/// hierarchy's on v1.
fn cgroup_of(pid: i64) -> String {
    let text = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let v2 = cgroup::unified();
    text.lines()
        .find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let hit = if v2 {
                controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == "memory")
            };
            hit.then(|| path.to_string())
        })
        .unwrap_or_default()
}

/// The pids in cgroup `dir` (`cgroup.procs`, v2 or the v1 memory hierarchy).
fn procs(dir: &str) -> Vec<i64> {
    cgroup::read(dir, "memory", "cgroup.procs")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

fn with_parent(d: &Daemon, name: &str, parent: &str) -> pb::PodSandboxConfig {
    let mut config = cri::pod_config(d, name);
    if let Some(l) = config.linux.as_mut() {
        l.cgroup_parent = parent.to_string();
    }
    config
}

/// A pod under `parent`: its container lands in the driver's cgroup below it (the scope in the
/// pod's slice for systemd) and leaves it when stopped.
async fn check_parent(rt: &mut Rt, d: &Daemon, busybox: &str, parent: &str) -> Result<()> {
    let pod = cri::run_pod(rt, with_parent(d, "parent", parent)).await?;
    let c = cri::sh_config(&pod, "placed", busybox, "exec sleep 1000");
    let id = cri::create_start(rt, &pod, &c).await?;
    let pid = cri::init_pid(d, &id)?;
    let dir = cgroup::container_dir(parent, &id);
    ensure!(
        cgroup_of(pid) == dir,
        "parent {parent:?}: the container runs in {:?}, want {dir:?}",
        cgroup_of(pid)
    );
    ensure!(procs(&dir).contains(&pid), "{dir}/cgroup.procs lacks {pid}");
    if cgroup::driver() == Driver::Systemd {
        let scope = format!("bosun-{id}.scope");
        let slice = cgroup::parent_dir(parent)
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_string();
        for (property, want) in [("Slice", slice.as_str()), ("ActiveState", "active")] {
            let got = cgroup::unit_property(&scope, property);
            ensure!(got == want, "{scope}: {property}={got}, want {want}");
        }
    }
    cri::stop(rt, &id, 0).await?;
    ensure!(
        wait_until(10, || !std::path::Path::new(cgroup::ROOT)
            .join(dir.trim_start_matches('/'))
            .exists()
            || cgroup::read(&dir, "memory", "cgroup.procs").is_none()),
        "{dir} still there after the container stopped"
    );
    cri::remove_pod(rt, &pod.id).await?;
    cgroup::remove_pod_parent(parent);
    Ok(())
}

fn kubelet_style_parents() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let driver = cgroup::driver();
        let mut rt = s.rt.clone();
        let rc = rt
            .runtime_config(pb::RuntimeConfigRequest {})
            .await?
            .into_inner();
        let want = match driver {
            Driver::Cgroupfs => pb::CgroupDriver::Cgroupfs,
            Driver::Systemd => pb::CgroupDriver::Systemd,
        };
        ensure!(
            rc.linux.map(|l| l.cgroup_driver) == Some(want as i32),
            "RuntimeConfig: {:?}, want {want:?}",
            rc.linux
        );
        // The kubelet's per-pod parent in the driver's form; for systemd also the slice's
        // expanded path (what the kubelet's systemd cgroup manager sends).
        let mut parents = vec![cgroup::pod_parent(&d.cgroup_parent(), "a1-b2")];
        if driver == Driver::Systemd {
            parents.push(cgroup::parent_dir(&cgroup::pod_parent(
                &d.cgroup_parent(),
                "c3-d4",
            )));
        }
        for parent in &parents {
            check_parent(&mut rt, d, &busybox, parent).await?;
        }
        // The other driver's form (a kubelet configured with the other cgroupDriver), or a
        // path that climbs, is refused before anything is made.
        let wrong: &[&str] = match driver {
            Driver::Cgroupfs => &["kubepods-besteffort-pod1.slice", "/kubepods/../etc"],
            Driver::Systemd => &["/kubepods/besteffort/pod1", "/x.slice/y.slice"],
        };
        for parent in wrong {
            let err = rt
                .run_pod_sandbox(pb::RunPodSandboxRequest {
                    config: Some(with_parent(d, "wrong", parent)),
                    runtime_handler: String::new(),
                })
                .await
                .expect_err("a parent of the wrong form must be refused");
            ensure!(
                err.code() == tonic::Code::InvalidArgument
                    && err.message().contains("linux.cgroup_parent"),
                "parent {parent:?}: {err:?}"
            );
        }
        ensure!(
            cri::list_pods(&mut rt, None).await?.is_empty(),
            "a refused pod was kept"
        );
        Ok(())
    })
}

/// A container sharing the pod's pid namespace (its init is not PID 1, so killing it does not
/// take the rest down) with a TERM-ignoring child: at the deadline every process of its
/// cgroup dies. On cgroup v2 that is one write to `cgroup.kill`; on v1 `runc kill --all`.
fn kill_reaches_every_process() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let mut config = cri::pod_config(d, "killall");
        cri::share_pid(&mut config);
        let pod = cri::run_pod(&mut rt, config).await?;
        let c = cri::sh_config(
            &pod,
            "stubborn",
            &busybox,
            "trap '' TERM; sh -c 'exec sleep 1000' & sh -c 'exec sleep 1000' & \
             echo children; while :; do sleep 1; done",
        );
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 20, |l| l.iter().any(|x| x == "children")).await?;
        let dir = cgroup::container_dir(&d.cgroup_parent(), &id);
        let before = procs(&dir);
        ensure!(before.len() >= 3, "{dir}: processes {before:?}");
        let took = cri::stop(&mut rt, &id, 1).await?;
        eprintln!(
            "stop with a 1 s grace: {took:?} ({} ms past the deadline)",
            took.saturating_sub(Duration::from_secs(1)).as_millis()
        );
        ensure!(
            took >= Duration::from_secs(1),
            "stopped before the deadline: {took:?}"
        );
        cri::check_exit(&cri::status(&mut rt, &id).await?, 137, "Error")?;
        let gone = wait_until(10, || {
            before
                .iter()
                .all(|p| !std::path::Path::new(&format!("/proc/{p}")).exists())
        });
        ensure!(gone, "processes of {id} survive: {:?}", procs(&dir));
        let log = d.log();
        let by_cgroup_kill = log.contains("stop: cgroup.kill");
        ensure!(
            by_cgroup_kill == cgroup::unified(),
            "cgroup.kill used: {by_cgroup_kill}, on a v2 host: {}",
            cgroup::unified()
        );
        cri::remove_pod(&mut rt, &pod.id).await
    })
}

/// StartContainer and ExecSync each first write the daemon into the cgroup it is already in
/// (so that runc's cgroup join finds the kernel's RCU grace period under way or over): the
/// daemon found its own cgroup at start, each write succeeded, and it never moved.
fn warm_from_own_cgroup() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let daemon = d.pid().context("daemon pid")?;
    let own = || std::fs::read_to_string(format!("/proc/{daemon}/cgroup")).unwrap_or_default();
    let before = own();
    let log = d.log();
    let procs = log
        .lines()
        .find(|l| l.contains("cgroup warming on"))
        .and_then(|l| l.split("procs=").nth(1))
        .and_then(|v| v.split_whitespace().next())
        .with_context(|| format!("no 'cgroup warming on' in the daemon log:\n{log}"))?
        .to_string();
    let listed = std::fs::read_to_string(&procs).unwrap_or_default();
    ensure!(
        listed.lines().any(|l| l.trim() == daemon.to_string()),
        "{procs} does not list daemon {daemon}"
    );
    let warmed = |d: &Daemon| d.log().matches("cgroup migration lock warmed").count();
    let at_start = warmed(&d);
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "warm")).await?;
            let c = cri::sh_config(&pod, "w", &busybox, "exec sleep 1000");
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            wait_until(10, || warmed(&d) > at_start);
            let out = cri::exec(&mut rt, &id, &["true"], 10).await?;
            ensure!(out.exit_code == 0, "exec true: {out:?}");
            wait_until(10, || warmed(&d) > at_start + 1);
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    let log = d.log();
    ensure!(
        !log.contains("cgroup warming off"),
        "warming went off:\n{log}"
    );
    ensure!(
        warmed(&d) >= at_start + 2,
        "{} warming writes for one start and one exec",
        warmed(&d) - at_start
    );
    ensure!(own() == before, "the daemon moved: {before} -> {}", own());
    cri::assert_clean(&d)
}
