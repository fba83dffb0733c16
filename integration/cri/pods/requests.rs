//! RunPodSandbox at most once for concurrent identical requests, and bad RunPodSandbox and
//! CreateContainer requests refused with their gRPC code, leaving nothing behind.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, NEEDS};
use crate::support::Scenario;
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::pods::concurrent_run_pod_sandbox_runs_once",
            NEEDS,
            at_most_once,
        ),
        trial(
            "cri::pods::bad_requests_are_refused_and_leave_nothing",
            NEEDS,
            bad_requests,
        ),
    ]
}

fn at_most_once() -> Result<()> {
    const N: usize = 8;
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let cfg = cri::pod_config(&d, "once");
            let mut tasks = Vec::new();
            for _ in 0..N {
                // Each on its own connection, as separate kubelet retries would be.
                let mut c = cri::client(&d).await?;
                let cfg = cfg.clone();
                tasks.push(tokio::spawn(async move {
                    c.run_pod_sandbox(pb::RunPodSandboxRequest {
                        config: Some(cfg),
                        runtime_handler: String::new(),
                    })
                    .await
                    .map(|r| r.into_inner().pod_sandbox_id)
                }));
            }
            let mut oks = Vec::new();
            let mut errs = Vec::new();
            for t in tasks {
                match t.await? {
                    Ok(id) => oks.push(id),
                    Err(e) => errs.push(e),
                }
            }
            ensure!(
                oks.len() == 1,
                "{} of {N} concurrent RunPodSandbox succeeded: {oks:?}; errors {errs:?}",
                oks.len()
            );
            let id = oks[0].clone();
            for e in &errs {
                ensure!(
                    e.code() == tonic::Code::AlreadyExists && e.message().contains(&id),
                    "a duplicate must be AlreadyExists naming {id}: {e:?}"
                );
            }
            eprintln!("duplicate refused with: {}", errs[0].message());
            let mut rt = cri::client(&d).await?;
            let listed = cri::list_pods(&mut rt, None).await?;
            ensure!(
                listed.len() == 1 && listed[0].id == id,
                "listed: {listed:?}"
            );
            // A retry after the first completed is refused the same way.
            let again = cri::run_pod(&mut rt, cfg.clone())
                .await
                .err()
                .context("a retry created a second sandbox")?;
            cri::code_is(&again, tonic::Code::AlreadyExists)?;
            ensure!(
                cri::status_of(&again).is_some_and(|s| s.message().contains(&id)),
                "{again:#}"
            );
            // Another attempt is another sandbox.
            let mut next = cfg.clone();
            if let Some(m) = next.metadata.as_mut() {
                m.attempt = 1;
            }
            let second = cri::run_pod(&mut rt, next).await?;
            ensure!(second.id != id);
            ensure!(cri::list_pods(&mut rt, None).await?.len() == 2);
            cri::remove_pod(&mut rt, &id).await?;
            cri::remove_pod(&mut rt, &second.id).await?;
            // Removed: the name is free again.
            let third = cri::run_pod(&mut rt, cfg).await?;
            ensure!(third.id != id, "a removed sandbox's id came back");
            cri::remove_pod(&mut rt, &third.id).await?;
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn bad_requests() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let nothing_left = |what: &str| -> Result<()> {
            let mut left: Vec<String> = Vec::new();
            for dir in [d.root().join("containers"), d.state().join("containers")] {
                left.extend(
                    cri::entries(&dir)
                        .into_iter()
                        .map(|e| dir.join(e).display().to_string()),
                );
            }
            left.extend(
                cri::mounts_under(&d.state().join("containers"))
                    .into_iter()
                    .map(|(m, fs)| format!("mount {} ({fs})", m.display())),
            );
            left.extend(cri::runc_containers(&d.state()));
            left.extend(
                cri::cgroups_below(&d.cgroup_parent())
                    .into_iter()
                    .map(|p| p.display().to_string()),
            );
            ensure!(left.is_empty(), "after {what}: left behind {left:?}");
            Ok(())
        };
        let mut rt = s.rt.clone();

        // Sandboxes.
        let run = |config: Option<pb::PodSandboxConfig>, handler: &str| pb::RunPodSandboxRequest {
            config,
            runtime_handler: handler.into(),
        };
        let good = cri::pod_config(d, "bad-requests");
        let mut no_meta = good.clone();
        no_meta.metadata = None;
        let mut no_name = good.clone();
        if let Some(m) = no_name.metadata.as_mut() {
            m.name.clear();
        }
        let cases = [
            (
                "no config",
                run(None, ""),
                tonic::Code::InvalidArgument,
                "config",
            ),
            (
                "no metadata",
                run(Some(no_meta), ""),
                tonic::Code::InvalidArgument,
                "metadata",
            ),
            (
                "empty name",
                run(Some(no_name), ""),
                tonic::Code::InvalidArgument,
                "name",
            ),
            (
                "unknown runtime handler",
                run(Some(good.clone()), "no-such-handler"),
                tonic::Code::InvalidArgument,
                "no-such-handler",
            ),
        ];
        for (what, req, code, names) in cases {
            let err = rt
                .run_pod_sandbox(req)
                .await
                .err()
                .with_context(|| format!("RunPodSandbox with {what} succeeded"))?;
            ensure!(
                err.code() == code && err.message().contains(names),
                "RunPodSandbox with {what}: want {code:?} naming {names:?}, got {err:?}"
            );
            ensure!(
                cri::list_pods(&mut rt, None).await?.is_empty(),
                "a sandbox after {what}"
            );
            ensure!(
                cri::entries(&d.state().join("sandboxes")).is_empty()
                    && cri::entries(&d.root().join("sandboxes")).is_empty()
                    && cri::mounts_under(&d.state()).is_empty(),
                "sandbox leftovers after {what}"
            );
        }

        // Containers. Every bad request uses the name of the good one made last: a leaked
        // name reservation would refuse it.
        let pod = cri::run_pod(&mut rt, good).await?;
        let base = cri::sh_config(&pod, "c", &busybox, "exit 0");
        let mut no_meta = base.clone();
        no_meta.metadata = None;
        let mut bad_cap = base.clone();
        cri::security(&mut bad_cap).capabilities = Some(pb::Capability {
            add_capabilities: vec!["CAP_BOGUS_POWER".into()],
            ..Default::default()
        });
        let mut rel_mount = base.clone();
        rel_mount.mounts = vec![pb::Mount {
            container_path: "relative/dir".into(),
            host_path: d.dir().display().to_string(),
            readonly: true,
            ..Default::default()
        }];
        let mut no_image = base.clone();
        no_image.image = Some(pb::ImageSpec {
            image: "bosun.test/no-such-image:latest".into(),
            ..Default::default()
        });
        let unknown_pod = Pod {
            id: "0123456789abcdef0123456789abcdef".into(),
            config: pod.config.clone(),
        };
        let cases = [
            (
                "an unknown sandbox",
                &unknown_pod,
                base.clone(),
                tonic::Code::NotFound,
                "0123456789abcdef",
            ),
            (
                "no metadata",
                &pod,
                no_meta,
                tonic::Code::InvalidArgument,
                "metadata",
            ),
            (
                "a bad capability",
                &pod,
                bad_cap,
                tonic::Code::InvalidArgument,
                "BOGUS_POWER",
            ),
            (
                "a relative mount path",
                &pod,
                rel_mount,
                tonic::Code::InvalidArgument,
                "relative/dir",
            ),
            (
                "an unknown image",
                &pod,
                no_image,
                tonic::Code::NotFound,
                "bosun.test/no-such-image",
            ),
        ];
        for (what, p, cfg, code, names) in cases {
            let err = cri::create(&mut rt, p, &cfg)
                .await
                .err()
                .with_context(|| format!("CreateContainer with {what} succeeded"))?;
            let st = cri::status_of(&err).with_context(|| format!("{what}: {err:#}"))?;
            ensure!(
                st.code() == code && st.message().contains(names),
                "CreateContainer with {what}: want {code:?} naming {names:?}, got {:?}: {}",
                st.code(),
                st.message()
            );
            eprintln!(
                "CreateContainer with {what}: {:?}: {}",
                st.code(),
                st.message()
            );
            let listed = cri::list_containers(&mut rt, None).await?;
            ensure!(listed.is_empty(), "after {what}: {listed:?}");
            nothing_left(what)?;
        }
        let id = cri::create_start(&mut rt, &pod, &base)
            .await
            .context("the good container after the bad ones")?;
        let s = cri::wait_exited(&mut rt, &id, 10).await?;
        cri::check_exit(&s, 0, "Completed")?;
        // The same name (and attempt) in the same pod again: refused, naming the holder.
        let err = cri::create(&mut rt, &pod, &base)
            .await
            .err()
            .context("a second container with the same name and attempt was created")?;
        let st = cri::status_of(&err).with_context(|| format!("{err:#}"))?;
        ensure!(
            st.code() == tonic::Code::AlreadyExists && st.message().contains(&id),
            "duplicate container name: want AlreadyExists naming {id}, got {:?}: {}",
            st.code(),
            st.message()
        );
        ensure!(cri::list_containers(&mut rt, None).await?.len() == 1);
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
