//! CRI pod sandboxes over the socket with real runc: lifecycle and pod files, shared
//! namespaces, list filters, at-most-once RunPodSandbox, bad requests leaving nothing behind.

use std::collections::HashMap;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, map, Pod, NEEDS};
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::pods::lifecycle_pod_files_and_shared_namespaces",
            NEEDS,
            lifecycle,
        ),
        trial(
            "cri::pods::host_namespaces_pod_pid_namespace_and_sysctls",
            NEEDS,
            host_and_pod_namespaces,
        ),
        trial(
            "cri::pods::list_filters_for_pods_and_containers",
            NEEDS,
            filters,
        ),
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
        trial(
            "cri::pods::update_pod_sandbox_resources_is_recorded",
            NEEDS,
            update_resources,
        ),
    ]
}

/// UpdatePodSandboxResources: recorded and shown in the verbose status, kept across a daemon
/// restart; an unknown pod is NotFound.
fn update_resources() -> Result<()> {
    let mut d = cri::daemon()?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "resize")).await?;
        let limits = pb::LinuxContainerResources {
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 256 << 20,
            ..Default::default()
        };
        rt.update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod.id.clone(),
            overhead: None,
            resources: Some(limits),
        })
        .await
        .context("UpdatePodSandboxResources")?;
        let err = rt
            .update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
                pod_sandbox_id: "0123456789ab".into(),
                ..Default::default()
            })
            .await
            .err()
            .context("an unknown pod was updated")?;
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        Ok::<_, anyhow::Error>(pod)
    });
    let pod = cri::with_log(&d, r)?;
    d.restart()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let info = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.id.clone(),
                    verbose: true,
                })
                .await?
                .into_inner()
                .info;
            let info: serde_json::Value =
                serde_json::from_str(info.get("info").context("no verbose info")?)?;
            let res = &info["status"]["resources"];
            ensure!(
                res["cpu_quota"] == 50_000 && res["memory_limit_in_bytes"] == 256 << 20,
                "recorded resources: {res}"
            );
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )
}

/// `key=value` lines of a container's stdout (the first value of each key).
fn facts(lines: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once('=') {
            out.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    out
}

/// Every value of key `key` in `key=value` lines.
fn all_of(lines: &[String], key: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .collect()
}

fn code_is(err: &anyhow::Error, code: tonic::Code) -> Result<()> {
    let status = err
        .chain()
        .find_map(|e| e.downcast_ref::<tonic::Status>())
        .with_context(|| format!("not a gRPC error: {err:#}"))?;
    ensure!(
        status.code() == code,
        "want {code:?}, got {:?}: {}",
        status.code(),
        status.message()
    );
    Ok(())
}

fn status_of(err: &anyhow::Error) -> Option<&tonic::Status> {
    err.chain().find_map(|e| e.downcast_ref::<tonic::Status>())
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
    let d = cri::daemon_with("shm_size = 8388608\n")?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg = cri::pod_config(&d, "lifecycle");
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
            let (fa, fb) = (facts(&lines_a), facts(&lines_b));
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
            let resolv = all_of(&lines_a, "resolv");
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
            let hosts = all_of(&lines_a, "hosts");
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
            code_is(&gone, tonic::Code::NotFound)?;
            let containers = cri::list_containers(&mut rt, None).await?;
            ensure!(containers.is_empty(), "containers left: {containers:?}");
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            for c in [&a, &b] {
                let gone = cri::status(&mut rt, c).await.err().context("status")?;
                code_is(&gone, tonic::Code::NotFound)?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn filters() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg_a = cri::pod_config(&d, "filter-a");
            cfg_a.labels = map(&[("app", "a"), ("team", "x")]);
            let mut cfg_b = cri::pod_config(&d, "filter-b");
            cfg_b.labels = map(&[("app", "b"), ("team", "x")]);
            let pa = cri::run_pod(&mut rt, cfg_a).await?;
            let pb_ = cri::run_pod(&mut rt, cfg_b).await?;

            let mut web = cri::sh_config(&pa, "web", &busybox, "exec sleep 1000");
            web.labels = map(&[("role", "web"), ("tier", "front")]);
            let c1 = cri::create_start(&mut rt, &pa, &web).await?;
            let mut db = cri::sh_config(&pa, "db", &busybox, "exec sleep 1000");
            db.labels = map(&[("role", "db")]);
            let c2 = cri::create(&mut rt, &pa, &db).await?;
            let mut job = cri::sh_config(&pb_, "job", &busybox, "true");
            job.labels = map(&[("role", "web")]);
            let c3 = cri::create_start(&mut rt, &pb_, &job).await?;
            cri::wait_exited(&mut rt, &c3, 10).await?;

            // Containers.
            let ids = |v: Vec<pb::Container>| {
                let mut ids: Vec<String> = v.into_iter().map(|c| c.id).collect();
                ids.sort();
                ids
            };
            let sorted = |v: &[&String]| {
                let mut v: Vec<String> = v.iter().map(|s| s.to_string()).collect();
                v.sort();
                v
            };
            let all = cri::list_containers(&mut rt, None).await?;
            ensure!(all.len() == 3, "all: {all:?}");
            let item = all.iter().find(|c| c.id == c1).context("web not listed")?;
            ensure!(
                item.pod_sandbox_id == pa.id
                    && item.metadata.as_ref().map(|m| m.name.as_str()) == Some("web")
                    && item.labels == web.labels
                    && item.state == pb::ContainerState::ContainerRunning as i32
                    && item.created_at > 0
                    && !item.image_ref.is_empty(),
                "listed: {item:?}"
            );
            let cf = |f: pb::ContainerFilter| Some(f);
            let state = |s: pb::ContainerState| Some(pb::ContainerStateValue { state: s as i32 });
            let cases: Vec<(&str, pb::ContainerFilter, Vec<String>)> = vec![
                (
                    "id prefix",
                    pb::ContainerFilter {
                        id: c1[..12].to_string(),
                        ..Default::default()
                    },
                    sorted(&[&c1]),
                ),
                (
                    "full id",
                    pb::ContainerFilter {
                        id: c2.clone(),
                        ..Default::default()
                    },
                    sorted(&[&c2]),
                ),
                (
                    "unknown id",
                    pb::ContainerFilter {
                        id: "ffffffffffffffff".into(),
                        ..Default::default()
                    },
                    vec![],
                ),
                (
                    "CREATED",
                    pb::ContainerFilter {
                        state: state(pb::ContainerState::ContainerCreated),
                        ..Default::default()
                    },
                    sorted(&[&c2]),
                ),
                (
                    "RUNNING",
                    pb::ContainerFilter {
                        state: state(pb::ContainerState::ContainerRunning),
                        ..Default::default()
                    },
                    sorted(&[&c1]),
                ),
                (
                    "EXITED",
                    pb::ContainerFilter {
                        state: state(pb::ContainerState::ContainerExited),
                        ..Default::default()
                    },
                    sorted(&[&c3]),
                ),
                (
                    "pod a",
                    pb::ContainerFilter {
                        pod_sandbox_id: pa.id.clone(),
                        ..Default::default()
                    },
                    sorted(&[&c1, &c2]),
                ),
                (
                    "pod b",
                    pb::ContainerFilter {
                        pod_sandbox_id: pb_.id.clone(),
                        ..Default::default()
                    },
                    sorted(&[&c3]),
                ),
                (
                    "role=web",
                    pb::ContainerFilter {
                        label_selector: map(&[("role", "web")]),
                        ..Default::default()
                    },
                    sorted(&[&c1, &c3]),
                ),
                (
                    "role=web,tier=front",
                    pb::ContainerFilter {
                        label_selector: map(&[("role", "web"), ("tier", "front")]),
                        ..Default::default()
                    },
                    sorted(&[&c1]),
                ),
                (
                    "pod a + role=web",
                    pb::ContainerFilter {
                        pod_sandbox_id: pa.id.clone(),
                        label_selector: map(&[("role", "web")]),
                        ..Default::default()
                    },
                    sorted(&[&c1]),
                ),
                (
                    "pod b + RUNNING",
                    pb::ContainerFilter {
                        pod_sandbox_id: pb_.id.clone(),
                        state: state(pb::ContainerState::ContainerRunning),
                        ..Default::default()
                    },
                    vec![],
                ),
                (
                    "role=nope",
                    pb::ContainerFilter {
                        label_selector: map(&[("role", "nope")]),
                        ..Default::default()
                    },
                    vec![],
                ),
            ];
            for (what, f, want) in cases {
                let got = ids(cri::list_containers(&mut rt, cf(f)).await?);
                ensure!(
                    got == want,
                    "ListContainers {what}: got {got:?}, want {want:?}"
                );
            }

            // Pods: B is stopped for the state filter.
            rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: pb_.id.clone(),
            })
            .await?;
            let pids = |v: Vec<pb::PodSandbox>| {
                let mut ids: Vec<String> = v.into_iter().map(|p| p.id).collect();
                ids.sort();
                ids
            };
            let pstate =
                |s: pb::PodSandboxState| Some(pb::PodSandboxStateValue { state: s as i32 });
            let cases: Vec<(&str, Option<pb::PodSandboxFilter>, Vec<String>)> = vec![
                ("none", None, sorted(&[&pa.id, &pb_.id])),
                (
                    "id prefix",
                    Some(pb::PodSandboxFilter {
                        id: pa.id[..12].to_string(),
                        ..Default::default()
                    }),
                    sorted(&[&pa.id]),
                ),
                (
                    "unknown id",
                    Some(pb::PodSandboxFilter {
                        id: "ffffffffffffffff".into(),
                        ..Default::default()
                    }),
                    vec![],
                ),
                (
                    "READY",
                    Some(pb::PodSandboxFilter {
                        state: pstate(pb::PodSandboxState::SandboxReady),
                        ..Default::default()
                    }),
                    sorted(&[&pa.id]),
                ),
                (
                    "NOTREADY",
                    Some(pb::PodSandboxFilter {
                        state: pstate(pb::PodSandboxState::SandboxNotready),
                        ..Default::default()
                    }),
                    sorted(&[&pb_.id]),
                ),
                (
                    "team=x",
                    Some(pb::PodSandboxFilter {
                        label_selector: map(&[("team", "x")]),
                        ..Default::default()
                    }),
                    sorted(&[&pa.id, &pb_.id]),
                ),
                (
                    "team=x,app=b",
                    Some(pb::PodSandboxFilter {
                        label_selector: map(&[("team", "x"), ("app", "b")]),
                        ..Default::default()
                    }),
                    sorted(&[&pb_.id]),
                ),
                (
                    "app=c",
                    Some(pb::PodSandboxFilter {
                        label_selector: map(&[("app", "c")]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                (
                    "app=a + NOTREADY",
                    Some(pb::PodSandboxFilter {
                        label_selector: map(&[("app", "a")]),
                        state: pstate(pb::PodSandboxState::SandboxNotready),
                        ..Default::default()
                    }),
                    vec![],
                ),
            ];
            for (what, f, want) in cases {
                let got = pids(cri::list_pods(&mut rt, f).await?);
                ensure!(
                    got == want,
                    "ListPodSandbox {what}: got {got:?}, want {want:?}"
                );
            }

            // RemovePodSandbox of a READY pod with a running and a created container.
            rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: pa.id.clone(),
            })
            .await
            .context("RemovePodSandbox of a READY pod")?;
            rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                pod_sandbox_id: pb_.id.clone(),
            })
            .await
            .context("RemovePodSandbox")?;
            let left = cri::list_containers(&mut rt, None).await?;
            ensure!(left.is_empty(), "containers left: {left:?}");
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
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
            code_is(&again, tonic::Code::AlreadyExists)?;
            ensure!(
                status_of(&again).is_some_and(|s| s.message().contains(&id)),
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
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
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
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;

            // Sandboxes.
            let run =
                |config: Option<pb::PodSandboxConfig>, handler: &str| pb::RunPodSandboxRequest {
                    config,
                    runtime_handler: handler.into(),
                };
            let good = cri::pod_config(&d, "bad-requests");
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
                let st = status_of(&err).with_context(|| format!("{what}: {err:#}"))?;
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
            let st = status_of(&err).with_context(|| format!("{err:#}"))?;
            ensure!(
                st.code() == tonic::Code::AlreadyExists && st.message().contains(&id),
                "duplicate container name: want AlreadyExists naming {id}, got {:?}: {}",
                st.code(),
                st.message()
            );
            ensure!(cri::list_containers(&mut rt, None).await?.len() == 1);
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn host_and_pod_namespaces() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    let host_ns = |n: &str| {
        std::fs::read_link(format!("/proc/self/ns/{n}"))
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    };
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")?
        .trim()
        .to_string();
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            const NS: &str =
                "for n in net ipc pid uts; do echo $n=$(readlink /proc/self/ns/$n); done; \
                echo hostname=$(hostname); echo resolv=$(md5sum < /etc/resolv.conf)";

            // Host network, IPC and PID.
            let mut cfg = cri::pod_config(&d, "host-ns");
            let host = pb::NamespaceOption {
                network: pb::NamespaceMode::Node as i32,
                pid: pb::NamespaceMode::Node as i32,
                ipc: pb::NamespaceMode::Node as i32,
                ..Default::default()
            };
            if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
                sc.namespace_options = Some(host.clone());
            }
            let pod = cri::run_pod(&mut rt, cfg).await?;
            let c = cri::sh_config(&pod, "host", &busybox, NS);
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
            let f = facts(&cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout"));
            for n in ["net", "ipc", "pid", "uts"] {
                ensure!(
                    f.get(n) == Some(&host_ns(n)),
                    "host {n} namespace wanted: {:?} vs host {:?}",
                    f.get(n),
                    host_ns(n)
                );
            }
            // No DNSConfig: the host's resolv.conf.
            let host_resolv = std::process::Command::new("sh")
                .args(["-c", "md5sum < /etc/resolv.conf"])
                .output()?;
            let host_resolv = String::from_utf8_lossy(&host_resolv.stdout)
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
            ensure!(
                f.get("resolv").and_then(|r| r.split_whitespace().next())
                    == Some(host_resolv.as_str()),
                "resolv.conf without DNSConfig: {:?}, host {host_resolv:?}",
                f.get("resolv")
            );
            ensure!(
                f.get("hostname") == Some(&host_name),
                "host-network pod hostname {:?}, host {host_name:?}",
                f.get("hostname")
            );
            ensure!(
                cri::mounts_under(&d.state().join("sandboxes").join(&pod.id))
                    .iter()
                    .all(|(_, fs)| fs != "nsfs"),
                "a host-namespace pod pinned namespaces"
            );
            cri::remove_pod(&mut rt, &pod.id).await?;

            // A pod pid namespace: the pod init is PID 1, containers see each other.
            let mut cfg = cri::pod_config(&d, "pod-pid");
            cri::share_pid(&mut cfg);
            cfg.linux.get_or_insert_with(Default::default).sysctls = map(&[
                ("net.ipv4.ip_unprivileged_port_start", "77"),
                ("kernel.shm_rmid_forced", "1"),
            ]);
            let pod = cri::run_pod(&mut rt, cfg).await?;
            let sleeper = format!("{}", 700_000 + std::process::id() % 90_000);
            let a = cri::sh_config(&pod, "a", &busybox, &format!("exec sleep {sleeper}"));
            cri::create_start(&mut rt, &pod, &a).await?;
            let script = format!(
                "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); \
                 for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -q '^sleep {sleeper}' \
                   && echo sees-a=yes || echo sees-a=no; \
                 echo port=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start); \
                 echo rmid=$(cat /proc/sys/kernel/shm_rmid_forced); echo me=$$"
            );
            let b = cri::sh_config(&pod, "b", &busybox, &script);
            // a's sleep must be running before b looks.
            let argv = ["sleep", sleeper.as_str()];
            ensure!(
                crate::support::wait_until(10, || !cri::processes_with_argv(&argv).is_empty()),
                "container a's sleep never ran"
            );
            let id = cri::create_start(&mut rt, &pod, &b).await?;
            cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
            let out = cri::lines_of(&cri::read_log(&pod.log_of(&b))?, "stdout");
            let f = facts(&out);
            ensure!(
                f.get("pid1").is_some_and(|c| c.contains("pod-init")),
                "PID 1 of a pod pid namespace: {out:?}"
            );
            ensure!(
                f.get("sees-a").map(String::as_str) == Some("yes"),
                "containers of a shared-pid pod do not see each other: {out:?}"
            );
            ensure!(f.get("me").is_some_and(|p| p != "1"), "{out:?}");
            ensure!(
                f.get("port").map(String::as_str) == Some("77")
                    && f.get("rmid").map(String::as_str) == Some("1"),
                "pod sysctls: {out:?}"
            );
            let on_host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")?;
            ensure!(on_host.trim() != "77", "a pod sysctl leaked to the host");
            cri::remove_pod(&mut rt, &pod.id).await?;

            // A sysctl that is not namespaced is refused, and nothing is left.
            let mut cfg = cri::pod_config(&d, "bad-sysctl");
            cfg.linux.get_or_insert_with(Default::default).sysctls = map(&[("kernel.panic", "1")]);
            let err = cri::run_pod(&mut rt, cfg)
                .await
                .err()
                .context("a host sysctl was accepted")?;
            let st = status_of(&err).with_context(|| format!("{err:#}"))?;
            ensure!(
                st.code() == tonic::Code::InvalidArgument && st.message().contains("kernel.panic"),
                "non-namespaced sysctl: {:?} {}",
                st.code(),
                st.message()
            );
            ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}
