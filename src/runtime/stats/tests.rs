//! Runtime stats over fabricated cgroup trees and records: which cgroup is read, CPU rates, filters, pod totals.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{StatsState, MIN_RATE_INTERVAL};
use crate::cgroups::{self, V1};
use crate::oci::{ContainerRequest, NamespaceMode};
use crate::runtime::state::meta::{ContainerMeta, SandboxMeta, SandboxRequest};
use crate::runtime::state::status::{now_ns, ContainerStatus, SandboxStatus};
use crate::runtime::test_fixture::Fixture;
use crate::runtime::{Filter, PodName};

/// The shared fixture with a fabricated cgroup v1 tree under its directory.
fn fixture() -> Fixture {
    let fx = crate::runtime::test_fixture::fixture();
    fx.rt
        .set_cgroups(Arc::new(V1::new(&fx.dir.path().join("cgroup"))));
    fx
}

fn cg(root: &Path, controller: &str, dir: &str, file: &str, text: &str) {
    let d = root.join("cgroup").join(controller).join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join(file), text).expect("write");
}

/// A v1 cgroup with `cpu` ns, `mem` bytes used (1000 of them inactive file) and `pids` tasks.
fn cgroup(fx: &Fixture, dir: &str, cpu: u64, mem: u64, pids: u64) {
    let root = fx.dir.path();
    cg(root, "cpuacct", dir, "cpuacct.usage", &format!("{cpu}\n"));
    cg(
        root,
        "memory",
        dir,
        "memory.usage_in_bytes",
        &format!("{mem}\n"),
    );
    cg(
        root,
        "memory",
        dir,
        "memory.stat",
        "total_inactive_file 1000\ntotal_rss 500\n",
    );
    cg(root, "pids", dir, "pids.current", &format!("{pids}\n"));
}

fn sandbox(fx: &Fixture, name: &str, parent: &str, network: NamespaceMode) -> String {
    let pod = PodName {
        name: name.into(),
        namespace: "ns".into(),
        uid: format!("uid-{name}"),
        attempt: 0,
    };
    let meta = SandboxMeta {
        request: SandboxRequest {
            pod: pod.clone(),
            cgroup_parent: parent.into(),
            network,
            labels: BTreeMap::from([("app".to_string(), name.to_string())]),
            ..SandboxRequest::default()
        },
        state_dir: fx.dir.path().join("state/sandboxes").join(name),
        ..SandboxMeta::default()
    };
    let table = &fx.rt.state.sandboxes;
    let res = table.reserve(&pod.key()).expect("reserve");
    let mut status = SandboxStatus::created(now_ns());
    status.ready(now_ns(), 0).expect("ready");
    table
        .create(res, meta, status)
        .expect("create")
        .id()
        .to_string()
}

fn container(fx: &Fixture, sandbox: &str, name: &str, running: bool, tier: &str) -> String {
    let table = &fx.rt.state.containers;
    let res = table
        .reserve(&format!("{name}_{sandbox}"))
        .expect("reserve");
    let id = res.id().to_string();
    let meta = ContainerMeta {
        sandbox_id: sandbox.into(),
        pod_key: sandbox.into(),
        request: ContainerRequest {
            name: name.into(),
            labels: BTreeMap::from([("tier".to_string(), tier.to_string())]),
            ..ContainerRequest::default()
        },
        cgroups_path: format!("/bosun/{id}"),
        ..ContainerMeta::default()
    };
    let mut status = ContainerStatus::created(now_ns());
    if running {
        status.start(now_ns(), 4242).expect("start");
    }
    table.create(res, meta, status).expect("create");
    id
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

#[test]
fn container_stats_read_the_container_cgroup_and_layer() {
    let fx = fixture();
    let sb = sandbox(&fx, "web", "", NamespaceMode::Node);
    let id = container(&fx, &sb, "app", true, "front");
    cgroup(&fx, &format!("bosun/{id}"), 5_000_000_000, 1_000_000, 4);
    let upper = fx.rt.layout.rw_dir(&id).join("upper");
    std::fs::create_dir_all(&upper).expect("mkdir");
    std::fs::write(upper.join("f"), vec![0u8; 100_000]).expect("write");

    let s = block_on(fx.rt.container_stats(&id[..8])).expect("stats");
    assert_eq!(s.entry.id(), id);
    assert_eq!(
        s.cgroup.cpu.as_ref().map(|c| c.usage_ns),
        Some(5_000_000_000)
    );
    let m = s.cgroup.memory.as_ref().expect("memory");
    assert_eq!(
        (m.usage_bytes, m.working_set_bytes, m.rss_bytes),
        (1_000_000, 999_000, Some(500))
    );
    assert_eq!(s.cgroup.pids, Some(4));
    assert_eq!(s.usage_nano_cores, None, "no previous sample yet");
    let layer = s.writable_layer.expect("layer");
    assert_eq!(layer.inodes_used, 2);
    assert!(layer.used_bytes >= 100_000, "{layer:?}");
    assert_eq!(layer.mountpoint, fx.rt.layout.durable);

    // Within the TTL the walk is not repeated.
    std::fs::write(upper.join("g"), vec![0u8; 100_000]).expect("write");
    let again = block_on(fx.rt.container_stats(&id)).expect("stats");
    assert_eq!(again.writable_layer.map(|l| l.inodes_used), Some(2));

    assert_eq!(
        block_on(fx.rt.container_stats("nope"))
            .expect_err("unknown")
            .kind(),
        crate::ErrorKind::NotFound
    );
}

#[test]
fn exited_containers_have_no_cgroup_stats_and_gone_cgroups_are_partial() {
    let fx = fixture();
    let sb = sandbox(&fx, "web", "", NamespaceMode::Node);
    let id = container(&fx, &sb, "app", true, "x");
    // The cgroup is gone (the container just exited): partial stats, no error.
    let s = block_on(fx.rt.container_stats(&id)).expect("stats");
    assert!(s.cgroup.is_empty());
    assert!(s.writable_layer.is_none());
    fx.rt
        .state
        .containers
        .update(&id, |st| st.exit(now_ns(), 0, false))
        .expect("exit");
    cgroup(&fx, &format!("bosun/{id}"), 1, 1, 1);
    let s = block_on(fx.rt.container_stats(&id)).expect("stats");
    assert!(
        s.cgroup.is_empty(),
        "an exited container's cgroup is not read"
    );
}

#[test]
fn cpu_rate_comes_from_the_previous_sample() {
    let state = StatsState::with_cgroups(cgroups::detect_at(Path::new("/nonexistent")));
    let t0 = Instant::now();
    assert_eq!(state.nano_cores("c", t0, 1_000_000_000), None);
    // Too close to the previous sample: its rate (none yet) is repeated, the sample kept.
    assert_eq!(
        state.nano_cores("c", t0 + MIN_RATE_INTERVAL / 2, 1_100_000_000),
        None
    );
    // 1 s of CPU over 2 s: half a core.
    assert_eq!(
        state.nano_cores("c", t0 + Duration::from_secs(2), 2_000_000_000),
        Some(500_000_000)
    );
    assert_eq!(
        state.nano_cores("c", t0 + Duration::from_millis(2100), 2_100_000_000),
        Some(500_000_000),
        "a close call repeats the last rate"
    );
    // The counter going back (cgroup recreated) restarts the series.
    assert_eq!(state.nano_cores("c", t0 + Duration::from_secs(4), 10), None);
    assert_eq!(
        state.nano_cores("c", t0 + Duration::from_secs(5), 2_000_000_010),
        Some(2_000_000_000)
    );
}

#[test]
fn lists_filter_by_id_pod_and_labels() {
    let fx = fixture();
    let a = sandbox(&fx, "a", "", NamespaceMode::Node);
    let b = sandbox(&fx, "b", "", NamespaceMode::Node);
    let a1 = container(&fx, &a, "one", true, "front");
    let a2 = container(&fx, &a, "two", false, "back");
    let b1 = container(&fx, &b, "one", true, "front");
    let ids = |f: Filter<_>| {
        let mut v: Vec<String> = block_on(fx.rt.list_container_stats(&f))
            .expect("list")
            .iter()
            .map(|s| s.entry.id().to_string())
            .collect();
        v.sort();
        v
    };
    let sorted = |mut v: Vec<&String>| {
        v.sort();
        v.into_iter().cloned().collect::<Vec<_>>()
    };
    assert_eq!(ids(Filter::default()), sorted(vec![&a1, &a2, &b1]));
    assert_eq!(
        ids(Filter {
            pod_id: Some(a.clone()),
            ..Filter::default()
        }),
        sorted(vec![&a1, &a2])
    );
    assert_eq!(
        ids(Filter {
            labels: HashMap::from([("tier".to_string(), "front".to_string())]),
            ..Filter::default()
        }),
        sorted(vec![&a1, &b1])
    );
    assert_eq!(
        ids(Filter {
            id_prefix: Some(b1[..10].to_string()),
            ..Filter::default()
        }),
        vec![b1.clone()]
    );
    let pods: Vec<String> = block_on(fx.rt.list_sandbox_stats(&Filter {
        labels: HashMap::from([("app".to_string(), "b".to_string())]),
        ..Filter::default()
    }))
    .expect("pods")
    .iter()
    .map(|s| s.entry.id().to_string())
    .collect();
    assert_eq!(pods, vec![b]);
}

#[test]
fn pod_stats_read_the_pod_cgroup_or_sum_the_containers() {
    let fx = fixture();
    // A pod with its own cgroup parent: that cgroup is the pod's total.
    let own = sandbox(&fx, "own", "/kubepods/pod1", NamespaceMode::Node);
    let c1 = container(&fx, &own, "c", true, "x");
    cgroup(&fx, &format!("bosun/{c1}"), 100, 10_000, 1);
    cgroup(&fx, "kubepods/pod1", 7_000, 50_000, 9);
    let s = block_on(fx.rt.sandbox_stats(&own)).expect("stats");
    assert_eq!(s.cgroup.cpu.as_ref().map(|c| c.usage_ns), Some(7_000));
    assert_eq!(s.cgroup.pids, Some(9));
    assert_eq!(s.containers.len(), 1);
    assert_eq!(s.containers[0].entry.id(), c1);
    assert!(
        s.network.is_none(),
        "host-network pods have no network stats"
    );

    // A pod without a cgroup parent: the sum of its created and running containers.
    let sum = sandbox(&fx, "sum", "", NamespaceMode::Node);
    let (x, y) = (
        container(&fx, &sum, "x", true, "x"),
        container(&fx, &sum, "y", true, "x"),
    );
    cgroup(&fx, &format!("bosun/{x}"), 100, 10_000, 1);
    cgroup(&fx, &format!("bosun/{y}"), 200, 20_000, 2);
    let s = block_on(fx.rt.sandbox_stats(&sum)).expect("stats");
    assert_eq!(s.cgroup.cpu.as_ref().map(|c| c.usage_ns), Some(300));
    let m = s.cgroup.memory.as_ref().expect("memory");
    assert_eq!((m.usage_bytes, m.working_set_bytes), (30_000, 28_000));
    assert_eq!(s.cgroup.pids, Some(3));
    assert_eq!(s.containers.len(), 2);
}

#[test]
fn a_pod_network_namespace_that_is_gone_gives_no_network_stats() {
    let fx = fixture();
    let id = sandbox(&fx, "net", "", NamespaceMode::Pod);
    let s = block_on(fx.rt.sandbox_stats(&id)).expect("stats");
    assert!(s.network.is_none());
}

#[test]
fn systemd_driver_on_cgroup_v2_reads_the_scope_under_the_pod_slice() {
    let fx = crate::runtime::test_fixture::fixture_with(|c| {
        c.cgroup_driver = crate::config::CgroupDriver::Systemd;
    });
    let v2_root = fx.dir.path().join("unified");
    fx.rt.set_cgroups(Arc::new(cgroups::V2::new(&v2_root)));
    let sb = sandbox(
        &fx,
        "pod",
        "kubepods-burstable-pod1.slice",
        NamespaceMode::Node,
    );
    // A container whose cgroupsPath is systemd's slice:prefix:name.
    let table = &fx.rt.state.containers;
    let res = table.reserve("c_pod").expect("reserve");
    let id = res.id().to_string();
    let meta = ContainerMeta {
        sandbox_id: sb.clone(),
        cgroups_path: format!("kubepods-burstable-pod1.slice:bosun:{id}"),
        ..ContainerMeta::default()
    };
    let mut status = ContainerStatus::created(now_ns());
    status.start(now_ns(), 1).expect("start");
    table.create(res, meta, status).expect("create");
    let slice =
        v2_root.join("kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice");
    let scope = slice.join(format!("bosun-{id}.scope"));
    for (d, usage, cur) in [(&slice, 900, 8000), (&scope, 300, 5000)] {
        std::fs::create_dir_all(d).expect("mkdir");
        std::fs::write(d.join("cpu.stat"), format!("usage_usec {usage}\n")).expect("write");
        std::fs::write(d.join("memory.current"), format!("{cur}\n")).expect("write");
        std::fs::write(d.join("memory.stat"), "inactive_file 1000\nanon 10\n").expect("write");
        std::fs::write(d.join("memory.max"), "20000\n").expect("write");
        std::fs::write(d.join("pids.current"), "2\n").expect("write");
    }
    let c = block_on(fx.rt.container_stats(&id)).expect("stats");
    assert_eq!(c.cgroup.cpu.map(|c| c.usage_ns), Some(300_000));
    let m = c.cgroup.memory.expect("memory");
    assert_eq!((m.usage_bytes, m.working_set_bytes), (5000, 4000));
    assert_eq!(m.available_bytes(), Some(16_000));
    let p = block_on(fx.rt.sandbox_stats(&sb)).expect("pod stats");
    assert_eq!(p.cgroup.cpu.map(|c| c.usage_ns), Some(900_000));
    assert_eq!(p.cgroup.memory.map(|m| m.working_set_bytes), Some(7000));
}
