//! A failed RunPodSandbox or CreateContainer leaves nothing (issue 28 item 1): every step of
//! both made to fail (the `error` failpoint action), a CNI config naming a missing plugin, and
//! a DEL that fails after a partial ADD (handed to a background retry that survives a
//! restart). Each time: a clear code, nothing left (support::leaks), the name free, and the
//! same request works once the cause is gone.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, Rt};
use crate::support::{block_on, leaks, trial, wait_until, Daemon, Need};

/// Root, runc, the test images and the CNI plugins.
const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "faults::run_pod_sandbox_fails_cleanly_at_every_step",
            NEEDS,
            run_pod_every_step,
        ),
        trial(
            "faults::create_container_fails_cleanly_at_every_step",
            NEEDS,
            create_every_step,
        ),
        trial(
            "faults::a_missing_cni_plugin_fails_run_pod_sandbox_and_keeps_no_name",
            NEEDS,
            missing_plugin,
        ),
        trial(
            "faults::a_del_failing_after_a_partial_add_is_retried_in_the_background",
            NEEDS,
            deferred_del,
        ),
    ]
}

/// Every step of RunPodSandbox with a CNI config (bridge with `ipMasq`, then portmap: two
/// plugins, per-pod firewall rules), as `point=action` failpoint specs.
const RUN_POD_CNI: &[&str] = &[
    "sandbox.create.meta-written=error",
    "sandbox.run.recorded=error",
    "sandbox.run.namespaces=error",
    "cni.add.recorded=error",
    "cni.add.plugin-done=error",
    "cni.add.plugin-done=2@error",
    "cni.add.done=error",
    "sandbox.run.network=error",
    "sandbox.run.files=error",
    "sandbox.run.ready=error",
];

/// The embedded network's steps (lease, veth, addresses, hostPort elements).
const RUN_POD_EMBEDDED: &[&str] = &[
    "net.attach.leased=error",
    "net.attach.veth=error",
    "net.attach.configured=error",
    "net.attach.done=error",
    "sandbox.run.network=error",
    "sandbox.run.ready=error",
];

/// The 64-hex-digit ids `text` names.
fn ids_in(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_hexdigit())
        .filter(|w| w.len() == 64)
        .map(str::to_string)
        .collect()
}

/// Arms `spec` and restarts the daemon on it.
fn arm(d: &mut Daemon, spec: Option<&str>) -> Result<()> {
    d.set_failpoints(spec);
    d.restart()
}

/// Whether the daemon acted on failpoint `spec` (its point name) since `before` hits.
fn fired(d: &Daemon, spec: &str, before: usize) -> bool {
    let point = spec.split('=').next().unwrap_or(spec);
    d.failpoint_hits()
        .iter()
        .skip(before)
        .any(|h| h.starts_with(&format!("{point} ")))
}

/// The pods named as `config`'s.
async fn pods_named(rt: &mut Rt, config: &pb::PodSandboxConfig) -> Result<Vec<pb::PodSandbox>> {
    let name = config.metadata.as_ref().map(|m| m.name.clone());
    Ok(cri::list_pods(rt, None)
        .await?
        .into_iter()
        .filter(|p| p.metadata.as_ref().map(|m| m.name.clone()) == name)
        .collect())
}

/// The pod is READY with an address on the test network.
async fn check_ready(d: &Daemon, rt: &mut Rt, pod: &Pod) -> Result<()> {
    let st = cri::pod_status(rt, &pod.id).await?;
    let ip = st
        .network
        .as_ref()
        .map(|n| n.ip.clone())
        .unwrap_or_default();
    ensure!(
        st.state == pb::PodSandboxState::SandboxReady as i32 && d.net().contains(&ip),
        "pod {} after the retry: {st:?}",
        pod.id
    );
    Ok(())
}

/// RunPodSandbox fails at `spec` with Internal naming the point; nothing is left of it, its
/// name is free (the same config runs), and nothing is left once that pod is removed.
fn run_pod_fails_at(d: &mut Daemon, spec: &str, seen: &mut Vec<String>) -> Result<()> {
    arm(d, Some(spec))?;
    let before = d.failpoint_hits().len();
    let config = cri::pod_config(d, "undo-run");
    let err = block_on(async {
        let mut rt = cri::client(d).await?;
        let r = rt
            .run_pod_sandbox(pb::RunPodSandboxRequest {
                config: Some(config.clone()),
                runtime_handler: String::new(),
            })
            .await;
        Ok::<_, anyhow::Error>(r.err())
    })?
    .context("RunPodSandbox succeeded")?;
    let point = spec.split('=').next().unwrap_or(spec);
    ensure!(
        err.code() == tonic::Code::Internal
            && err
                .message()
                .contains(&format!("injected error at failpoint {point}")),
        "RunPodSandbox: {:?} {}",
        err.code(),
        err.message()
    );
    ensure!(fired(d, spec, before), "{spec} did not fire");
    seen.extend(ids_in(err.message()));
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let left = cri::list_pods(&mut rt, None).await?;
            ensure!(left.is_empty(), "pods after the failure: {left:?}");
            Ok(())
        }),
    )?;
    leaks::assert_none(d, seen).context("after the failed RunPodSandbox")?;
    // The same request again (the point fires only once): the name is free.
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let pod = cri::run_pod(&mut rt, config.clone()).await?;
            seen.push(pod.id.clone());
            check_ready(d, &mut rt, &pod).await?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(d, seen).context("after the retry's removal")
}

fn run_pod_every_step() -> Result<()> {
    let mut failures = Vec::new();
    for (net, specs) in [(true, RUN_POD_CNI), (false, RUN_POD_EMBEDDED)] {
        let mut d = if net {
            let d = cri::daemon_with("[network]\nmasquerade = true\n")?;
            d.net().write_conflist_with(true)?;
            d
        } else {
            cri::daemon()?
        };
        let mut seen = Vec::new();
        for spec in specs {
            let t = std::time::Instant::now();
            match run_pod_fails_at(&mut d, spec, &mut seen) {
                Ok(()) => eprintln!("{spec}: clean in {:.1} s", t.elapsed().as_secs_f64()),
                Err(e) => {
                    eprintln!("{spec}: FAILED: {e:#}");
                    failures.push(format!("{spec}: {e:#}"));
                    // The next step starts from a clean daemon.
                    block_on(async {
                        if let Ok(mut rt) = cri::client(&d).await {
                            for p in cri::list_pods(&mut rt, None).await.unwrap_or_default() {
                                let _ = cri::remove_pod(&mut rt, &p.id).await;
                            }
                        }
                    });
                }
            }
        }
        arm(&mut d, None)?;
    }
    ensure!(
        failures.is_empty(),
        "{} step(s) left something:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// Every step of CreateContainer.
const CREATE_POINTS: &[&str] = &[
    "container.create.leased=error",
    "container.create.meta-written=error",
    "container.create.recorded=error",
    "container.create.rootfs=error",
    "container.create.done=error",
];

/// What any container of daemon `d` left: its dirs (state, root, trash), runc state, image
/// leases, monitors and mounts below the containers' dirs.
fn container_leftovers(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [
        d.state().join("containers"),
        d.root().join("containers"),
        d.state().join("trash"),
        d.root().join("trash"),
        d.root().join("leases"),
    ] {
        for e in cri::entries(&dir) {
            out.push(format!("{}", dir.join(e).display()));
        }
    }
    out.extend(
        cri::runc_containers(&d.state())
            .into_iter()
            .map(|c| format!("runc container {c}")),
    );
    for (mp, fs) in cri::mounts_under(&d.state().join("containers")) {
        out.push(format!("mount {} ({fs})", mp.display()));
    }
    out.extend(
        cri::processes_mentioning(&d.state().display().to_string())
            .into_iter()
            .filter(|p| cri::cmdline(*p).iter().any(|a| a == "monitor"))
            .map(|p| format!("monitor {p}: {:?}", cri::cmdline(p))),
    );
    out
}

fn create_every_step() -> Result<()> {
    let mut d = cri::daemon()?;
    let image = cri::import(&d, "busybox")?;
    let pod = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::run_pod(&mut rt, cri::pod_config(&d, "undo-create")).await
        }),
    )?;
    let mut failures = Vec::new();
    for (i, spec) in CREATE_POINTS.iter().enumerate() {
        arm(&mut d, Some(spec))?;
        let before = d.failpoint_hits().len();
        let config = cri::sh_config(&pod, &format!("c{i}"), &image, "echo made; exit 7");
        let r = cri::with_log(
            &d,
            block_on(async {
                let mut rt = cri::client(&d).await?;
                let req = pb::CreateContainerRequest {
                    pod_sandbox_id: pod.id.clone(),
                    config: Some(config.clone()),
                    sandbox_config: Some(pod.config.clone()),
                };
                let err = rt
                    .create_container(req)
                    .await
                    .err()
                    .context("CreateContainer succeeded")?;
                let point = spec.split('=').next().unwrap_or(spec);
                ensure!(
                    err.code() == tonic::Code::Internal
                        && err
                            .message()
                            .contains(&format!("injected error at failpoint {point}")),
                    "CreateContainer: {:?} {}",
                    err.code(),
                    err.message()
                );
                ensure!(fired(&d, spec, before), "{spec} did not fire");
                let listed = cri::list_containers(&mut rt, None).await?;
                ensure!(
                    listed.is_empty(),
                    "containers after the failure: {listed:?}"
                );
                wait_until(10, || container_leftovers(&d).is_empty());
                let left = container_leftovers(&d);
                ensure!(left.is_empty(), "left behind:\n  {}", left.join("\n  "));
                // The same request again: the name is free and the container runs.
                let id = cri::create_start(&mut rt, &pod, &config).await?;
                let s = cri::wait_exited(&mut rt, &id, 20).await?;
                cri::check_exit(&s, 7, "Error")?;
                cri::remove(&mut rt, &id).await
            }),
        );
        match r {
            Ok(()) => eprintln!("{spec}: clean"),
            Err(e) => {
                eprintln!("{spec}: FAILED: {e:#}");
                failures.push(format!("{spec}: {e:#}"));
                block_on(async {
                    if let Ok(mut rt) = cri::client(&d).await {
                        for c in cri::list_containers(&mut rt, None)
                            .await
                            .unwrap_or_default()
                        {
                            let _ = cri::remove(&mut rt, &c.id).await;
                        }
                    }
                });
            }
        }
    }
    arm(&mut d, None)?;
    let mut seen = vec![pod.id.clone()];
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(&d, &seen)?;
    seen.clear();
    ensure!(
        failures.is_empty(),
        "{} step(s) left something:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// The case: a CNI config naming a plugin that does not exist. RunPodSandbox fails
/// with FailedPrecondition naming it, twice (never AlreadyExists: no pod keeps the name), no
/// pod is listed, nothing is left; with the config fixed the same request works.
fn missing_plugin() -> Result<()> {
    let d = cri::daemon()?;
    let conf = d.net().conf_dir.join("10-broken.conflist");
    std::fs::write(
        &conf,
        serde_json::json!({
            "cniVersion": "1.0.0",
            "name": d.net().name,
            "plugins": [{"type": "bosun-no-such-plugin"}],
        })
        .to_string(),
    )?;
    let config = cri::pod_config(&d, "undo-missing");
    let mut seen = Vec::new();
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            for attempt in 0..2 {
                let err = rt
                    .run_pod_sandbox(pb::RunPodSandboxRequest {
                        config: Some(config.clone()),
                        runtime_handler: String::new(),
                    })
                    .await
                    .err()
                    .context("RunPodSandbox succeeded")?;
                ensure!(
                    err.code() == tonic::Code::FailedPrecondition
                        && err.message().contains("bosun-no-such-plugin"),
                    "attempt {attempt}: {:?} {}",
                    err.code(),
                    err.message()
                );
                seen.extend(ids_in(err.message()));
                let left = pods_named(&mut rt, &config).await?;
                ensure!(left.is_empty(), "attempt {attempt}: left {left:?}");
            }
            Ok(())
        }),
    )?;
    leaks::assert_none(&d, &seen)?;
    std::fs::remove_file(&conf)?;
    d.net().write_conflist()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, config.clone()).await?;
            seen.push(pod.id.clone());
            check_ready(&d, &mut rt, &pod).await?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(&d, &seen)
}

/// portmap's ADD (the second plugin) fails after it ran, and its DEL fails too (a wrapper
/// refuses DEL while a flag file exists): RunPodSandbox fails, no pod holds the name (the same
/// request runs at once), and the DEL is left to a background retry with the netns pinned for
/// it. The daemon is killed while the DEL still fails; the next one resumes it, which succeeds
/// once the flag is gone: the first sandbox's address, rules and pin go, and nothing is left
/// once the second pod is removed.
fn deferred_del() -> Result<()> {
    let mut d = cri::daemon_with("[network]\nmasquerade = true\n")?;
    d.net().write_conflist_with(true)?;
    let flag = d.dir().join("refuse-del");
    d.net().wrap(
        "portmap",
        &format!(
            "if [ \"$CNI_COMMAND\" = DEL ] && [ -e {} ]; then\n  echo '{{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"DEL refused by the test\"}}'\n  exit 1\nfi\nexec {}/portmap",
            flag.display(),
            crate::support::network::DEBIAN_PLUGINS
        ),
    )?;
    std::fs::write(&flag, b"")?;
    arm(&mut d, Some("cni.add.plugin-done=2@error"))?;
    let config = cri::pod_config(&d, "undo-del");
    let mut seen = Vec::new();
    let first = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let err = rt
                .run_pod_sandbox(pb::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await
                .err()
                .context("RunPodSandbox succeeded")?;
            ensure!(err.code() == tonic::Code::Internal, "{err:?}");
            let id = ids_in(err.message())
                .into_iter()
                .next()
                .context("no sandbox id in the error")?;
            seen.push(id.clone());
            let left = cri::list_pods(&mut rt, None).await?;
            ensure!(left.is_empty(), "pods after the failure: {left:?}");
            // The name is free: the same request runs now (its ADD passes the failpoint).
            let pod = cri::run_pod(&mut rt, config.clone()).await?;
            seen.push(pod.id.clone());
            check_ready(&d, &mut rt, &pod).await?;
            Ok((id, pod))
        }),
    )?;
    let (failed, pod) = first;
    let pin = d.root().join("network").join(format!("{failed}.netns"));
    let record = d.root().join("network").join(format!("{failed}.json"));
    ensure!(
        cri::mounts_under(&d.root().join("network"))
            .iter()
            .any(|(mp, fs)| *mp == pin && fs == "nsfs"),
        "the failed sandbox's netns is not pinned for its DEL; log:\n{}",
        d.log()
    );
    let text = std::fs::read_to_string(&record).context("its CNI record")?;
    ensure!(text.contains("\"deferred\""), "record: {text}");
    // Killed while the DEL keeps failing; the next daemon resumes it.
    d.kill9();
    arm(&mut d, None)?;
    ensure!(
        wait_until(20, || d.log().contains("resuming a pod network teardown")),
        "the restarted daemon did not resume the DEL; log:\n{}",
        d.log()
    );
    ensure!(
        record.exists() && pin.exists(),
        "done while DEL is refused?"
    );
    std::fs::remove_file(&flag)?;
    ensure!(
        wait_until(45, || !record.exists() && !pin.exists()),
        "the deferred DEL did not finish; log:\n{}",
        d.log()
    );
    ensure!(
        d.net().count("DEL", &failed, "bridge") >= 1,
        "bridge never got the DEL: {:?}",
        d.net().calls()
    );
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(&d, &seen)
}
