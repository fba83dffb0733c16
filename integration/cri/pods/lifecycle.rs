//! A pod sandbox's whole life over CRI with real runc: status and list fields, the pod files
//! (hostname, resolv.conf, hosts, /dev/shm), namespaces shared by its containers, stop and
//! remove (both idempotent) leaving nothing behind.

use std::collections::HashMap;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, map, Pod, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::pods::lifecycle_pod_files_and_shared_namespaces",
        NEEDS,
        lifecycle,
    )]
}

/// What a container of the lifecycle pod prints about itself, then it waits.
const INSPECT: &str = "echo hostname=$(cat /etc/hostname); echo uname=$(hostname); \
    echo net=$(readlink /proc/self/ns/net); echo ipc=$(readlink /proc/self/ns/ipc); \
    echo uts=$(readlink /proc/self/ns/uts); echo links=$(ls /sys/class/net); \
    echo loflags=$(cat /sys/class/net/lo/flags); echo lo=$(ip -o link show lo); \
    echo shm=$(grep ' /dev/shm ' /proc/mounts); \
    while read -r l; do echo \"resolv=$l\"; done < /etc/resolv.conf; \
    while read -r l; do echo \"hosts=$l\"; done < /etc/hosts; ";

fn lifecycle() -> Result<()> {
    Scenario::new()
        .config("shm_size = 8388608\n")
        .run(async |s| {
            let d = &s.daemon;
            let busybox = s.image("busybox");
            let mut rt = s.rt.clone();
            let mut cfg = cri::pod_config(d, "lifecycle");
            cfg.hostname = "lifecycle-host".into();
            cfg.labels = map(&[("app", "lifecycle"), ("bosun.test/label", "yes")]);
            cfg.annotations = map(&[
                ("bosun.test/annotation", "a value, with spaces"),
                ("io.kubernetes.pod.terminationGracePeriod", "30"),
            ]);
            cfg.dns_config = Some(pb::DnsConfig {
                servers: vec!["10.96.0.10".into(), "10.96.0.11".into()],
                searches: vec!["ns.svc.cluster.local".into(), "svc.cluster.local".into()],
                options: vec!["ndots:5".into(), "edns0".into()],
            });
            let t0 = cri::now_ns();
            let id = rt
                .run_pod_sandbox(pb::RunPodSandboxRequest {
                    config: Some(cfg.clone()),
                    runtime_handler: "runc".into(),
                })
                .await
                .context("RunPodSandbox")?
                .into_inner()
                .pod_sandbox_id;
            let pod = Pod {
                id: id.clone(),
                config: cfg.clone(),
            };
            let st = cri::pod_status(&mut rt, &id).await?;
            ensure!(st.id == id, "status id {} for {id}", st.id);
            ensure!(
                st.state == pb::PodSandboxState::SandboxReady as i32,
                "not READY: {st:?}"
            );
            ensure!(st.metadata == cfg.metadata, "metadata {:?}", st.metadata);
            ensure!(st.labels == cfg.labels, "labels {:?}", st.labels);
            ensure!(
                st.annotations == cfg.annotations,
                "annotations {:?}",
                st.annotations
            );
            ensure!(
                st.runtime_handler == "runc",
                "runtime handler {:?}",
                st.runtime_handler
            );
            ensure!(
                st.created_at >= t0 && st.created_at <= cri::now_ns(),
                "created_at {} not in [{t0}, now]",
                st.created_at
            );
            let ns = st
                .linux
                .as_ref()
                .and_then(|l| l.namespaces.as_ref())
                .and_then(|n| n.options.as_ref());
            ensure!(
                ns.map(|o| (o.network, o.pid, o.ipc))
                    == Some((
                        pb::NamespaceMode::Pod as i32,
                        pb::NamespaceMode::Container as i32,
                        pb::NamespaceMode::Pod as i32
                    )),
                "namespace options in the status: {ns:?}"
            );
            let pins = cri::mounts_under(&d.state().join("sandboxes").join(&id));
            ensure!(
                ["net", "ipc", "uts"]
                    .iter()
                    .all(|n| pins.iter().any(|(m, fs)| m.ends_with(n) && fs == "nsfs")),
                "namespaces not pinned: {pins:?}"
            );
            let listed = cri::list_pods(&mut rt, None).await?;
            ensure!(
                listed.len() == 1
                    && listed[0].id == id
                    && listed[0].labels == cfg.labels
                    && listed[0].annotations == cfg.annotations
                    && listed[0].metadata == cfg.metadata
                    && listed[0].runtime_handler == "runc"
                    && listed[0].created_at == st.created_at,
                "list: {listed:?}"
            );

            // Two containers: pod files, loopback, one netns/ipc/uts, one /dev/shm.
            let a_cfg = cri::sh_config(
                &pod,
                "a",
                &busybox,
                &format!("{INSPECT} echo from-a > /dev/shm/marker; echo ready; exec sleep 1000"),
            );
            let a = cri::create_start(&mut rt, &pod, &a_cfg).await?;
            let log_a =
                cri::wait_log(&pod.log_of(&a_cfg), 10, |l| l.iter().any(|x| x == "ready")).await?;
            let b_cfg = cri::sh_config(
                &pod,
                "b",
                &busybox,
                &format!(
                    "{INSPECT} echo marker=$(cat /dev/shm/marker); echo ready; exec sleep 1000"
                ),
            );
            let b = cri::create_start(&mut rt, &pod, &b_cfg).await?;
            let log_b =
                cri::wait_log(&pod.log_of(&b_cfg), 10, |l| l.iter().any(|x| x == "ready")).await?;
            let (lines_a, lines_b) = (
                cri::lines_of(&log_a, "stdout"),
                cri::lines_of(&log_b, "stdout"),
            );
            let (fa, fb) = (cri::facts(&lines_a), cri::facts(&lines_b));
            let get = |f: &HashMap<String, String>, k: &str| f.get(k).cloned().unwrap_or_default();
            ensure!(
                get(&fa, "hostname") == "lifecycle-host" && get(&fa, "uname") == "lifecycle-host",
                "hostname: {lines_a:?}"
            );
            let host_net = std::fs::read_link("/proc/self/ns/net")?
                .display()
                .to_string();
            for key in ["net", "ipc", "uts"] {
                ensure!(
                    !get(&fa, key).is_empty() && get(&fa, key) == get(&fb, key),
                    "{key} namespace not shared: a {:?} b {:?}",
                    get(&fa, key),
                    get(&fb, key)
                );
            }
            ensure!(
                get(&fa, "net") != host_net,
                "the pod runs in the host's netns"
            );
            // Loopback and the CNI interface (the test daemon's embedded network).
            ensure!(
                get(&fa, "links") == "eth0 lo",
                "interfaces: {:?}",
                get(&fa, "links")
            );
            let flags = u32::from_str_radix(get(&fa, "loflags").trim_start_matches("0x"), 16)
                .with_context(|| format!("lo flags {:?}", get(&fa, "loflags")))?;
            ensure!(
                flags & 1 == 1 && get(&fa, "lo").contains("UP"),
                "loopback down: flags {flags:#x}, {:?}",
                get(&fa, "lo")
            );
            let shm = get(&fa, "shm");
            ensure!(
                shm.split(' ').nth(2) == Some("tmpfs") && shm.contains("size=8192k"),
                "/dev/shm: {shm:?}"
            );
            ensure!(
                get(&fb, "marker") == "from-a",
                "/dev/shm not shared: {lines_b:?}"
            );
            let resolv = cri::all_of(&lines_a, "resolv");
            for want in [
                "nameserver 10.96.0.10",
                "nameserver 10.96.0.11",
                "search ns.svc.cluster.local svc.cluster.local",
                "options ndots:5 edns0",
            ] {
                ensure!(
                    resolv.iter().any(|l| l.trim() == want),
                    "resolv.conf lacks {want:?}: {resolv:?}"
                );
            }
            let hosts = cri::all_of(&lines_a, "hosts");
            ensure!(
                hosts
                    .iter()
                    .any(|l| l.starts_with("127.0.0.1") && l.contains("localhost")),
                "/etc/hosts: {hosts:?}"
            );

            // Stop: NOTREADY, containers killed, namespaces and shm released; idempotent.
            let t = std::time::Instant::now();
            rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .context("StopPodSandbox")?;
            let took = t.elapsed();
            eprintln!("StopPodSandbox with 2 running containers: {took:?}");
            // No grace: the containers' PID 1 ignores TERM, only an immediate KILL is this fast.
            ensure!(
                took < crate::support::scaled(std::time::Duration::from_secs(2)),
                "StopPodSandbox took {took:?}"
            );
            let st = cri::pod_status(&mut rt, &id).await?;
            ensure!(
                st.state == pb::PodSandboxState::SandboxNotready as i32,
                "after stop: {st:?}"
            );
            for c in [&a, &b] {
                let s = cri::status(&mut rt, c).await?;
                cri::check_exit(&s, 137, "Error")?;
            }
            let left = cri::mounts_under(&d.state().join("sandboxes").join(&id));
            ensure!(
                left.is_empty(),
                "mounts left after StopPodSandbox: {left:?}"
            );
            for c in [&a, &b] {
                ensure!(
                    crate::support::wait_until(5, || cri::monitors_of(c).is_empty()),
                    "monitor of {c} alive after StopPodSandbox"
                );
                ensure!(
                    crate::support::wait_until(5, || cri::cgroups_of(&d.cgroup_parent(), c)
                        .is_empty()),
                    "cgroups of {c} left: {:?}",
                    cri::cgroups_of(&d.cgroup_parent(), c)
                );
            }
            rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .context("second StopPodSandbox")?;
            rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: "0123456789abcdef0123456789abcdef".into(),
            })
            .await
            .context("StopPodSandbox of an unknown id")?;
            let refused = cri::create(
                &mut rt,
                &pod,
                &cri::sh_config(&pod, "late", &busybox, "true"),
            )
            .await
            .err()
            .context("CreateContainer in a stopped pod succeeded")?;
            eprintln!("CreateContainer in a stopped pod: {refused:#}");

            // Remove: containers go too; idempotent.
            rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .context("RemovePodSandbox")?;
            let gone = cri::pod_status(&mut rt, &id)
                .await
                .err()
                .context("PodSandboxStatus after remove")?;
            cri::code_is(&gone, tonic::Code::NotFound)?;
            let containers = cri::list_containers(&mut rt, None).await?;
            ensure!(containers.is_empty(), "containers left: {containers:?}");
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            for c in [&a, &b] {
                let gone = cri::status(&mut rt, c).await.err().context("status")?;
                cri::code_is(&gone, tonic::Code::NotFound)?;
            }
            rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: id.clone(),
            })
            .await
            .context("second RemovePodSandbox")?;
            rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: "0123456789abcdef0123456789abcdef".into(),
            })
            .await
            .context("RemovePodSandbox of an unknown id")?;
            ensure!(
                pod.log_of(&a_cfg).exists(),
                "the container log belongs to the kubelet and must stay"
            );
            Ok(())
        })
}
