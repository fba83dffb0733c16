//! Features Status reports, each exercised over CRI with real runc: recursive read-only mounts
//! (runc's `rro`, and staged on the host for a runtime without it) and supplemental groups
//! policies (Merge, Strict) with ContainerStatus.user as the process runs.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod, Rt, NEEDS};
use crate::support::Scenario;
use crate::support::{block_on, runc_bin, trial, Daemon, TmpfsBelow};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::features::recursive_read_only_submount_stays_read_only",
            NEEDS,
            rro_by_runc,
        ),
        trial(
            "cri::features::recursive_read_only_is_staged_for_a_runtime_without_rro",
            NEEDS,
            rro_staged,
        ),
        trial(
            "cri::features::supplemental_groups_policy_merge_and_strict",
            NEEDS,
            groups,
        ),
    ]
}

fn mount(vol: &Path, at: &str, rro: bool) -> pb::Mount {
    pb::Mount {
        container_path: at.into(),
        host_path: vol.display().to_string(),
        readonly: true,
        recursive_read_only: rro,
        ..Default::default()
    }
}

/// Runs `script` in a container with `mounts` to completion; returns stdout and stderr lines.
async fn run(
    rt: &mut Rt,
    pod: &Pod,
    name: &str,
    image: &str,
    script: &str,
    mounts: Vec<pb::Mount>,
) -> Result<(String, Vec<String>, Vec<String>)> {
    let mut c = cri::sh_config(pod, name, image, script);
    c.mounts = mounts;
    let id = cri::create_start(rt, pod, &c).await?;
    let s = cri::wait_exited(rt, &id, 10).await?;
    let log = cri::read_log(&pod.log_of(&c))?;
    let (out, err) = (cri::lines_of(&log, "stdout"), cri::lines_of(&log, "stderr"));
    cri::check_exit(&s, 0, "Completed").with_context(|| format!("{name}: {out:?} {err:?}"))?;
    Ok((id, out, err))
}

/// The whole recursive read-only check against daemon `d`; returns the container ids.
fn check_rro(d: &Daemon) -> Result<Vec<String>> {
    let busybox = cri::import(d, "busybox")?;
    let vol = TmpfsBelow::new(&d.dir().join("rro-volume"))?;
    block_on(async {
        let mut rt = cri::client(d).await?;
        let st = rt
            .status(pb::StatusRequest { verbose: false })
            .await?
            .into_inner();
        let features = st.runtime_handlers.iter().find(|h| h.name.is_empty());
        ensure!(
            features
                .and_then(|h| h.features)
                .is_some_and(|f| f.recursive_read_only_mounts),
            "Status does not report recursive read-only mounts: {features:?}"
        );
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "rro")).await?;
        // Read-only, recursively: the tmpfs below refuses writes too, and stays so.
        let script = "touch /r/f 2>&1; touch /r/tmpfs/f 2>&1; \
                      grep ' /r/tmpfs ' /proc/self/mountinfo | cut -d' ' -f6";
        let (rro_id, out, _) = run(
            &mut rt,
            &pod,
            "recursive",
            &busybox,
            script,
            vec![mount(&vol.dir, "/r", true)],
        )
        .await?;
        ensure!(
            out.len() == 3
                && out[0].contains("Read-only file system")
                && out[1].contains("Read-only file system")
                && out[2].split(',').next() == Some("ro"),
            "recursive read-only mount: {out:?}"
        );
        let s = cri::status(&mut rt, &rro_id).await?;
        ensure!(
            s.mounts
                .iter()
                .any(|m| m.container_path == "/r" && m.recursive_read_only),
            "ContainerStatus.mounts: {:?}",
            s.mounts
        );
        // Only the top is read-only without it (what the kubelet asks for by default).
        let (ro_id, out, _) = run(
            &mut rt,
            &pod,
            "plain",
            &busybox,
            "touch /r/f 2>&1; touch /r/tmpfs/f && echo tmpfs-writable",
            vec![mount(&vol.dir, "/r", false)],
        )
        .await?;
        ensure!(
            out.len() == 2
                && out[0].contains("Read-only file system")
                && out[1] == "tmpfs-writable",
            "plain read-only mount: {out:?}"
        );
        ensure!(
            vol.dir.join("tmpfs/f").exists(),
            "the host's tmpfs did not get the file"
        );
        // The invalid combinations critest checks are InvalidArgument, naming the field.
        for (what, m, word) in [
            (
                "not read-only",
                pb::Mount {
                    readonly: false,
                    ..mount(&vol.dir, "/r", true)
                },
                "readonly",
            ),
            (
                "host-to-container propagation",
                pb::Mount {
                    propagation: pb::MountPropagation::PropagationHostToContainer as i32,
                    ..mount(&vol.dir, "/r", true)
                },
                "propagation",
            ),
            (
                "bidirectional propagation",
                pb::Mount {
                    propagation: pb::MountPropagation::PropagationBidirectional as i32,
                    ..mount(&vol.dir, "/r", true)
                },
                "propagation",
            ),
        ] {
            let mut c = cri::sh_config(&pod, "bad", &busybox, "true");
            c.mounts = vec![m];
            cri::refused(
                what,
                cri::try_create(&mut rt, &pod, &c).await,
                tonic::Code::InvalidArgument,
                &["mounts[0]", "recursive_read_only", word],
            )?;
        }
        let listed = cri::list_containers(&mut rt, None).await?;
        ensure!(
            listed.len() == 2,
            "refused creations are listed: {listed:?}"
        );
        let ids = vec![rro_id, ro_id];
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(ids)
    })
}

fn rro_by_runc() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(&d, check_rro(&d))?;
    cri::assert_clean(&d)
}

fn rro_staged() -> Result<()> {
    // runc behind a wrapper whose `features` lists no `rro`: bosun stages the mount itself.
    let runc = runc_bin().context("no runc")?;
    let scratch = crate::support::scratch()?;
    let wrapper = scratch.path().join("runc-without-rro");
    std::fs::write(
        &wrapper,
        format!(
            "#!/bin/sh\nif [ \"$1\" = features ]; then\n  echo '{{\"mountOptions\":[\"rbind\",\"ro\"]}}'\n  exit 0\nfi\nexec {} \"$@\"\n",
            runc.display()
        ),
    )?;
    std::fs::set_permissions(
        &wrapper,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;
    let d = Daemon::start(&format!("runtime = {:?}\n", wrapper.display().to_string()))?;
    cri::with_log(&d, staged_checks(&d))?;
    cri::assert_clean(&d)
}

fn staged_checks(d: &Daemon) -> Result<()> {
    let log_before = d.log();
    ensure!(
        log_before.contains("runtime_rro=false"),
        "the daemon did not see the wrapper's features"
    );
    let ids = check_rro(d)?;
    ensure!(ids.len() == 2);
    let log = d.log();
    ensure!(
        log.contains("mounts staged on the host"),
        "the recursive read-only mount was not staged"
    );
    Ok(())
}

fn groups() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let st = rt
            .status(pb::StatusRequest { verbose: false })
            .await?
            .into_inner();
        ensure!(
            st.features.is_some_and(|f| f.supplemental_groups_policy),
            "Status does not report supplemental groups policies"
        );
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "groups")).await?;
        // The image's app (1000) is a member of audio (29) in its /etc/group.
        for (name, policy, want) in [
            (
                "merge",
                pb::SupplementalGroupsPolicy::Merge,
                vec![1000, 29, 1234],
            ),
            (
                "strict",
                pb::SupplementalGroupsPolicy::Strict,
                vec![1000, 1234],
            ),
        ] {
            let mut c = cri::sh_config(&pod, name, &busybox, "id -G; exec sleep 600");
            let sc = cri::security(&mut c);
            sc.run_as_user = Some(pb::Int64Value { value: 1000 });
            sc.supplemental_groups = vec![1234];
            sc.supplemental_groups_policy = policy as i32;
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let log = cri::wait_log(&pod.log_of(&c), 10, |l| !l.is_empty()).await?;
            let first = cri::lines_of(&log, "stdout");
            let parse = |s: &str| -> Vec<i64> {
                s.split_whitespace()
                    .filter_map(|g| g.parse().ok())
                    .collect()
            };
            let mut sorted = want.clone();
            sorted.sort_unstable();
            let mut seen = parse(&first[0]);
            seen.sort_unstable();
            ensure!(
                seen == sorted,
                "{name}: first process `id -G`: {first:?}, want {want:?}"
            );
            let r = cri::exec(&mut rt, &id, &["id", "-G"], 10).await?;
            let mut exec = parse(&String::from_utf8_lossy(&r.stdout));
            exec.sort_unstable();
            ensure!(
                exec == sorted,
                "{name}: exec'd `id -G`: {exec:?}, want {sorted:?}"
            );
            let s = cri::status(&mut rt, &id).await?;
            let user = s
                .user
                .and_then(|u| u.linux)
                .context("no ContainerStatus.user")?;
            let mut reported = user.supplemental_groups.clone();
            reported.sort_unstable();
            ensure!(
                (user.uid, user.gid, reported.clone()) == (1000, 1000, sorted.clone()),
                "{name}: ContainerStatus.user {user:?}, the process runs with {sorted:?}"
            );
        }
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
