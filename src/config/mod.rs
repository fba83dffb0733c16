//! Daemon configuration: TOML file (`/etc/bosun/config.toml`) with working defaults, overridable by flags.

pub mod cidr;
pub mod eviction;
pub mod image;
pub mod network;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod registry;
pub mod stream;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use crate::cgroups::CgroupDriver;
pub use image::ImageConfig;
pub use network::NetworkConfig;
pub use node::NodeConfig;
pub use pod::PodConfig;
pub use registry::RegistryConfig;
pub use stream::StreamConfig;

/// Where the daemon looks for its config when `--config` is not given.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/bosun/config.toml";
/// The default CRI socket.
pub const DEFAULT_SOCKET: &str = "/run/bosun/bosun.sock";
/// The default pod `/dev/shm` size (what Docker and containerd use).
pub const DEFAULT_SHM_SIZE: u64 = 64 << 20;

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
    pub registry: RegistryConfig,
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
            shm_size: DEFAULT_SHM_SIZE,
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
