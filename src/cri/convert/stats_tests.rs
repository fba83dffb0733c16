//! Stats conversions: filters, every field mapped, absent parts left unset, metrics that line up with their descriptors.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

use super::stats::*;
use crate::cgroups::{Cpu, Memory, Pressure, Psi, PsiData, Stats};
use crate::oci::ContainerRequest;
use crate::proto::runtime::v1 as pb;
use crate::runtime::meta::{ContainerMeta, SandboxMeta, SandboxRequest};
use crate::runtime::stats::{ContainerStats, FsUsage, Interface, SandboxStats};
use crate::runtime::status::{ContainerStatus, SandboxStatus};
use crate::runtime::{ContainerEntry, PodName, SandboxEntry, Table};

fn entries(dir: &std::path::Path) -> (Arc<SandboxEntry>, Arc<ContainerEntry>) {
    let sandboxes: Table<SandboxMeta, SandboxStatus> = Table::new("sandbox", dir.join("s"));
    let containers: Table<ContainerMeta, ContainerStatus> = Table::new("container", dir.join("c"));
    std::fs::create_dir_all(dir.join("s")).expect("mkdir");
    std::fs::create_dir_all(dir.join("c")).expect("mkdir");
    let pod = PodName {
        name: "web".into(),
        namespace: "default".into(),
        uid: "u1".into(),
        attempt: 2,
    };
    let sb = sandboxes
        .create(
            sandboxes.reserve("p").expect("reserve"),
            SandboxMeta {
                request: SandboxRequest {
                    pod,
                    labels: BTreeMap::from([("app".into(), "web".into())]),
                    ..Default::default()
                },
                ..Default::default()
            },
            SandboxStatus::created(1),
        )
        .expect("sandbox");
    let mut status = ContainerStatus::created(1);
    status.start(3_000_000_000, 7).expect("start");
    let c = containers
        .create(
            containers.reserve("c").expect("reserve"),
            ContainerMeta {
                sandbox_id: sb.id().to_string(),
                attempt: 1,
                image_name: "docker.io/library/busybox:latest".into(),
                request: ContainerRequest {
                    name: "app".into(),
                    labels: BTreeMap::from([("tier".into(), "front".into())]),
                    annotations: BTreeMap::from([("a".into(), "b".into())]),
                    ..Default::default()
                },
                ..Default::default()
            },
            status,
        )
        .expect("container");
    (sb, c)
}

fn full_stats(c: Arc<ContainerEntry>) -> ContainerStats {
    ContainerStats {
        entry: c,
        timestamp_ns: 42,
        cgroup: Stats {
            cpu: Some(Cpu {
                usage_ns: 7_500_000_000,
                user_ns: Some(5_000_000_000),
                system_ns: Some(2_500_000_000),
            }),
            memory: Some(Memory {
                usage_bytes: 100,
                working_set_bytes: 80,
                rss_bytes: Some(50),
                page_faults: Some(9),
                major_page_faults: Some(1),
                limit_bytes: Some(1000),
                swap_bytes: Some(0),
                ..Default::default()
            }),
            pids: Some(3),
            pressure: Pressure {
                cpu: Some(Psi {
                    some: PsiData {
                        total_us: 5,
                        avg10: 1.5,
                        ..Default::default()
                    },
                    full: None,
                }),
                memory: None,
                io: Some(Psi::default()),
            },
        },
        usage_nano_cores: Some(250_000_000),
        writable_layer: Some(FsUsage {
            timestamp_ns: 41,
            mountpoint: PathBuf::from("/var/lib/bosun"),
            used_bytes: 4096,
            inodes_used: 2,
        }),
    }
}

#[test]
fn filters_map_every_field() {
    let f = container_filter(Some(pb::ContainerStatsFilter {
        id: "ab".into(),
        pod_sandbox_id: "cd".into(),
        label_selector: HashMap::from([("k".into(), "v".into())]),
    }));
    assert_eq!(f.id_prefix.as_deref(), Some("ab"));
    assert_eq!(f.pod_id.as_deref(), Some("cd"));
    assert_eq!(f.labels.get("k").map(String::as_str), Some("v"));
    let f = container_filter(Some(pb::ContainerStatsFilter::default()));
    assert!(f.id_prefix.is_none() && f.pod_id.is_none() && f.labels.is_empty());
    assert!(container_filter(None).id_prefix.is_none());
    let f = sandbox_filter(Some(pb::PodSandboxStatsFilter {
        id: "x".into(),
        label_selector: HashMap::from([("app".into(), "web".into())]),
    }));
    assert_eq!(f.id_prefix.as_deref(), Some("x"));
    assert_eq!(f.labels.len(), 1);
}

#[test]
fn container_stats_map_every_field_and_leave_unknowns_unset() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (_, c) = entries(tmp.path());
    let p = container_stats(&full_stats(c.clone()));
    let a = p.attributes.expect("attributes");
    assert_eq!(a.id, c.id());
    assert_eq!(
        a.metadata.map(|m| (m.name, m.attempt)),
        Some(("app".into(), 1))
    );
    assert_eq!(a.labels.get("tier").map(String::as_str), Some("front"));
    assert_eq!(a.annotations.get("a").map(String::as_str), Some("b"));
    let cpu = p.cpu.expect("cpu");
    assert_eq!(cpu.timestamp, 42);
    assert_eq!(
        cpu.usage_core_nano_seconds.map(|v| v.value),
        Some(7_500_000_000)
    );
    assert_eq!(cpu.usage_nano_cores.map(|v| v.value), Some(250_000_000));
    let cpu_psi = cpu.psi.expect("cpu psi");
    assert_eq!(cpu_psi.some.map(|d| (d.total, d.avg10)), Some((5, 1.5)));
    assert!(cpu_psi.full.is_none());
    assert!(p.io.and_then(|io| io.psi).is_some(), "io pressure");
    let m = p.memory.expect("memory");
    assert!(m.psi.is_none(), "no memory pressure read");
    assert_eq!(m.usage_bytes.map(|v| v.value), Some(100));
    assert_eq!(m.working_set_bytes.map(|v| v.value), Some(80));
    assert_eq!(m.available_bytes.map(|v| v.value), Some(920));
    assert_eq!(m.rss_bytes.map(|v| v.value), Some(50));
    assert_eq!(m.page_faults.map(|v| v.value), Some(9));
    assert_eq!(m.major_page_faults.map(|v| v.value), Some(1));
    let l = p.writable_layer.expect("layer");
    assert_eq!(l.fs_id.map(|f| f.mountpoint), Some("/var/lib/bosun".into()));
    assert_eq!(l.used_bytes.map(|v| v.value), Some(4096));
    assert_eq!(l.inodes_used.map(|v| v.value), Some(2));
    assert_eq!(
        p.swap.and_then(|s| s.swap_usage_bytes).map(|v| v.value),
        Some(0)
    );

    // Nothing read: attributes only, every usage unset (not zero).
    let empty = container_stats(&ContainerStats {
        cgroup: Stats::default(),
        usage_nano_cores: None,
        writable_layer: None,
        ..full_stats(c)
    });
    assert!(empty.attributes.is_some());
    assert!(empty.cpu.is_none() && empty.memory.is_none() && empty.writable_layer.is_none());
    assert!(empty.swap.is_none());
}

fn pod_stats(tmp: &std::path::Path) -> SandboxStats {
    let (sb, c) = entries(tmp);
    SandboxStats {
        entry: sb,
        timestamp_ns: 43,
        cgroup: full_stats(c.clone()).cgroup,
        usage_nano_cores: None,
        network: Some(vec![
            Interface {
                name: "lo".into(),
                rx_bytes: 10,
                tx_bytes: 10,
                ..Default::default()
            },
            Interface {
                name: "eth0".into(),
                rx_bytes: 100,
                rx_errors: 1,
                tx_bytes: 200,
                tx_errors: 2,
                ..Default::default()
            },
        ]),
        containers: vec![full_stats(c)],
    }
}

#[test]
fn sandbox_stats_carry_network_processes_and_containers() {
    let tmp = tempfile::tempdir().expect("tmp");
    let p = sandbox_stats(&pod_stats(tmp.path()));
    let a = p.attributes.expect("attributes");
    assert_eq!(
        a.metadata.map(|m| (m.name, m.attempt)),
        Some(("web".into(), 2))
    );
    let linux = p.linux.expect("linux");
    let net = linux.network.expect("network");
    assert_eq!(net.interfaces.len(), 2);
    let eth0 = net
        .default_interface
        .expect("eth0 is the default interface");
    assert_eq!(
        (
            eth0.rx_bytes.map(|v| v.value),
            eth0.tx_errors.map(|v| v.value)
        ),
        (Some(100), Some(2))
    );
    assert_eq!(
        linux.process.and_then(|p| p.process_count).map(|v| v.value),
        Some(3)
    );
    assert_eq!(linux.containers.len(), 1);
    assert_eq!(linux.cpu.and_then(|c| c.usage_nano_cores), None);
}

#[test]
fn every_metric_lines_up_with_its_descriptor() {
    let descs = metric_descriptors();
    let by_name: HashMap<&str, &pb::MetricDescriptor> =
        descs.iter().map(|d| (d.name.as_str(), d)).collect();
    assert_eq!(by_name.len(), descs.len(), "names are unique");
    for d in &descs {
        assert_eq!(&d.label_keys[..3], ["id", "name", "image"], "{}", d.name);
        assert!(!d.help.is_empty());
    }
    for name in [
        "container_cpu_usage_seconds_total",
        "container_memory_working_set_bytes",
        "container_memory_usage_bytes",
        "container_memory_rss",
        "container_spec_memory_limit_bytes",
        "container_fs_usage_bytes",
        "container_processes",
        "container_network_receive_bytes_total",
        "container_network_transmit_bytes_total",
    ] {
        assert!(by_name.contains_key(name), "{name} is described");
    }

    let tmp = tempfile::tempdir().expect("tmp");
    let m = sandbox_metrics(&pod_stats(tmp.path()));
    let all: Vec<&pb::Metric> = m
        .metrics
        .iter()
        .chain(m.container_metrics.iter().flat_map(|c| c.metrics.iter()))
        .collect();
    let mut seen = HashSet::new();
    for metric in &all {
        let d = by_name.get(metric.name.as_str()).expect("described");
        assert_eq!(
            metric.label_values.len(),
            d.label_keys.len(),
            "{}",
            metric.name
        );
        assert!(
            seen.insert((metric.name.clone(), metric.label_values.clone())),
            "duplicate {metric:?}"
        );
    }
    let find = |name: &str, extra: Option<&str>| {
        all.iter()
            .find(|m| {
                m.name == name
                    && extra.is_none_or(|e| m.label_values.last().map(String::as_str) == Some(e))
            })
            .and_then(|m| m.value.as_ref())
            .map(|v| v.value)
    };
    assert_eq!(find("container_cpu_usage_seconds_total", None), Some(7));
    assert_eq!(find("container_memory_working_set_bytes", None), Some(80));
    assert_eq!(find("container_spec_memory_limit_bytes", None), Some(1000));
    assert_eq!(find("container_processes", None), Some(3));
    assert_eq!(find("container_start_time_seconds", None), Some(3));
    assert_eq!(
        find("container_network_receive_bytes_total", Some("eth0")),
        Some(100)
    );
    assert_eq!(
        find("container_network_transmit_bytes_total", Some("lo")),
        Some(10)
    );
    let cpu = all
        .iter()
        .find(|m| m.name == "container_cpu_usage_seconds_total")
        .expect("cpu");
    assert_eq!(cpu.metric_type, pb::MetricType::Counter as i32);
    assert_eq!(
        cpu.label_values[1..],
        ["app".to_string(), "docker.io/library/busybox:latest".into()]
    );
    let net = &m.metrics[0];
    assert_eq!(
        net.label_values[1..3],
        [String::new(), String::new()],
        "pod-level: no name or image"
    );
}
