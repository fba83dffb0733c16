//! Container and pod stats: cgroup counters, CPU rates against the previous sample, writable layer usage, pod network counters.

mod layer;
mod net;

#[cfg(test)]
mod tests;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use layer::{disk_usage, DiskUsage};
pub use net::{parse_net_dev, read_netns, Interface};

use super::service::{require_id, Runtime};
use super::state::lock;
use super::state::meta::{ContainerEntry, SandboxEntry};
use super::state::paths;
use super::state::status::{now_ns, ContainerState, SandboxState};
use super::state::table::Filter;
use crate::cgroups::{self, Cgroups};
use crate::error::{Error, Result};
use crate::oci::NamespaceMode;

/// How long a writable layer's measured usage is served before it is walked again: walking a
/// large layer costs milliseconds per call, and the kubelet asks every 10 s at most.
pub const LAYER_TTL: Duration = Duration::from_secs(2);

/// The shortest interval `usage_nano_cores` is computed over; a call closer to the previous
/// sample than this repeats that sample's rate rather than dividing noise by a tiny interval.
pub const MIN_RATE_INTERVAL: Duration = Duration::from_millis(500);

/// Usage of a container's writable layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsUsage {
    /// When it was measured (unix ns).
    pub timestamp_ns: i64,
    /// The filesystem it lives on, named as ImageFsInfo names it (the root dir).
    pub mountpoint: PathBuf,
    /// Allocated bytes.
    pub used_bytes: u64,
    /// Inodes.
    pub inodes_used: u64,
}

/// One container's stats; parts that could not be read are empty.
#[derive(Debug, Clone)]
pub struct ContainerStats {
    /// The container.
    pub entry: Arc<ContainerEntry>,
    /// When the counters were read (unix ns).
    pub timestamp_ns: i64,
    /// cgroup counters (empty for containers that are not created or running).
    pub cgroup: cgroups::Stats,
    /// CPU rate since the previous sample; `None` on the first sample.
    pub usage_nano_cores: Option<u64>,
    /// Writable layer usage.
    pub writable_layer: Option<FsUsage>,
}

/// One pod's stats.
#[derive(Debug, Clone)]
pub struct SandboxStats {
    /// The sandbox.
    pub entry: Arc<SandboxEntry>,
    /// When the counters were read (unix ns).
    pub timestamp_ns: i64,
    /// The pod cgroup's counters (its `cgroup_parent`), else the sum of its containers'.
    pub cgroup: cgroups::Stats,
    /// CPU rate since the previous sample; `None` on the first sample.
    pub usage_nano_cores: Option<u64>,
    /// Interfaces of the pod's network namespace; `None` for host-network pods and pods
    /// whose namespace is gone.
    pub network: Option<Vec<Interface>>,
    /// The stats of its created and running containers.
    pub containers: Vec<ContainerStats>,
}

/// A previous CPU reading.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Instant,
    usage_ns: u64,
    rate: Option<u64>,
}

/// What stats keep between calls: the cgroup reader, the previous CPU sample of each container
/// and pod, and the cached writable layer usage of each container.
#[derive(Debug)]
pub struct StatsState {
    cgroups: Mutex<Arc<dyn Cgroups>>,
    samples: Mutex<HashMap<String, Sample>>,
    layers: Mutex<HashMap<String, (Instant, FsUsage)>>,
}

impl StatsState {
    /// State reading this host's cgroups (detected now).
    pub fn new() -> Self {
        Self::with_cgroups(cgroups::detect())
    }

    /// State reading cgroups through `cgroups`.
    pub fn with_cgroups(cgroups: Arc<dyn Cgroups>) -> Self {
        StatsState {
            cgroups: Mutex::new(cgroups),
            samples: Mutex::new(HashMap::new()),
            layers: Mutex::new(HashMap::new()),
        }
    }

    /// The cgroup hierarchy in use (also for killing a container's cgroup at once).
    pub(super) fn reader(&self) -> Arc<dyn Cgroups> {
        lock(&self.cgroups).clone()
    }

    /// The rate of `key`'s CPU usage against its previous sample (which `usage_ns` replaces).
    fn nano_cores(&self, key: &str, at: Instant, usage_ns: u64) -> Option<u64> {
        let mut samples = lock(&self.samples);
        let rate = match samples.get(key) {
            Some(prev) if at.saturating_duration_since(prev.at) < MIN_RATE_INTERVAL => {
                return prev.rate
            }
            Some(prev) if usage_ns >= prev.usage_ns => {
                let dt = at.saturating_duration_since(prev.at).as_nanos().max(1);
                let rate = u128::from(usage_ns - prev.usage_ns) * 1_000_000_000 / dt;
                Some(u64::try_from(rate).unwrap_or(u64::MAX))
            }
            // First sample, or the counter went back (the cgroup was recreated).
            _ => None,
        };
        samples.insert(key.to_string(), Sample { at, usage_ns, rate });
        rate
    }

    /// Forgets samples and layer usage of objects not in `live`.
    fn retain(&self, live: &HashSet<String>) {
        lock(&self.samples).retain(|k, _| live.contains(k));
        lock(&self.layers).retain(|k, _| live.contains(k));
    }
}

impl Default for StatsState {
    fn default() -> Self {
        Self::new()
    }
}

/// The sample key of a pod (containers use their id).
fn pod_key(id: &str) -> String {
    format!("pod/{id}")
}

/// Whether a container has a cgroup worth reading.
fn has_cgroup(e: &ContainerEntry) -> bool {
    matches!(
        e.status().state(),
        ContainerState::Created | ContainerState::Running
    )
}

impl Runtime {
    /// Replaces the cgroup reader (tests read fabricated trees; the default is detected).
    pub fn set_cgroups(&self, cgroups: Arc<dyn Cgroups>) {
        *lock(&self.stats.cgroups) = cgroups;
    }

    /// ContainerStats: the stats of container `id` (or unique prefix); NotFound otherwise.
    pub async fn container_stats(self: &Arc<Self>, id: &str) -> Result<ContainerStats> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let mut all = self.collect_containers(vec![entry]).await?;
        all.pop()
            .ok_or_else(|| Error::internal(format!("container {id}: stats: nothing read")))
    }

    /// ListContainerStats: the stats of every container matching `filter` (its states are
    /// ignored: stats are asked by id, pod and labels).
    pub async fn list_container_stats(
        self: &Arc<Self>,
        filter: &Filter<ContainerState>,
    ) -> Result<Vec<ContainerStats>> {
        let mut filter = Filter {
            states: Vec::new(),
            ..filter.clone()
        };
        // A sandbox id prefix is resolved to the full id, as ListContainers does.
        if let Some(full) = filter.pod_id.as_deref().and_then(|p| self.sandbox(p).ok()) {
            filter.pod_id = Some(full.id().to_string());
        }
        let entries = self.list_containers(&filter);
        self.forget_departed();
        self.collect_containers(entries).await
    }

    /// PodSandboxStats: the stats of sandbox `id` (or unique prefix); NotFound otherwise.
    pub async fn sandbox_stats(self: &Arc<Self>, id: &str) -> Result<SandboxStats> {
        require_id("sandbox", id)?;
        let entry = self.sandbox(id)?;
        let mut all = self.collect_sandboxes(vec![entry]).await?;
        all.pop()
            .ok_or_else(|| Error::internal(format!("sandbox {id}: stats: nothing read")))
    }

    /// ListPodSandboxStats: the stats of every READY sandbox matching `filter` (id prefix and
    /// labels).
    pub async fn list_sandbox_stats(
        self: &Arc<Self>,
        filter: &Filter<SandboxState>,
    ) -> Result<Vec<SandboxStats>> {
        let filter = Filter {
            states: vec![SandboxState::Ready],
            ..filter.clone()
        };
        let entries = self.list_sandboxes(&filter);
        self.forget_departed();
        self.collect_sandboxes(entries).await
    }

    /// Drops kept samples of containers and pods that no longer exist.
    fn forget_departed(&self) {
        let mut live: HashSet<String> = self
            .list_containers(&Filter::default())
            .iter()
            .map(|e| e.id().to_string())
            .collect();
        live.extend(
            self.list_sandboxes(&Filter::default())
                .iter()
                .map(|e| pod_key(e.id())),
        );
        self.stats.retain(&live);
    }

    /// Reads the containers' stats off the async workers.
    async fn collect_containers(
        self: &Arc<Self>,
        entries: Vec<Arc<ContainerEntry>>,
    ) -> Result<Vec<ContainerStats>> {
        let rt = self.clone();
        tokio::task::spawn_blocking(move || {
            let reader = rt.stats.reader();
            entries
                .into_iter()
                .map(|e| rt.read_container(reader.as_ref(), e))
                .collect()
        })
        .await
        .map_err(|e| Error::internal(format!("container stats task: {e}")))
    }

    /// Reads the sandboxes' stats off the async workers.
    async fn collect_sandboxes(
        self: &Arc<Self>,
        entries: Vec<Arc<SandboxEntry>>,
    ) -> Result<Vec<SandboxStats>> {
        let rt = self.clone();
        tokio::task::spawn_blocking(move || {
            let reader = rt.stats.reader();
            entries
                .into_iter()
                .map(|e| rt.read_sandbox(reader.as_ref(), e))
                .collect()
        })
        .await
        .map_err(|e| Error::internal(format!("sandbox stats task: {e}")))
    }

    /// One container: cgroup counters (created and running only), CPU rate, layer usage.
    fn read_container(&self, reader: &dyn Cgroups, entry: Arc<ContainerEntry>) -> ContainerStats {
        let at = Instant::now();
        let timestamp_ns = now_ns();
        let cgroup = if has_cgroup(&entry) {
            cgroups::container_dir(self.config.cgroup_driver, &entry.meta().cgroups_path)
                .map(|dir| reader.stats(&dir))
                .unwrap_or_default()
        } else {
            cgroups::Stats::default()
        };
        let usage_nano_cores = cgroup
            .cpu
            .as_ref()
            .and_then(|c| self.stats.nano_cores(entry.id(), at, c.usage_ns));
        let writable_layer = self.layer_usage(entry.id());
        ContainerStats {
            entry,
            timestamp_ns,
            cgroup,
            usage_nano_cores,
            writable_layer,
        }
    }

    /// The writable layer's usage, walked at most once per [`LAYER_TTL`].
    fn layer_usage(&self, id: &str) -> Option<FsUsage> {
        if let Some((at, usage)) = lock(&self.stats.layers).get(id) {
            if at.elapsed() < LAYER_TTL {
                return Some(usage.clone());
            }
        }
        let upper = self.layout.rw_dir(id).join("upper");
        let walked = Instant::now();
        let measured = disk_usage(&upper)?;
        tracing::trace!(container = id, took = ?walked.elapsed(), "writable layer walked");
        let usage = FsUsage {
            timestamp_ns: now_ns(),
            mountpoint: self.layout.durable.clone(),
            used_bytes: measured.bytes,
            inodes_used: measured.inodes,
        };
        lock(&self.stats.layers).insert(id.to_string(), (walked, usage.clone()));
        Some(usage)
    }

    /// One pod: its cgroup (or its containers' sum), CPU rate, network counters, containers.
    fn read_sandbox(&self, reader: &dyn Cgroups, entry: Arc<SandboxEntry>) -> SandboxStats {
        let id = entry.id().to_string();
        let containers: Vec<ContainerStats> = self
            .list_containers(&Filter {
                pod_id: Some(id.clone()),
                ..Filter::default()
            })
            .into_iter()
            .filter(|e| has_cgroup(e))
            .map(|e| self.read_container(reader, e))
            .collect();
        let at = Instant::now();
        let timestamp_ns = now_ns();
        let req = &entry.meta().request;
        let mut cgroup = cgroups::parent_dir(self.config.cgroup_driver, &req.cgroup_parent)
            .map(|dir| reader.stats(&dir))
            .unwrap_or_default();
        if cgroup.is_empty() {
            // No pod cgroup of its own (no cgroup_parent, or it does not exist yet).
            for c in &containers {
                cgroup.add(&c.cgroup);
            }
        }
        let usage_nano_cores = cgroup
            .cpu
            .as_ref()
            .and_then(|c| self.stats.nano_cores(&pod_key(&id), at, c.usage_ns));
        let network = self.pod_network(&entry);
        SandboxStats {
            entry,
            timestamp_ns,
            cgroup,
            usage_nano_cores,
            network,
            containers,
        }
    }

    /// The pod's interfaces, for READY pods with a network namespace of their own.
    fn pod_network(&self, entry: &SandboxEntry) -> Option<Vec<Interface>> {
        let meta = entry.meta();
        if meta.request.network == NamespaceMode::Node
            || entry.status().state() != SandboxState::Ready
        {
            return None;
        }
        let pin = paths::ns_dir(&meta.state_dir).join("net");
        match read_netns(&pin) {
            Ok(ifs) => Some(ifs),
            Err(e) => {
                tracing::debug!(sandbox = entry.id(), "stats: {e}");
                None
            }
        }
    }
}
