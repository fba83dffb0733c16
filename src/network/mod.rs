//! Pod networking behind the [`Network`] trait: CNI plugins (real) and a fake for unit tests.
//!
//! [`Cni`] loads the network config from the conf dir (lowest file name wins, reloaded when the
//! files change) and runs the plugins as child processes per the CNI spec; what a sandbox was
//! attached with is recorded on disk before the first ADD, so DEL runs with the same config
//! after a restart and exactly until it succeeds. When the dir holds no config file, pods get
//! bosun's embedded network ([`native`]), made in-process over netlink.

mod cni;
pub mod conf;
mod deferred;
pub mod fake;
pub mod firewall;
pub mod invoke;
pub mod native;
pub mod orphans;
pub mod result;

#[cfg(test)]
mod cni_tests;

use std::net::IpAddr;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::Result;

pub use cni::Cni;
pub use fake::FakeNetwork;

/// The interface name pods get (CNI_IFNAME).
pub const POD_IFNAME: &str = "eth0";

/// One port mapping as the portmap plugin reads it from `runtimeConfig.portMappings`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PortMap {
    /// Port on the host.
    pub host_port: i32,
    /// Port in the pod.
    pub container_port: i32,
    /// `tcp`, `udp` or `sctp` (lower case).
    pub protocol: String,
    /// Host address to bind (omitted: all).
    #[serde(rename = "hostIP", default, skip_serializing_if = "String::is_empty")]
    pub host_ip: String,
}

/// `runtimeConfig.dns`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DnsCap {
    /// Name servers.
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// resolv.conf options.
    pub options: Vec<String>,
}

/// `runtimeConfig.bandwidth` (bits per second and bits).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bandwidth {
    /// Ingress rate limit.
    pub ingress_rate: u64,
    /// Ingress burst.
    pub ingress_burst: u64,
    /// Egress rate limit.
    pub egress_rate: u64,
    /// Egress burst.
    pub egress_burst: u64,
}

/// What a sandbox's network is set up from (also kept on disk with a deferred DEL).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PodNetwork {
    /// The sandbox id (CNI_CONTAINERID, K8S_POD_INFRA_CONTAINER_ID).
    pub id: String,
    /// The pinned network namespace (may be gone at DEL).
    pub netns: PathBuf,
    /// Pod name.
    pub name: String,
    /// Pod namespace.
    pub namespace: String,
    /// Pod uid.
    pub uid: String,
    /// hostPort mappings (capability `portMappings`).
    pub port_mappings: Vec<PortMap>,
    /// The pod's DNS config (capability `dns`).
    pub dns: Option<DnsCap>,
    /// Traffic shaping (capability `bandwidth`).
    pub bandwidth: Option<Bandwidth>,
    /// Requested addresses (capability `ips`).
    pub ips: Vec<String>,
}

/// The outcome of a successful attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attachment {
    /// The network's name.
    pub network: String,
    /// The pod's addresses, IPv4 first.
    pub ips: Vec<IpAddr>,
}

/// Whether pods can be networked now (the Status RPC's NetworkReady).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkStatus {
    /// Usable.
    pub ready: bool,
    /// The network's name (when the config could be read).
    pub name: String,
    /// Why not (empty when ready).
    pub reason: String,
    /// Detail: where the config comes from, or what is wrong with it (names the file/plugin).
    pub message: String,
}

/// The reason NetworkReady is false (what containerd and CRI-O say).
pub const REASON_NOT_READY: &str = "NetworkPluginNotReady";

/// Pod networking (DESIGN rule 3): the real CNI plugins or a fake.
///
/// Calls for different sandboxes run concurrently; no implementation holds a global lock
/// while a plugin runs.
#[tonic::async_trait]
pub trait Network: Send + Sync {
    /// Whether the configured network is usable.
    fn status(&self) -> NetworkStatus;
    /// CNI ADD for `pod`. On error the caller runs [`Network::detach`] (what was set up
    /// before the failing plugin is undone there).
    async fn attach(&self, pod: &PodNetwork) -> Result<Attachment>;
    /// CNI DEL for `pod` with the config it was attached with; a no-op when it was never
    /// attached, already detached, or its DEL was handed over ([`Network::defer_detach`]).
    /// Idempotent.
    async fn detach(&self, pod: &PodNetwork) -> Result<()>;
    /// Takes over the DEL of `pod` after [`Network::detach`] failed, for a sandbox that goes
    /// away now (a failed RunPodSandbox): pins its netns in the network's own directory and
    /// records the hand-over on disk. Returns `pod` as [`Network::retry_detach`] must be
    /// given it (its netns the pin, or empty when the netns was already gone).
    async fn defer_detach(&self, pod: &PodNetwork) -> Result<PodNetwork>;
    /// The DELs handed over and not done yet (after a restart: to try again).
    fn deferred(&self) -> Vec<PodNetwork>;
    /// One try of a handed-over DEL; once it succeeds its record and the pin are gone.
    async fn retry_detach(&self, pod: &PodNetwork) -> Result<()>;
    /// At start, before any DEL of recovery: plugin calls a killed daemon left running are
    /// killed (they would race recovery's DEL of the same sandbox), leftovers of interrupted
    /// writes removed. Never fails; problems are logged.
    async fn recover(&self) {}
    /// CNI CHECK for `pod` (where the config's version allows it).
    async fn check(&self, pod: &PodNetwork) -> Result<()>;
    /// Records the node's pod CIDR(s) (UpdateRuntimeConfig; comma-separated); the embedded
    /// default network uses them as its subnets.
    fn set_pod_cidr(&self, cidr: &str) -> Result<()>;
    /// Called once after recovery with every sandbox that is still attached: what the network
    /// holds for any other sandbox is released, and its shared state (the embedded network's
    /// nftables table) is rebuilt from these.
    async fn reconcile(&self, _attached: &[PodNetwork]) -> Result<()> {
        Ok(())
    }
}
