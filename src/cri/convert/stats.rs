//! Stats and metrics: CRI stats filters → `runtime::Filter`, runtime stats → CRI stats, and cadvisor-named metric descriptors and samples.

use super::sandbox::{pod_metadata, unsorted};
use crate::cgroups::{self, Memory};
use crate::proto::runtime::v1 as pb;
use crate::runtime::stats::{ContainerStats, Interface, SandboxStats};
use crate::runtime::{ContainerState, Filter, SandboxState};

fn nonempty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn value(v: u64) -> Option<pb::UInt64Value> {
    Some(pb::UInt64Value { value: v })
}

fn opt(v: Option<u64>) -> Option<pb::UInt64Value> {
    v.map(|value| pb::UInt64Value { value })
}

/// A ContainerStatsFilter (absent: everything): id prefix, sandbox id, label selector.
pub fn container_filter(f: Option<pb::ContainerStatsFilter>) -> Filter<ContainerState> {
    let Some(f) = f else {
        return Filter::default();
    };
    Filter {
        id_prefix: nonempty(f.id),
        states: Vec::new(),
        labels: f.label_selector,
        pod_id: nonempty(f.pod_sandbox_id),
    }
}

/// A PodSandboxStatsFilter (absent: everything): id prefix, label selector.
pub fn sandbox_filter(f: Option<pb::PodSandboxStatsFilter>) -> Filter<SandboxState> {
    let Some(f) = f else {
        return Filter::default();
    };
    Filter {
        id_prefix: nonempty(f.id),
        states: Vec::new(),
        labels: f.label_selector,
        pod_id: None,
    }
}

fn psi_data(d: &cgroups::PsiData) -> pb::PsiData {
    pb::PsiData {
        total: d.total_us,
        avg10: d.avg10,
        avg60: d.avg60,
        avg300: d.avg300,
    }
}

fn psi(p: &Option<cgroups::Psi>) -> Option<pb::PsiStats> {
    p.as_ref().map(|p| pb::PsiStats {
        full: p.full.as_ref().map(psi_data),
        some: Some(psi_data(&p.some)),
    })
}

fn io(ts: i64, s: &cgroups::Stats) -> Option<pb::IoUsage> {
    s.pressure.io.as_ref().map(|_| pb::IoUsage {
        timestamp: ts,
        psi: psi(&s.pressure.io),
    })
}

fn cpu(ts: i64, s: &cgroups::Stats, nano_cores: Option<u64>) -> Option<pb::CpuUsage> {
    s.cpu.as_ref().map(|c| pb::CpuUsage {
        timestamp: ts,
        usage_core_nano_seconds: value(c.usage_ns),
        usage_nano_cores: opt(nano_cores),
        psi: psi(&s.pressure.cpu),
    })
}

fn memory(ts: i64, m: &Memory, pressure: &Option<cgroups::Psi>) -> pb::MemoryUsage {
    pb::MemoryUsage {
        timestamp: ts,
        working_set_bytes: value(m.working_set_bytes),
        available_bytes: opt(m.available_bytes()),
        usage_bytes: value(m.usage_bytes),
        rss_bytes: opt(m.rss_bytes),
        page_faults: opt(m.page_faults),
        major_page_faults: opt(m.major_page_faults),
        psi: psi(pressure),
    }
}

/// One container's stats.
pub fn container_stats(s: &ContainerStats) -> pb::ContainerStats {
    let (meta, ts) = (s.entry.meta(), s.timestamp_ns);
    let mem = s.cgroup.memory.as_ref();
    pb::ContainerStats {
        attributes: Some(pb::ContainerAttributes {
            id: s.entry.id().to_string(),
            metadata: Some(pb::ContainerMetadata {
                name: meta.request.name.clone(),
                attempt: meta.attempt,
            }),
            labels: unsorted(&meta.request.labels),
            annotations: unsorted(&meta.request.annotations),
        }),
        cpu: cpu(ts, &s.cgroup, s.usage_nano_cores),
        memory: mem.map(|m| memory(ts, m, &s.cgroup.pressure.memory)),
        writable_layer: s.writable_layer.as_ref().map(|l| pb::FilesystemUsage {
            timestamp: l.timestamp_ns,
            fs_id: Some(pb::FilesystemIdentifier {
                mountpoint: l.mountpoint.display().to_string(),
            }),
            used_bytes: value(l.used_bytes),
            inodes_used: value(l.inodes_used),
        }),
        swap: mem
            .filter(|m| m.swap_bytes.is_some())
            .map(|m| pb::SwapUsage {
                timestamp: ts,
                swap_available_bytes: opt(m.swap_available_bytes()),
                swap_usage_bytes: opt(m.swap_bytes),
            }),
        io: io(ts, &s.cgroup),
    }
}

fn interface(i: &Interface) -> pb::NetworkInterfaceUsage {
    pb::NetworkInterfaceUsage {
        name: i.name.clone(),
        rx_bytes: value(i.rx_bytes),
        rx_errors: value(i.rx_errors),
        tx_bytes: value(i.tx_bytes),
        tx_errors: value(i.tx_errors),
    }
}

/// The interface the kubelet reports as the pod's (the CNI convention's `eth0`).
pub const DEFAULT_INTERFACE: &str = "eth0";

/// One pod's stats with its containers'.
pub fn sandbox_stats(s: &SandboxStats) -> pb::PodSandboxStats {
    let (meta, ts) = (s.entry.meta(), s.timestamp_ns);
    pb::PodSandboxStats {
        attributes: Some(pb::PodSandboxAttributes {
            id: s.entry.id().to_string(),
            metadata: Some(pod_metadata(&meta.request.pod)),
            labels: unsorted(&meta.request.labels),
            annotations: unsorted(&meta.request.annotations),
        }),
        linux: Some(pb::LinuxPodSandboxStats {
            cpu: cpu(ts, &s.cgroup, s.usage_nano_cores),
            memory: (s.cgroup.memory.as_ref()).map(|m| memory(ts, m, &s.cgroup.pressure.memory)),
            network: s.network.as_ref().map(|ifs| pb::NetworkUsage {
                timestamp: ts,
                default_interface: ifs
                    .iter()
                    .find(|i| i.name == DEFAULT_INTERFACE)
                    .map(interface),
                interfaces: ifs.iter().map(interface).collect(),
            }),
            process: s.cgroup.pids.map(|n| pb::ProcessUsage {
                timestamp: ts,
                process_count: value(n),
            }),
            containers: s.containers.iter().map(container_stats).collect(),
            io: io(ts, &s.cgroup),
        }),
        windows: None,
    }
}

// ------------------------------------------------------------------------------------------
// Metrics (ListMetricDescriptors / ListPodSandboxMetrics)

/// Label keys of every metric: the container (or sandbox) id, the container name, the image.
/// The kubelet appends `namespace`, `pod` and `container` itself.
const BASE: [&str; 3] = ["id", "name", "image"];

/// One metric family: cadvisor's name and help, its type and labels beyond [`BASE`].
struct Family {
    name: &'static str,
    help: &'static str,
    kind: pb::MetricType,
    extra: &'static [&'static str],
}

const fn family(
    name: &'static str,
    help: &'static str,
    kind: pb::MetricType,
    extra: &'static [&'static str],
) -> Family {
    Family {
        name,
        help,
        kind,
        extra,
    }
}

use pb::MetricType::{Counter as C, Gauge as G};

const NET: &[&str] = &["interface"];
const DEV: &[&str] = &["device"];
const FAIL: &[&str] = &["failure_type", "scope"];

/// Every family bosun reports, with cadvisor's names (what `/metrics/cadvisor` serves).
const FAMILIES: &[Family] = &[
    family(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed in seconds.",
        C,
        &[],
    ),
    family(
        "container_cpu_user_seconds_total",
        "Cumulative user cpu time consumed in seconds.",
        C,
        &[],
    ),
    family(
        "container_cpu_system_seconds_total",
        "Cumulative system cpu time consumed in seconds.",
        C,
        &[],
    ),
    family(
        "container_memory_usage_bytes",
        "Current memory usage in bytes, including all memory regardless of when it was accessed",
        G,
        &[],
    ),
    family(
        "container_memory_working_set_bytes",
        "Current working set in bytes.",
        G,
        &[],
    ),
    family("container_memory_rss", "Size of RSS in bytes.", G, &[]),
    family(
        "container_memory_cache",
        "Number of bytes of page cache memory.",
        G,
        &[],
    ),
    family(
        "container_memory_mapped_file",
        "Size of memory mapped files in bytes.",
        G,
        &[],
    ),
    family(
        "container_memory_swap",
        "Container swap usage in bytes.",
        G,
        &[],
    ),
    family(
        "container_memory_total_active_file_bytes",
        "Current total active file in bytes.",
        G,
        &[],
    ),
    family(
        "container_memory_total_inactive_file_bytes",
        "Current total inactive file in bytes.",
        G,
        &[],
    ),
    family(
        "container_memory_failures_total",
        "Cumulative count of memory allocation failures.",
        C,
        FAIL,
    ),
    family(
        "container_spec_memory_limit_bytes",
        "Memory limit for the container.",
        G,
        &[],
    ),
    family(
        "container_fs_usage_bytes",
        "Number of bytes that are consumed by the container on this filesystem.",
        G,
        DEV,
    ),
    family(
        "container_fs_inodes_usage",
        "Number of inodes used by the container's writable layer.",
        G,
        DEV,
    ),
    family(
        "container_processes",
        "Number of processes running inside the container.",
        G,
        &[],
    ),
    family(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds.",
        G,
        &[],
    ),
    family(
        "container_network_receive_bytes_total",
        "Cumulative count of bytes received",
        C,
        NET,
    ),
    family(
        "container_network_receive_packets_total",
        "Cumulative count of packets received",
        C,
        NET,
    ),
    family(
        "container_network_receive_packets_dropped_total",
        "Cumulative count of packets dropped while receiving",
        C,
        NET,
    ),
    family(
        "container_network_receive_errors_total",
        "Cumulative count of errors encountered while receiving",
        C,
        NET,
    ),
    family(
        "container_network_transmit_bytes_total",
        "Cumulative count of bytes transmitted",
        C,
        NET,
    ),
    family(
        "container_network_transmit_packets_total",
        "Cumulative count of packets transmitted",
        C,
        NET,
    ),
    family(
        "container_network_transmit_packets_dropped_total",
        "Cumulative count of packets dropped while transmitting",
        C,
        NET,
    ),
    family(
        "container_network_transmit_errors_total",
        "Cumulative count of errors encountered while transmitting",
        C,
        NET,
    ),
];

/// ListMetricDescriptors.
pub fn metric_descriptors() -> Vec<pb::MetricDescriptor> {
    FAMILIES
        .iter()
        .map(|f| pb::MetricDescriptor {
            name: f.name.to_string(),
            help: f.help.to_string(),
            label_keys: BASE.iter().chain(f.extra).map(|k| k.to_string()).collect(),
        })
        .collect()
}

/// Collects samples with one set of base labels and one timestamp.
struct Samples {
    base: [String; 3],
    ts: i64,
    out: Vec<pb::Metric>,
}

impl Samples {
    fn new(base: [String; 3], ts: i64) -> Self {
        Samples {
            base,
            ts,
            out: Vec::new(),
        }
    }

    /// Adds `name` = `v` (if known) with `extra` label values; the family must exist.
    fn add(&mut self, name: &str, extra: &[&str], v: Option<u64>) {
        let (Some(v), Some(f)) = (v, FAMILIES.iter().find(|f| f.name == name)) else {
            return;
        };
        debug_assert_eq!(f.extra.len(), extra.len(), "{name}");
        self.out.push(pb::Metric {
            name: name.to_string(),
            timestamp: self.ts,
            metric_type: f.kind as i32,
            label_values: self
                .base
                .iter()
                .cloned()
                .chain(extra.iter().map(|s| s.to_string()))
                .collect(),
            value: value(v),
        });
    }
}

/// The metrics of one container.
fn container_metrics(s: &ContainerStats) -> pb::ContainerMetrics {
    let meta = s.entry.meta();
    let image = if meta.image_name.is_empty() {
        meta.request.image.clone()
    } else {
        meta.image_name.clone()
    };
    let base = [s.entry.id().to_string(), meta.request.name.clone(), image];
    let mut m = Samples::new(base, s.timestamp_ns);
    const NS: u64 = 1_000_000_000;
    if let Some(c) = &s.cgroup.cpu {
        m.add(
            "container_cpu_usage_seconds_total",
            &[],
            Some(c.usage_ns / NS),
        );
        m.add(
            "container_cpu_user_seconds_total",
            &[],
            c.user_ns.map(|n| n / NS),
        );
        m.add(
            "container_cpu_system_seconds_total",
            &[],
            c.system_ns.map(|n| n / NS),
        );
    }
    if let Some(mem) = &s.cgroup.memory {
        m.add("container_memory_usage_bytes", &[], Some(mem.usage_bytes));
        m.add(
            "container_memory_working_set_bytes",
            &[],
            Some(mem.working_set_bytes),
        );
        m.add("container_memory_rss", &[], mem.rss_bytes);
        m.add("container_memory_cache", &[], mem.cache_bytes);
        m.add("container_memory_mapped_file", &[], mem.mapped_file_bytes);
        m.add("container_memory_swap", &[], mem.swap_bytes);
        m.add(
            "container_memory_total_active_file_bytes",
            &[],
            mem.active_file_bytes,
        );
        m.add(
            "container_memory_total_inactive_file_bytes",
            &[],
            mem.inactive_file_bytes,
        );
        let fail = "container_memory_failures_total";
        m.add(fail, &["pgfault", "container"], mem.page_faults);
        m.add(fail, &["pgmajfault", "container"], mem.major_page_faults);
        // cadvisor reports an unlimited container as 0.
        m.add(
            "container_spec_memory_limit_bytes",
            &[],
            Some(mem.limit_bytes.unwrap_or(0)),
        );
    }
    if let Some(l) = &s.writable_layer {
        let dev = l.mountpoint.display().to_string();
        m.add("container_fs_usage_bytes", &[&dev], Some(l.used_bytes));
        m.add("container_fs_inodes_usage", &[&dev], Some(l.inodes_used));
    }
    m.add("container_processes", &[], s.cgroup.pids);
    let started = s.entry.status().started_ns;
    if started > 0 {
        m.add(
            "container_start_time_seconds",
            &[],
            Some(started as u64 / NS),
        );
    }
    pb::ContainerMetrics {
        container_id: s.entry.id().to_string(),
        metrics: m.out,
    }
}

/// The metrics of one pod: its network counters (labelled with the sandbox id, no name or
/// image, as containerd does) and its containers' metrics.
pub fn sandbox_metrics(s: &SandboxStats) -> pb::PodSandboxMetrics {
    let base = [s.entry.id().to_string(), String::new(), String::new()];
    let mut m = Samples::new(base, s.timestamp_ns);
    for i in s.network.iter().flatten() {
        let n = [i.name.as_str()];
        m.add(
            "container_network_receive_bytes_total",
            &n,
            Some(i.rx_bytes),
        );
        m.add(
            "container_network_receive_packets_total",
            &n,
            Some(i.rx_packets),
        );
        m.add(
            "container_network_receive_packets_dropped_total",
            &n,
            Some(i.rx_dropped),
        );
        m.add(
            "container_network_receive_errors_total",
            &n,
            Some(i.rx_errors),
        );
        m.add(
            "container_network_transmit_bytes_total",
            &n,
            Some(i.tx_bytes),
        );
        m.add(
            "container_network_transmit_packets_total",
            &n,
            Some(i.tx_packets),
        );
        m.add(
            "container_network_transmit_packets_dropped_total",
            &n,
            Some(i.tx_dropped),
        );
        m.add(
            "container_network_transmit_errors_total",
            &n,
            Some(i.tx_errors),
        );
    }
    pb::PodSandboxMetrics {
        pod_sandbox_id: s.entry.id().to_string(),
        metrics: m.out,
        container_metrics: s.containers.iter().map(container_metrics).collect(),
    }
}
