//! Pods with their own user namespace over CRI with real runc: the maps seen from inside, the
//! rootfs and ID-mapped volumes owned by the mapped root, host users in mode NODE, the requests
//! the runtime must refuse (naming the field, leaving nothing behind), and a daemon restart.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use tonic::Code;

use crate::support::cri::{
    self, ns_options, range, userns, userns_pod, Rt, USERNS_BASE as BASE, USERNS_LEN as LEN,
};
use crate::support::Scenario;
use crate::support::{trial, Need};

const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::UserNamespaces];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::userns::pod_namespace_maps_root_over_rootfs_and_idmapped_volumes",
            NEEDS,
            pod_namespace,
        ),
        trial(
            "cri::userns::node_mode_runs_with_the_host_users",
            NEEDS,
            node_mode,
        ),
        trial(
            "cri::userns::bad_requests_are_invalid_and_leave_nothing_behind",
            NEEDS,
            bad_requests,
        ),
        trial(
            "cri::userns::running_pod_survives_a_daemon_kill_and_is_removed_cleanly",
            NEEDS,
            restart,
        ),
    ]
}

/// Status's features for the default handler.
async fn handler_features(rt: &mut Rt) -> Result<pb::RuntimeHandlerFeatures> {
    let st = rt
        .status(pb::StatusRequest { verbose: false })
        .await
        .context("Status")?
        .into_inner();
    st.runtime_handlers
        .iter()
        .find(|h| h.name.is_empty())
        .and_then(|h| h.features)
        .context("Status has no features for the default handler")
}

fn pod_namespace() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        // A volume with a file of the host's root and one of host uid 1000.
        let vol = d.dir().join("vol");
        std::fs::create_dir(&vol)?;
        std::fs::write(vol.join("by-root"), "root\n")?;
        std::fs::write(vol.join("by-1000"), "1000\n")?;
        rustix::fs::chown(
            vol.join("by-1000"),
            Some(rustix::fs::Uid::from_raw(1000)),
            Some(rustix::fs::Gid::from_raw(1000)),
        )?;
        let mut rt = s.rt.clone();
        ensure!(
            handler_features(&mut rt).await?.user_namespaces,
            "Status does not report user namespaces, yet this host can do them"
        );
        let mut config = userns_pod(d, "userns");
        cri::share_pid(&mut config);
        ns_options(&mut config).userns_options =
            Some(userns(pb::NamespaceMode::Pod, vec![range(0, BASE, LEN)]));
        // (share_pid replaced the namespace options: the user namespace is set again.)
        let pod = cri::run_pod(&mut rt, config).await?;
        let st = cri::pod_status(&mut rt, &pod.id).await?;
        let reported = st
            .linux
            .and_then(|l| l.namespaces)
            .and_then(|n| n.options)
            .and_then(|o| o.userns_options);
        ensure!(
            reported == Some(userns(pb::NamespaceMode::Pod, vec![range(0, BASE, LEN)])),
            "PodSandboxStatus userns_options: {reported:?}"
        );

        let script = "cat /proc/self/uid_map /proc/self/gid_map; \
             stat -c '%n %u:%g' / /etc/passwd /vol /vol/by-root /vol/by-1000; \
             touch /rootfs-new /vol/from-inside && echo wrote; \
             mkdir -p /var/own && chown 4242:4343 /var/own && echo chowned; \
             echo pid1=$(cat /proc/1/cmdline | tr '\\0' ' '); echo done; exec sleep 600";
        let mut c = cri::sh_config(&pod, "inside", &busybox, script);
        c.mounts = vec![pb::Mount {
            container_path: "/vol".into(),
            host_path: vol.display().to_string(),
            uid_mappings: vec![range(0, BASE, LEN)],
            gid_mappings: vec![range(0, BASE, LEN)],
            ..Default::default()
        }];
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let log = cri::wait_log(&pod.log_of(&c), 20, |l| l.iter().any(|x| x == "done")).await?;
        let out = cri::lines_of(&log, "stdout");
        let words = |l: &String| l.split_whitespace().map(String::from).collect::<Vec<_>>();
        let want_map = vec!["0".to_string(), BASE.to_string(), LEN.to_string()];
        ensure!(
            out.len() > 2 && words(&out[0]) == want_map && words(&out[1]) == want_map,
            "uid_map/gid_map from inside: {out:?} (stderr {:?})",
            cri::lines_of(&log, "stderr")
        );
        for want in [
            "/ 0:0",
            "/etc/passwd 0:0",
            "/vol 0:0",
            "/vol/by-root 0:0",
            "/vol/by-1000 1000:1000",
            "wrote",
            "chowned",
        ] {
            ensure!(
                out.iter().any(|l| l == want),
                "{want:?} missing from {out:?} (stderr {:?})",
                cri::lines_of(&log, "stderr")
            );
        }
        ensure!(
            out.iter()
                .any(|l| l.starts_with("pid1=") && l.contains("pod-init")),
            "the pod's pid namespace (shared) has its init inside the user namespace: {out:?}"
        );
        // Writes through the ID-mapped volume land with the unmapped ids; the rootfs's
        // writable layer keeps the host ids of the container's users.
        let meta = std::fs::metadata(vol.join("from-inside"))?;
        ensure!(
            (meta.uid(), meta.gid()) == (0, 0),
            "volume file written by the container's root is {}:{} on the host",
            meta.uid(),
            meta.gid()
        );
        let upper = d.root().join("containers").join(&id).join("rw/upper");
        let new = std::fs::metadata(upper.join("rootfs-new"))?;
        let own = std::fs::metadata(upper.join("var/own"))?;
        ensure!(
            (new.uid(), own.uid(), own.gid()) == (BASE, BASE + 4242, BASE + 4343),
            "writable layer: rootfs-new {}, var/own {}:{}",
            new.uid(),
            own.uid(),
            own.gid()
        );
        // The image's layers are untouched.
        ensure!(
            no_file_owned_by(&d.root().join("snapshots"), BASE)?,
            "an image layer file became owned by the mapped root"
        );

        // An exec joins the same user namespace; ContainerStatus reports the inside ids.
        let r = cri::exec(&mut rt, &id, &["cat", "/proc/self/uid_map"], 10).await?;
        let exec_map: Vec<String> = String::from_utf8_lossy(&r.stdout)
            .split_whitespace()
            .map(String::from)
            .collect();
        ensure!(exec_map == want_map, "exec's uid_map: {exec_map:?}");
        let s = cri::status(&mut rt, &id).await?;
        let user = s.user.and_then(|u| u.linux);
        ensure!(
            user.as_ref().map(|u| (u.uid, u.gid)) == Some((0, 0)),
            "ContainerStatus.user: {user:?}"
        );
        // No staged mount outlives `runc run` (StartContainer).
        let staged = cri::mounts_under(&d.state().join("containers").join(&id).join("stage"));
        ensure!(
            staged.is_empty(),
            "staged mounts left on the host: {staged:?}"
        );

        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// Whether no file under `dir` is owned by `uid`.
fn no_file_owned_by(dir: &Path, uid: u32) -> Result<bool> {
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)? {
            let e = e?;
            let m = e.path().symlink_metadata()?;
            if m.uid() == uid {
                return Ok(false);
            }
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    Ok(true)
}

fn node_mode() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let mut config = cri::pod_config(d, "userns-node");
        ns_options(&mut config).userns_options = Some(userns(pb::NamespaceMode::Node, Vec::new()));
        let pod = cri::run_pod(&mut rt, config).await?;
        let c = cri::sh_config(&pod, "node", &busybox, "cat /proc/self/uid_map");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout");
        let host = std::fs::read_to_string("/proc/self/uid_map")?;
        let norm = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
        ensure!(
            out.iter().map(|l| norm(l)).collect::<Vec<_>>()
                == host.lines().map(norm).collect::<Vec<_>>(),
            "NODE mode sees {out:?}, the host {host:?}"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

async fn try_run(
    rt: &mut Rt,
    config: pb::PodSandboxConfig,
) -> std::result::Result<String, tonic::Status> {
    rt.run_pod_sandbox(pb::RunPodSandboxRequest {
        config: Some(config),
        runtime_handler: String::new(),
    })
    .await
    .map(|r| r.into_inner().pod_sandbox_id)
}

fn bad_requests() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        const FIELD: &str = "namespace_options.userns_options";
        let pods: [(&str, pb::UserNamespace, &[&str]); 5] = [
            (
                "two mappings",
                userns(
                    pb::NamespaceMode::Pod,
                    vec![range(0, 1000, 100_000), range(0, 2000, 100_000)],
                ),
                &[FIELD, "uids", "2 mappings"],
            ),
            (
                "container id 0 not mapped",
                userns(pb::NamespaceMode::Pod, vec![range(1, 1000, 100_000)]),
                &[FIELD, "uids[0]", "container id 0"],
            ),
            (
                "mode CONTAINER",
                userns(pb::NamespaceMode::Container, Vec::new()),
                &[FIELD, "CONTAINER"],
            ),
            (
                "mode TARGET",
                userns(pb::NamespaceMode::Target, Vec::new()),
                &[FIELD, "TARGET"],
            ),
            (
                "mode NODE with mappings",
                userns(pb::NamespaceMode::Node, vec![range(0, BASE, LEN)]),
                &[FIELD, "NODE"],
            ),
        ];
        for (what, u, words) in pods {
            let mut config = cri::pod_config(d, "userns-bad");
            ns_options(&mut config).userns_options = Some(u);
            cri::refused(
                what,
                try_run(&mut rt, config).await,
                Code::InvalidArgument,
                words,
            )?;
        }
        let mut config = userns_pod(d, "userns-hostnet");
        ns_options(&mut config).network = pb::NamespaceMode::Node as i32;
        cri::refused(
            "user namespace with the host network",
            try_run(&mut rt, config).await,
            Code::InvalidArgument,
            &[FIELD, "network"],
        )?;

        // Containers must share the pod's user namespace; mounts need both mappings.
        let pod = cri::run_pod(&mut rt, userns_pod(d, "userns-ctr")).await?;
        let base = cri::sh_config(&pod, "c", &busybox, "true");
        let with_userns = |u: pb::UserNamespace| {
            let mut c = base.clone();
            cri::security(&mut c)
                .namespace_options
                .get_or_insert_with(Default::default)
                .userns_options = Some(u);
            c
        };
        let cases = [
            (
                "other mappings than the pod's",
                with_userns(userns(
                    pb::NamespaceMode::Pod,
                    vec![range(0, BASE + LEN, LEN)],
                )),
                vec![FIELD, "differ from the pod's"],
            ),
            (
                "host users in a pod with its own",
                with_userns(userns(pb::NamespaceMode::Node, Vec::new())),
                vec![FIELD, "NODE"],
            ),
            (
                "a mount with uid mappings only",
                {
                    let mut c = base.clone();
                    c.mounts = vec![pb::Mount {
                        container_path: "/vol".into(),
                        host_path: d.dir().display().to_string(),
                        uid_mappings: vec![range(0, BASE, LEN)],
                        ..Default::default()
                    }];
                    c
                },
                vec!["mounts[0].gid_mappings"],
            ),
        ];
        for (what, c, words) in cases {
            cri::refused(
                what,
                cri::try_create(&mut rt, &pod, &c).await,
                Code::InvalidArgument,
                &words,
            )?;
        }
        // A failure after the rootfs is mounted and mounts are staged: sysfs cannot be
        // ID-mapped. Everything made for the request goes.
        let ok = d.dir().join("vol-ok");
        std::fs::create_dir_all(&ok)?;
        let mut c = base.clone();
        c.mounts = vec![
            pb::Mount {
                container_path: "/ok".into(),
                host_path: ok.display().to_string(),
                uid_mappings: vec![range(0, BASE, LEN)],
                gid_mappings: vec![range(0, BASE, LEN)],
                ..Default::default()
            },
            pb::Mount {
                container_path: "/sys-kernel".into(),
                host_path: "/sys/kernel".into(),
                uid_mappings: vec![range(0, BASE, LEN)],
                gid_mappings: vec![range(0, BASE, LEN)],
                ..Default::default()
            },
        ];
        cri::refused(
            "an ID-mapped mount of sysfs",
            cri::try_create(&mut rt, &pod, &c).await,
            Code::FailedPrecondition,
            &["/sys/kernel", "ID-mapped"],
        )?;
        let left = cri::list_containers(&mut rt, None).await?;
        ensure!(left.is_empty(), "refused containers are listed: {left:?}");
        let dirs = cri::entries(&d.state().join("containers"));
        ensure!(dirs.is_empty(), "refused containers left dirs: {dirs:?}");
        let mounts: Vec<_> = cri::mounts_under(&d.state().join("containers"));
        ensure!(
            mounts.is_empty(),
            "refused containers left mounts: {mounts:?}"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

fn restart() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = async {
            let pod = cri::run_pod(&mut rt, userns_pod(d, "userns-restart")).await?;
            let c = cri::sh_config(&pod, "c", &busybox, "exec sleep 600");
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            Ok::<_, anyhow::Error>((pod, id))
        }
        .await?;
        let d = &mut s.daemon;
        d.restart()?;
        s.reconnect().await?;
        let mut rt = s.rt.clone();
        async {
            cri::wait_state(&mut rt, &id, pb::ContainerState::ContainerRunning, 5).await?;
            let r = cri::exec(&mut rt, &id, &["cat", "/proc/self/uid_map"], 10).await?;
            let map = String::from_utf8_lossy(&r.stdout)
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            ensure!(
                map == format!("0 {BASE} {LEN}"),
                "exec after restart: {map:?}"
            );
            // A second container joins the pinned user namespace the new daemon found again.
            let c = cri::sh_config(&pod, "after", &busybox, "cat /proc/self/uid_map");
            let id2 = cri::create_start(&mut rt, &pod, &c).await?;
            cri::check_exit(&cri::wait_exited(&mut rt, &id2, 10).await?, 0, "Completed")?;
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }
        .await?;
        Ok(())
    })
}
