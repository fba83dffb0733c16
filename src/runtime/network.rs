//! The sandbox side of pod networking: what CNI is told about a pod, attach/detach around the
//! pinned netns, and the NetworkReady / pod CIDR calls.

use std::net::IpAddr;

use std::sync::Arc;
use std::time::Duration;

use super::service::Runtime;
use super::state::meta::{SandboxEntry, SandboxMeta};
use super::state::paths;
use crate::error::{Error, Result};
use crate::network::{Bandwidth, DnsCap, NetworkStatus, PodNetwork, PortMap};
use crate::oci::NamespaceMode;

/// What CNI gets for sandbox `id`: the pinned netns, the pod's names, its hostPort mappings
/// (those with a host port, protocol lower-cased as portmap wants) and DNS config.
pub(super) fn pod_network(id: &str, meta: &SandboxMeta) -> PodNetwork {
    let req = &meta.request;
    PodNetwork {
        id: id.to_string(),
        netns: paths::ns_dir(&meta.state_dir).join("net"),
        name: req.pod.name.clone(),
        namespace: req.pod.namespace.clone(),
        uid: req.pod.uid.clone(),
        port_mappings: req
            .port_mappings
            .iter()
            .filter(|p| p.host_port > 0)
            .map(|p| PortMap {
                host_port: p.host_port,
                container_port: p.container_port,
                protocol: match p.protocol.to_ascii_lowercase() {
                    proto if proto.is_empty() => "tcp".into(),
                    proto => proto,
                },
                host_ip: p.host_ip.clone(),
            })
            .collect(),
        dns: req.dns.as_ref().map(|d| DnsCap {
            servers: d.servers.clone(),
            searches: d.searches.clone(),
            options: d.options.clone(),
        }),
        bandwidth: bandwidth(&req.annotations),
        ips: Vec::new(),
    }
}

/// Traffic shaping from the pod's `kubernetes.io/ingress-bandwidth` and
/// `kubernetes.io/egress-bandwidth` annotations (quantities in bits per second, e.g. `10M`),
/// as containerd passes it to the bandwidth plugin (burst unlimited). Unparsable values are
/// ignored with a warning.
pub(super) fn bandwidth(
    annotations: &std::collections::BTreeMap<String, String>,
) -> Option<Bandwidth> {
    let rate = |key: &str| {
        let v = annotations.get(key)?;
        let r = quantity(v);
        if r.is_none() {
            tracing::warn!("annotation {key}={v:?} is not a quantity; ignored");
        }
        r
    };
    let (ingress, egress) = (
        rate("kubernetes.io/ingress-bandwidth"),
        rate("kubernetes.io/egress-bandwidth"),
    );
    if ingress.is_none() && egress.is_none() {
        return None;
    }
    let burst = |r: Option<u64>| if r.is_some() { u64::from(u32::MAX) } else { 0 };
    Some(Bandwidth {
        ingress_rate: ingress.unwrap_or(0),
        ingress_burst: burst(ingress),
        egress_rate: egress.unwrap_or(0),
        egress_burst: burst(egress),
    })
}

/// A Kubernetes quantity without fractions: digits and an optional decimal (`k M G T P`) or
/// binary (`Ki Mi Gi Ti Pi`) suffix.
fn quantity(v: &str) -> Option<u64> {
    let v = v.trim();
    let split = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (num, suffix) = v.split_at(split);
    let n: u64 = num.parse().ok()?;
    let mult: u64 = match suffix {
        "" => 1,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "P" => 1_000_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        "Pi" => 1 << 50,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// Whether the sandbox has its own network namespace (hostNetwork pods skip CNI).
pub(super) fn own_network(meta: &SandboxMeta) -> bool {
    meta.request.network != NamespaceMode::Node
}

impl Runtime {
    /// The Status RPC's NetworkReady.
    pub fn network_status(&self) -> NetworkStatus {
        self.network.status()
    }

    /// UpdateRuntimeConfig: records the node's pod CIDR(s) for the embedded default network.
    pub fn set_pod_cidr(&self, cidr: &str) -> Result<()> {
        self.network.set_pod_cidr(cidr)
    }

    /// CNI ADD for the sandbox; its addresses (none for host network).
    pub(super) async fn attach_network(&self, id: &str, meta: &SandboxMeta) -> Result<Vec<IpAddr>> {
        if !own_network(meta) {
            return Ok(Vec::new());
        }
        let t = std::time::Instant::now();
        let a = self.network.attach(&pod_network(id, meta)).await?;
        tracing::info!(
            sandbox = %id,
            network = %a.network,
            ips = ?a.ips,
            ms = t.elapsed().as_millis(),
            "pod network attached"
        );
        Ok(a.ips)
    }

    /// CNI DEL for the sandbox (a no-op when nothing is attached), then clears the recorded
    /// addresses. Runs before the netns is released; idempotent.
    pub(super) async fn detach_network(&self, entry: &SandboxEntry) -> Result<()> {
        let meta = entry.meta();
        if !own_network(meta) {
            return Ok(());
        }
        let t = std::time::Instant::now();
        self.network.detach(&pod_network(entry.id(), meta)).await?;
        tracing::debug!(sandbox = %entry.id(), ms = t.elapsed().as_millis(), "pod network DEL done");
        let st = entry.status();
        if st.network_attached || !st.ips.is_empty() {
            entry.update(|s| {
                s.network_attached = false;
                s.ips.clear();
                Ok(())
            })?;
            tracing::info!(sandbox = %entry.id(), "pod network detached");
        }
        Ok(())
    }
}

/// The first wait of a background DEL retry, doubled after each failure up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest wait between two tries of a background DEL.
const RETRY_MAX: Duration = Duration::from_secs(30);

impl Runtime {
    /// Hands the DEL that just failed for `entry` (`why`) to the network and a background
    /// retry: the sandbox can then go at once, its netns pinned by the network until the DEL
    /// succeeds (issue 28: a failed RunPodSandbox must not keep the pod's name). The hand-over
    /// is on disk: a restart resumes the retry ([`Runtime::resume_deferred_detaches`]).
    pub(super) async fn hand_over_detach(
        self: &Arc<Self>,
        entry: &SandboxEntry,
        why: &Error,
    ) -> Result<()> {
        let pod = self
            .network
            .defer_detach(&pod_network(entry.id(), entry.meta()))
            .await?;
        tracing::warn!(
            sandbox = %entry.id(),
            pod = %entry.meta().request.pod.key(),
            "pod network teardown failed ({why}); it is retried in the background until it \
             succeeds, the netns pinned for it"
        );
        self.retry_detach_later(pod, RETRY_FIRST);
        Ok(())
    }

    /// At start: the DELs handed over before (by a failed RunPodSandbox) are tried again.
    pub(super) fn resume_deferred_detaches(self: &Arc<Self>) {
        for pod in self.network.deferred() {
            tracing::info!(sandbox = %pod.id, "recovery: resuming a pod network teardown left to a background retry");
            self.retry_detach_later(pod, Duration::ZERO);
        }
    }

    /// Tries deferred DEL `pod` after `first`, then again (waiting twice as long each time,
    /// at most [`RETRY_MAX`]) until it succeeds; each failure is logged.
    fn retry_detach_later(&self, pod: PodNetwork, first: Duration) {
        let network = self.network.clone();
        tokio::spawn(async move {
            let mut wait = first;
            for attempt in 1u32.. {
                tokio::time::sleep(wait).await;
                wait = (wait * 2).clamp(RETRY_FIRST, RETRY_MAX);
                match network.retry_detach(&pod).await {
                    Ok(()) => {
                        tracing::info!(sandbox = %pod.id, attempt, "deferred pod network teardown done");
                        return;
                    }
                    Err(e) => tracing::warn!(
                        sandbox = %pod.id,
                        attempt,
                        retry_in_s = wait.as_secs(),
                        "deferred pod network teardown: {e}"
                    ),
                }
            }
        });
    }
}

impl Runtime {
    /// After recovery: tells the network which sandboxes are still attached (READY, own
    /// network), so it releases what any other holds and rebuilds its shared state.
    pub(super) async fn reconcile_network(&self) {
        let attached: Vec<PodNetwork> = self
            .state
            .sandboxes
            .list(&Default::default())
            .into_iter()
            .filter(|e| {
                let st = e.status();
                st.state() == super::state::status::SandboxState::Ready
                    && st.network_attached
                    && own_network(e.meta())
            })
            .map(|e| pod_network(e.id(), e.meta()))
            .collect();
        if let Err(e) = self.network.reconcile(&attached).await {
            tracing::warn!("recovery: pod network: {e}");
        }
    }
}
