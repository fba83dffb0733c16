//! Daemon configuration: TOML file (`/etc/bosun/config.toml`) with working defaults, overridable by flags.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Where the daemon looks for its config when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bosun/config.toml";
/// The default CRI socket.
pub const DEFAULT_SOCKET: &str = "/run/bosun/bosun.sock";

/// How cgroups are named and managed; reported to the kubelet by the RuntimeConfig RPC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum CgroupDriver {
    /// Plain cgroupfs paths (the default: no systemd needed).
    #[default]
    Cgroupfs,
    /// systemd slices and scopes.
    Systemd,
}

/// Log output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// Image store settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ImageConfig {
    /// Largest uncompressed layer accepted (bytes).
    pub max_layer_bytes: u64,
    /// Most tar entries accepted in one layer.
    pub max_layer_entries: u64,
    /// Layers downloaded at once per pull.
    pub max_concurrent_downloads: usize,
}

impl Default for ImageConfig {
    fn default() -> Self {
        ImageConfig {
            max_layer_bytes: 64 << 30,
            max_layer_entries: 2_000_000,
            max_concurrent_downloads: 3,
        }
    }
}

/// Pod networking: where CNI configs and plugins are, and bosun's embedded default network
/// (used when the conf dir holds no config file).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// CNI config directory (`.conflist`, `.conf`, `.json`; the lowest file name wins).
    pub conf_dir: PathBuf,
    /// Directories searched, in order, for plugin binaries.
    pub bin_dirs: Vec<PathBuf>,
    /// Longest a single plugin call may run before it is killed (seconds).
    pub plugin_timeout_secs: u64,
    /// Embedded default network: its name.
    pub name: String,
    /// Embedded default network: the bridge's name.
    pub bridge: String,
    /// Embedded default network: the pod subnet(s), comma-separated (`10.86.0.0/16` or
    /// `10.86.0.0/16,fd86::/64`). A pod CIDR set by UpdateRuntimeConfig replaces it.
    pub subnet: String,
    /// Embedded default network: host-local IPAM's lease directory.
    pub data_dir: PathBuf,
    /// Embedded default network: masquerade traffic leaving the pod subnet (bridge `ipMasq`).
    pub masquerade: bool,
    /// Embedded default network: give pods a default route via the bridge
    /// (`isDefaultGateway`); without it pods reach only their subnet and the host.
    pub default_route: bool,
}

impl Default for NetworkConfig {
    fn default() -> Self {
        NetworkConfig {
            conf_dir: PathBuf::from("/etc/cni/net.d"),
            bin_dirs: vec![PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
            plugin_timeout_secs: 60,
            name: "bosun".to_string(),
            bridge: "bosun0".to_string(),
            subnet: "10.86.0.0/16".to_string(),
            data_dir: PathBuf::from("/var/lib/cni/networks"),
            masquerade: true,
            default_route: true,
        }
    }
}

/// Streaming server (exec/attach/port-forward URLs) settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Address the streaming HTTP server binds; port 0 picks an ephemeral port (containerd's
    /// default). The URLs handed to clients name this address (loopback for a wildcard).
    pub address: std::net::SocketAddr,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}

/// Standalone pod supervisor settings (`bosun pod apply`, static pods).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PodConfig {
    /// Static pods: every Pod manifest in this directory runs while its file exists (added,
    /// changed or removed files create, replace or delete pods). Empty (the default): off.
    pub manifest_dir: PathBuf,
    /// Where container logs go: `<log_dir>/<namespace>_<name>_<uid>/<container>/<restart>.log`.
    pub log_dir: PathBuf,
    /// ConfigMaps for volumes and env: `<configmap_dir>/<namespace>/<name>/<key>` files.
    pub configmap_dir: PathBuf,
    /// Secrets for volumes and env: `<secret_dir>/<namespace>/<name>/<key>` files.
    pub secret_dir: PathBuf,
    /// Restart back-off cap in seconds (the kubelet's maxContainerRestartPeriod, 1–300).
    pub backoff_max_secs: u64,
    /// First restart back-off in seconds (the kubelet's 10; never above the cap).
    pub backoff_initial_secs: u64,
}

impl Default for PodConfig {
    fn default() -> Self {
        PodConfig {
            manifest_dir: PathBuf::new(),
            log_dir: PathBuf::from("/var/log/pods"),
            configmap_dir: PathBuf::from("/etc/bosun/configmaps"),
            secret_dir: PathBuf::from("/etc/bosun/secrets"),
            backoff_max_secs: 300,
            backoff_initial_secs: 10,
        }
    }
}

/// Standalone node resources (issue 14): reservations, eviction thresholds, the pod cgroup
/// hierarchy and priority classes, with the kubelet's names and defaults. Quantities are
/// Kubernetes quantity strings; signals and thresholds as the kubelet's `evictionHard` map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NodeConfig {
    /// Resources kept for the OS (`cpu`, `memory`, `ephemeral-storage`, `pid`).
    pub system_reserved: BTreeMap<String, String>,
    /// Resources kept for the node's own daemons (the same keys).
    pub kube_reserved: BTreeMap<String, String>,
    /// Hard eviction thresholds by signal (`memory.available = "100Mi"`, `nodefs.available =
    /// "10%"`); the kubelet's defaults when left out. An empty map turns them all off.
    pub eviction_hard: Option<BTreeMap<String, String>>,
    /// Soft eviction thresholds by signal; each needs a grace in `eviction_soft_grace_period`.
    pub eviction_soft: BTreeMap<String, String>,
    /// How long a soft threshold must hold before pods are evicted (`"1m30s"`).
    pub eviction_soft_grace_period: BTreeMap<String, String>,
    /// The most grace (seconds) a pod evicted for a soft threshold gets; 0: its own.
    pub eviction_max_pod_grace_period: i64,
    /// What each eviction must reclaim beyond its threshold, by signal (`"500Mi"`, `"5%"`).
    pub eviction_minimum_reclaim: BTreeMap<String, String>,
    /// How long a pressure condition stays True after its threshold last held (`"5m"`).
    pub eviction_pressure_transition_period: String,
    /// How often node signals are read (the kubelet's housekeeping interval, `"10s"`).
    pub housekeeping_interval: String,
    /// Most pods this node runs at once (the kubelet's maxPods).
    pub max_pods: u32,
    /// Where the `kubepods` hierarchy goes: a cgroupfs path (`/bosun`: `/bosun/kubepods`; `/`:
    /// `/kubepods`, the kubelet's) or a systemd slice (`/bosun`: `bosun-kubepods.slice`). Not
    /// `/` by default: a kubelet using bosun over CRI on the same node owns `/kubepods`.
    pub cgroup_root: String,
    /// Put supervised pods in per-QoS and per-pod cgroups (the kubelet's cgroupsPerQOS).
    pub cgroups_per_qos: bool,
    /// Enforce allocatable on the `kubepods` cgroup (`["pods"]`, the kubelet's default; `[]`: off).
    pub enforce_node_allocatable: Vec<String>,
    /// Most processes per pod (`pids.max` of the pod cgroup); -1: unlimited.
    pub pod_pids_limit: i64,
    /// PriorityClass manifests (YAML/JSON, `kind: PriorityClass`), read when pods are applied.
    pub priority_class_dir: PathBuf,
}

impl Default for NodeConfig {
    fn default() -> Self {
        NodeConfig {
            system_reserved: BTreeMap::new(),
            kube_reserved: BTreeMap::new(),
            eviction_hard: None,
            eviction_soft: BTreeMap::new(),
            eviction_soft_grace_period: BTreeMap::new(),
            eviction_max_pod_grace_period: 0,
            eviction_minimum_reclaim: BTreeMap::new(),
            eviction_pressure_transition_period: "5m".to_string(),
            housekeeping_interval: "10s".to_string(),
            max_pods: 110,
            cgroup_root: "/bosun".to_string(),
            cgroups_per_qos: true,
            enforce_node_allocatable: vec!["pods".to_string()],
            pod_pids_limit: -1,
            priority_class_dir: PathBuf::from("/etc/bosun/priorityclasses"),
        }
    }
}

/// The whole daemon configuration. Every key is optional in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// The CRI unix socket (mode 0660).
    pub socket: PathBuf,
    /// Persistent data: images, snapshots, container state.
    pub root: PathBuf,
    /// Volatile state: lock file, pinned namespaces.
    pub state: PathBuf,
    /// The OCI runtime binary (a bare name is looked up in PATH once, when the daemon starts).
    pub runtime: PathBuf,
    /// cgroup driver reported to the kubelet and used for container cgroups.
    pub cgroup_driver: CgroupDriver,
    /// tracing filter (`info`, `debug`, `bosun=debug,info`).
    pub log_level: String,
    /// Log format.
    pub log_format: LogFormat,
    /// Size in bytes of each pod's shared `/dev/shm` tmpfs.
    pub shm_size: u64,
    /// cgroup parent of containers whose pod names none (cgroupfs path or systemd slice);
    /// empty: the driver's default (`/bosun` for cgroupfs, `bosun.slice` for systemd).
    pub default_cgroup_parent: String,
    /// `host:port` of the Prometheus `/metrics` endpoint; empty (the default): not served.
    /// Port 0 picks a free port; the bound address is written to `<state>/metrics.address`.
    pub metrics_address: String,
    /// Image store limits.
    pub image: ImageConfig,
    /// Registry hosts: mirrors, plain HTTP, CA files.
    pub registry: crate::image::registry::RegistryConfig,
    /// Pod networking (CNI).
    pub network: NetworkConfig,
    /// Streaming server.
    pub stream: StreamConfig,
    /// Standalone pod supervisor.
    pub pod: PodConfig,
    /// Node resources: reservations, eviction, pod cgroups, priority classes.
    pub node: NodeConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: PathBuf::from(DEFAULT_SOCKET),
            root: PathBuf::from("/var/lib/bosun"),
            state: PathBuf::from("/run/bosun"),
            runtime: PathBuf::from("runc"),
            cgroup_driver: CgroupDriver::default(),
            log_level: "info".to_string(),
            log_format: LogFormat::default(),
            shm_size: crate::sandbox::DEFAULT_SHM_SIZE,
            default_cgroup_parent: String::new(),
            metrics_address: String::new(),
            image: ImageConfig::default(),
            registry: Default::default(),
            network: NetworkConfig::default(),
            stream: StreamConfig::default(),
            pod: PodConfig::default(),
            node: NodeConfig::default(),
        }
    }
}

impl Config {
    /// Loads `path`; a missing file at the default path means defaults, a missing explicit file
    /// is an error.
    pub fn load(path: Option<&Path>) -> Result<Config> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                Self::parse(&text).map_err(|e| e.context(format!("config {}", path.display())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(Config::default())
            }
            Err(e) => Err(Error::invalid(format!("config {}: {e}", path.display()))),
        }
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<Config> {
        toml::from_str(text).map_err(|e| Error::invalid(e.to_string()))
    }

    /// The effective config as TOML, for `Status` verbose info and `bosun config`.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("").expect("parse");
        assert_eq!(c, Config::default());
        assert_eq!(c.socket, PathBuf::from("/run/bosun/bosun.sock"));
    }

    #[test]
    fn keys_override_and_unknown_keys_are_refused() {
        let c = Config::parse(
            "root = \"/tmp/r\"\ncgroup_driver = \"systemd\"\n[image]\nmax_layer_entries = 5\n",
        )
        .expect("parse");
        assert_eq!(c.root, PathBuf::from("/tmp/r"));
        assert_eq!(c.cgroup_driver, CgroupDriver::Systemd);
        assert_eq!(c.image.max_layer_entries, 5);
        let c = Config::parse("[stream]\naddress = \"0.0.0.0:10010\"\n").expect("parse");
        assert_eq!(c.stream.address.port(), 10010);
        assert_eq!(Config::default().stream.address.to_string(), "127.0.0.1:0");
        let err = Config::parse("sockett = \"/x\"").expect_err("typo must be refused");
        assert!(err.to_string().contains("sockett"), "{err}");
    }

    #[test]
    fn network_keys_parse_and_default() {
        let c = Config::parse("").expect("parse");
        assert_eq!(c.network.bridge, "bosun0");
        assert!(
            c.network.masquerade,
            "containerd users expect ipMasq on by default"
        );
        let c = Config::parse(
            "[network]\nbridge = \"bt0\"\nsubnet = \"10.9.0.0/24\"\nmasquerade = false\n",
        )
        .expect("parse");
        assert_eq!(c.network.bridge, "bt0");
        assert_eq!(c.network.subnet, "10.9.0.0/24");
        assert!(!c.network.masquerade);
        assert_eq!(c.network.conf_dir, PathBuf::from("/etc/cni/net.d"));
        let err = Config::parse("[network]\nbrige = \"x\"").expect_err("typo");
        assert!(err.to_string().contains("brige"), "{err}");
    }

    #[test]
    fn defaults_round_trip_through_toml() {
        let c = Config::default();
        assert_eq!(Config::parse(&c.to_toml()).expect("parse"), c);
    }
}
