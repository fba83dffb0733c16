//! Created containers without a process (issue 13): CreateContainer starts nothing, StartContainer runs it; what a created container answers; kill -9 between create and start.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::deferred::a_created_container_holds_no_process_and_starts_to_its_exit",
            NEEDS,
            no_process_until_start,
        ),
        trial(
            "cri::deferred::what_needs_a_process_refuses_a_created_container",
            NEEDS,
            refusals,
        ),
        trial(
            "cri::deferred::a_stopped_pod_starts_none_of_its_created_containers",
            NEEDS,
            stopped_pod,
        ),
        trial(
            "cri::deferred::created_containers_start_after_a_daemon_kill",
            NEEDS,
            start_after_kill,
        ),
    ]
}

/// Every live process tied to container `id`: its monitor, or a process in its cgroup (a
/// waiting `runc init` is one).
fn processes_of(id: &str) -> Vec<i32> {
    let mut pids = cri::monitors_of(id);
    pids.extend(cri::pids().into_iter().filter(|p| {
        std::fs::read_to_string(format!("/proc/{p}/cgroup")).is_ok_and(|c| c.contains(id))
            && cri::proc_state(*p).is_some_and(|(s, _)| s != 'Z')
    }));
    pids
}

/// Nothing of created container `id` runs: no process, no runc container, no cgroup.
fn holds_nothing(d: &crate::support::Daemon, id: &str) -> Result<()> {
    let pids = processes_of(id);
    ensure!(
        pids.is_empty(),
        "created container {id}: processes {pids:?}"
    );
    let runc = cri::runc_containers(&d.state());
    ensure!(
        !runc.iter().any(|c| c == id),
        "created container {id}: runc knows it"
    );
    let cgroups = cri::cgroups_of(&d.cgroup_parent(), id);
    ensure!(cgroups.is_empty(), "created container {id}: {cgroups:?}");
    Ok(())
}

async fn created(rt: &mut Rt, id: &str) -> Result<pb::ContainerStatus> {
    let s = cri::status(rt, id).await?;
    ensure!(
        cri::state_of(&s) == pb::ContainerState::ContainerCreated
            && s.created_at > 0
            && s.started_at == 0,
        "not CREATED: {s:?}"
    );
    Ok(s)
}

/// CreateContainer starts no process (no monitor, no `runc init`, no cgroup: no memory);
/// ContainerStatus/ListContainers say CREATED; StartContainer then runs it to its exit code
/// with created <= started <= finished and clean signal dispositions; RemoveContainer of a created one leaves nothing.
fn no_process_until_start() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "deferred")).await?;
        let mut ids = Vec::new();
        for i in 0..3 {
            let c = cri::sh_config(&pod, &format!("idle-{i}"), &busybox, "exit 4");
            ids.push(cri::create(&mut rt, &pod, &c).await?);
        }
        // What the container's processes inherit from the chain that started them
        // (daemon, monitor, runc): no ignored and no blocked signal.
        let done = cri::sh_config(
            &pod,
            "done",
            &busybox,
            "echo done; grep -E 'SigIgn|SigBlk' /proc/self/status; exit 4",
        );
        let id = cri::create(&mut rt, &pod, &done).await?;
        for c in ids.iter().chain([&id]) {
            holds_nothing(d, c)?;
            created(&mut rt, c).await?;
        }
        let listed = cri::list_containers(
            &mut rt,
            Some(pb::ContainerFilter {
                pod_sandbox_id: pod.id.clone(),
                state: Some(pb::ContainerStateValue {
                    state: pb::ContainerState::ContainerCreated as i32,
                }),
                ..Default::default()
            }),
        )
        .await?;
        ensure!(listed.len() == 4, "ListContainers CREATED: {listed:?}");

        let before = created(&mut rt, &id).await?;
        cri::start(&mut rt, &id).await?;
        let s = cri::wait_exited(&mut rt, &id, 10).await?;
        cri::check_exit(&s, 4, "Error")?;
        ensure!(
            before.created_at == s.created_at
                && s.created_at <= s.started_at
                && s.started_at <= s.finished_at,
            "timestamps: {s:?}"
        );
        let log = cri::read_log(&pod.log_of(&done))?;
        ensure!(
            cri::lines_of(&log, "stdout")
                == [
                    "done",
                    "SigBlk:\t0000000000000000",
                    "SigIgn:\t0000000000000000"
                ],
            "log of the started container: {log:?}"
        );

        for c in &ids[..2] {
            cri::remove(&mut rt, c).await?;
            let gone = rt
                .container_status(pb::ContainerStatusRequest {
                    container_id: c.clone(),
                    verbose: false,
                })
                .await;
            ensure!(
                gone.as_ref().err().map(|e| e.code()) == Some(tonic::Code::NotFound),
                "removed created container {c}: {gone:?}"
            );
        }
        // The last one goes with its pod.
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// ExecSync, Exec, Attach and ReopenContainerLog of a created container: FailedPrecondition
/// naming it and its state; ContainerStats: zeros; StopContainer: succeeds and leaves it
/// CREATED (containerd); it starts afterwards all the same.
fn refusals() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "refusals")).await?;
        let c = cri::sh_config(&pod, "main", &busybox, "echo started; exec sleep 1000");
        let id = cri::create(&mut rt, &pod, &c).await?;
        let words = [id.as_str(), "Created"];
        let precondition = tonic::Code::FailedPrecondition;
        cri::refused(
            "ExecSync",
            cri::exec(&mut rt, &id, &["true"], 5).await,
            precondition,
            &words,
        )?;
        let exec = rt
            .exec(pb::ExecRequest {
                container_id: id.clone(),
                cmd: vec!["true".into()],
                stdout: true,
                ..Default::default()
            })
            .await;
        cri::refused("Exec", exec, precondition, &words)?;
        let attach = rt
            .attach(pb::AttachRequest {
                container_id: id.clone(),
                stdout: true,
                ..Default::default()
            })
            .await;
        cri::refused("Attach", attach, precondition, &words)?;
        let reopen = rt
            .reopen_container_log(pb::ReopenContainerLogRequest {
                container_id: id.clone(),
            })
            .await;
        cri::refused("ReopenContainerLog", reopen, precondition, &words)?;

        let stats = rt
            .container_stats(pb::ContainerStatsRequest {
                container_id: id.clone(),
            })
            .await
            .context("ContainerStats of a created container")?
            .into_inner()
            .stats
            .context("no stats")?;
        let cpu = stats
            .cpu
            .and_then(|c| c.usage_core_nano_seconds)
            .map_or(0, |v| v.value);
        let memory = stats
            .memory
            .and_then(|m| m.working_set_bytes)
            .map_or(0, |v| v.value);
        ensure!(
            cpu == 0 && memory == 0,
            "created container stats: cpu {cpu} ns, working set {memory} B"
        );

        cri::stop(&mut rt, &id, 10).await?;
        created(&mut rt, &id).await?;
        holds_nothing(d, &id)?;

        cri::start(&mut rt, &id).await?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;
        let out = cri::exec(&mut rt, &id, &["echo", "hi"], 5)
            .await
            .context("ExecSync once started")?;
        ensure!(out.stdout == b"hi\n", "exec: {out:?}");
        cri::stop(&mut rt, &id, 0).await?;
        cri::check_exit(&cri::status(&mut rt, &id).await?, 137, "Error")?;
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// StopPodSandbox with a created container: the container stays CREATED and cannot start
/// (FailedPrecondition naming its pod: its namespaces are gone); RemovePodSandbox removes it.
fn stopped_pod() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "stopped")).await?;
        let c = cri::sh_config(&pod, "late", &busybox, "exit 0");
        let id = cri::create(&mut rt, &pod, &c).await?;
        rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
            pod_sandbox_id: pod.id.clone(),
        })
        .await
        .context("StopPodSandbox")?;
        created(&mut rt, &id).await?;
        let start = rt
            .start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await;
        cri::refused(
            "StartContainer in a stopped pod",
            start,
            tonic::Code::FailedPrecondition,
            &[&id, &pod.id],
        )?;
        holds_nothing(d, &id)?;
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// kill -9 of the daemon between CreateContainer and StartContainer: after the restart the
/// containers are still CREATED with nothing running, and start to their exit codes.
fn start_after_kill() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, ids) = async {
            let pod = cri::run_pod(&mut rt, cri::pod_config(d, "killed")).await?;
            let mut ids = Vec::new();
            for code in [5, 6] {
                let c =
                    cri::sh_config(&pod, &format!("c{code}"), &busybox, &format!("exit {code}"));
                ids.push(cri::create(&mut rt, &pod, &c).await?);
            }
            Ok::<_, anyhow::Error>((pod, ids))
        }
        .await?;
        let d = &mut s.daemon;
        d.kill9();
        d.restart()?;
        s.reconnect().await?;
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        async {
            for (id, code) in ids.iter().zip([5, 6]) {
                created(&mut rt, id)
                    .await
                    .context("after kill -9 and restart")?;
                holds_nothing(d, id)?;
                cri::start(&mut rt, id).await?;
                let s = cri::wait_exited(&mut rt, id, 10).await?;
                cri::check_exit(&s, code, "Error")?;
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }
        .await?;
        Ok(())
    })
}
