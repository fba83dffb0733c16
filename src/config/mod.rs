//! The daemon's configuration: the TOML file decoded, then checked once at load into the typed values every room takes as they are.

pub mod cidr;
pub mod eviction;
pub mod image;
pub mod keys;
pub mod network;
pub mod node;
pub mod pod;
pub mod quantity;
pub mod registry;
pub mod runtimes;
pub mod stream;

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub use crate::cgroups::CgroupDriver;
pub use image::ImageConfig;
pub use network::NetworkConfig;
pub use node::{NodeConfig, NodeKeys};
pub use pod::PodConfig;
pub use registry::RegistryConfig;
pub use runtimes::{RuntimeHandlerConfig, DEFAULT_HANDLER};
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

/// Every key of the config file, `N` being the `[node]` section: [`NodeKeys`] as decoded (a
/// [`ConfigFile`]), [`NodeConfig`] once checked (a [`Config`]). Every key is optional.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Sections<N> {
    /// The CRI unix socket (mode 0660).
    pub socket: PathBuf,
    /// More sockets serving the same CRI and bosun API, made like `socket`: containerd's
    /// `/run/containerd/containerd.sock` for kubeadm configs and node scripts that name it.
    pub extra_sockets: Vec<PathBuf>,
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
    /// Runtime handlers (`[runtimes.<name>]`), on top of the built-in `runc` and `crun`.
    pub runtimes: std::collections::BTreeMap<String, RuntimeHandlerConfig>,
    /// Streaming server.
    pub stream: StreamConfig,
    /// Standalone pod supervisor.
    pub pod: PodConfig,
    /// Node resources: reservations, eviction, pod cgroups, priority classes.
    pub node: N,
}

/// The config file as decoded: every key known, no value checked yet. The daemon's flags
/// are applied to it before [`ConfigFile::check`].
pub type ConfigFile = Sections<NodeKeys>;

/// The daemon's configuration, checked (see [`ConfigFile::check`]): what every room takes.
pub type Config = Sections<NodeConfig>;

impl<N: Default> Default for Sections<N> {
    fn default() -> Self {
        Sections {
            socket: PathBuf::from(DEFAULT_SOCKET),
            extra_sockets: Vec::new(),
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
            runtimes: Default::default(),
            stream: StreamConfig::default(),
            pod: PodConfig::default(),
            node: N::default(),
        }
    }
}

impl ConfigFile {
    /// Decodes TOML text: every key is optional, an unknown key is refused with its name.
    /// Nothing is checked yet.
    pub fn parse(text: &str) -> Result<ConfigFile> {
        toml::from_str(text).map_err(|e| Error::invalid(e.to_string()))
    }

    /// Reads and decodes `path`; a missing file at the default path means defaults, a missing
    /// explicit file is an error. Errors name the file.
    pub fn read(path: Option<&Path>) -> Result<ConfigFile> {
        let (path, explicit) = match path {
            Some(p) => (p.to_path_buf(), true),
            None => (PathBuf::from(DEFAULT_CONFIG_PATH), false),
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                Self::parse(&text).map_err(|e| e.context(format!("config {}", path.display())))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !explicit => {
                Ok(ConfigFile::default())
            }
            Err(e) => Err(Error::invalid(format!("config {}: {e}", path.display()))),
        }
    }

    /// Checks every value that needs nothing but the config, and parses `[node]` into typed
    /// values; an error names the key and what it may be. Touches nothing on the host (see
    /// [`Config::check_host`] for what does).
    pub fn check(self) -> Result<Config> {
        crate::cgroups::path::check_parent(self.cgroup_driver, &self.default_cgroup_parent)
            .map_err(|e| Error::invalid(format!("default_cgroup_parent {e}")))?;
        check_metrics_address(&self.metrics_address)?;
        check_extra_sockets(&self.socket, &self.extra_sockets)?;
        self.network.check()?;
        self.registry.check()?;
        runtimes::resolve(&self.runtimes, &self.runtime, &self.state)?;
        let node = self.node.check()?;
        Ok(Sections {
            socket: self.socket,
            extra_sockets: self.extra_sockets,
            root: self.root,
            state: self.state,
            runtime: self.runtime,
            cgroup_driver: self.cgroup_driver,
            log_level: self.log_level,
            log_format: self.log_format,
            shm_size: self.shm_size,
            default_cgroup_parent: self.default_cgroup_parent,
            metrics_address: self.metrics_address,
            image: self.image,
            registry: self.registry,
            network: self.network,
            runtimes: self.runtimes,
            stream: self.stream,
            pod: self.pod,
            node,
        })
    }
}

/// `metrics_address` is empty or `host:port`, what binding it needs before any name lookup
/// (the port a number, 0 for any free one).
fn check_metrics_address(address: &str) -> Result<()> {
    if address.is_empty() {
        return Ok(());
    }
    match address.rsplit_once(':') {
        Some((_, port)) if port.parse::<u16>().is_ok() => Ok(()),
        _ => Err(Error::invalid(format!(
            "metrics_address {:?}: not host:port (e.g. \"127.0.0.1:9090\"; port 0: any free \
             port; empty: off)",
            crate::error::echo(address)
        ))),
    }
}

/// Each of `extra` is an absolute path, once, and not `socket` itself.
fn check_extra_sockets(socket: &Path, extra: &[PathBuf]) -> Result<()> {
    for (i, p) in extra.iter().enumerate() {
        let why = if !p.is_absolute() {
            "is not an absolute path"
        } else if p == socket {
            "is the main socket"
        } else if extra[..i].contains(p) {
            "is listed twice"
        } else {
            continue;
        };
        return Err(Error::invalid(format!(
            "extra_sockets: {} {why} (e.g. [\"/run/containerd/containerd.sock\"])",
            p.display()
        )));
    }
    Ok(())
}

/// Exists while systemd is the init system (sd_booted(3)).
const SYSTEMD_RUNNING: &str = "/run/systemd/system";

impl Config {
    /// Reads `path` (see [`ConfigFile::read`]), lets `edit` change the decoded keys (the
    /// daemon's flags), then checks them (see [`ConfigFile::check`]); errors name the file.
    pub fn load(path: Option<&Path>, edit: impl FnOnce(&mut ConfigFile)) -> Result<Config> {
        let mut file = ConfigFile::read(path)?;
        edit(&mut file);
        file.check().map_err(|e| {
            let path = path.unwrap_or(Path::new(DEFAULT_CONFIG_PATH));
            e.context(format!("config {}", path.display()))
        })
    }

    /// Decodes and checks TOML text without touching the host: how the daemon reads its file,
    /// for anything that must read a config as it does (a documentation example, a test).
    pub fn parse(text: &str) -> Result<Config> {
        ConfigFile::parse(text)?.check()
    }

    /// Checks what needs the host, before the daemon takes a lock: the systemd driver needs
    /// systemd as init (runc creates each container's scope through it), and every registry
    /// CA file must be readable PEM.
    pub fn check_host(&self) -> Result<()> {
        if self.cgroup_driver == CgroupDriver::Systemd && !Path::new(SYSTEMD_RUNNING).exists() {
            return Err(Error::invalid(format!(
                "cgroup_driver = \"systemd\" needs systemd as init ({SYSTEMD_RUNNING} is missing); \
                 use cgroup_driver = \"cgroupfs\" on this host"
            )));
        }
        self.registry.check_host()
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

    /// The error `Config::parse` gives `text`, as a string.
    fn refused(text: &str) -> String {
        Config::parse(text).expect_err(text).to_string()
    }

    #[test]
    fn a_bad_node_quantity_is_refused_at_load_naming_the_key() {
        let e = refused("[node]\nkube_reserved = { memory = \"lots\" }\n");
        assert!(e.contains("[node] kube_reserved.memory"), "{e}");
        assert!(e.contains("not a non-negative quantity"), "{e}");
        for (text, key) in [
            (
                "system_reserved = { gpu = \"1\" }",
                "[node] system_reserved",
            ),
            (
                "eviction_hard = { \"memory.available\" = \"lots\" }",
                "[node] eviction_hard",
            ),
            (
                "eviction_soft = { \"memory.available\" = \"1Gi\" }",
                "[node] eviction_soft",
            ),
            (
                "eviction_minimum_reclaim = { \"nodefs.available\" = \"0%\" }",
                "[node] eviction_minimum_reclaim",
            ),
            (
                "housekeeping_interval = \"10\"",
                "[node] housekeeping_interval",
            ),
            (
                "housekeeping_interval = \"1ms\"",
                "[node] housekeeping_interval",
            ),
            (
                "eviction_pressure_transition_period = \"soon\"",
                "[node] eviction_pressure_transition_period",
            ),
            (
                "eviction_max_pod_grace_period = -1",
                "[node] eviction_max_pod_grace_period",
            ),
            ("cgroup_root = \"relative\"", "[node] cgroup_root"),
        ] {
            let e = refused(&format!("[node]\n{text}\n"));
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn node_keys_are_typed_at_load_and_shown_as_written() {
        let c = Config::parse(
            "[node]\nsystem_reserved = { cpu = \"500m\", memory = \"1Gi\" }\n\
             eviction_hard = { \"memory.available\" = \"200Mi\" }\n\
             eviction_max_pod_grace_period = 30\nhousekeeping_interval = \"1m30s\"\n\
             cgroup_root = \"test-node.slice\"\nenforce_node_allocatable = []\n",
        )
        .expect("parse");
        let node = &c.node;
        assert_eq!(node.system_reserved.cpu_milli, 500);
        assert_eq!(node.system_reserved.memory, 1 << 30);
        assert_eq!(node.kube_reserved, node::Reserved::default());
        assert_eq!(
            node.eviction.len(),
            1,
            "no allocatable copy: {:?}",
            node.eviction
        );
        assert_eq!(
            node.eviction[0].value,
            eviction::Value::Quantity((200u64 << 20) as f64)
        );
        assert_eq!(
            node.eviction_max_pod_grace_period,
            Some(std::time::Duration::from_secs(30))
        );
        assert_eq!(
            node.housekeeping_interval,
            std::time::Duration::from_secs(90)
        );
        assert_eq!(node.cgroup_root, ["test", "node"]);
        assert!(!node.enforce_pods_allocatable);
        assert_eq!(Config::default().node.eviction_max_pod_grace_period, None);
        let shown = c.to_toml();
        assert!(
            shown.contains("\"500m\"") && shown.contains("\"1m30s\""),
            "{shown}"
        );
        assert_eq!(Config::parse(&shown).expect("round trip"), c);
    }

    #[test]
    fn a_bad_cgroup_driver_or_parent_is_refused_at_load() {
        let e = refused("cgroup_driver = \"cgroupfss\"\n");
        assert!(e.contains("cgroup_driver") && e.contains("cgroupfs"), "{e}");
        let e = refused("cgroup_driver = \"systemd\"\ndefault_cgroup_parent = \"/bosun\"\n");
        assert!(e.contains("default_cgroup_parent"), "{e}");
        let e = refused("default_cgroup_parent = \"bosun.slice\"\n");
        assert!(e.contains("default_cgroup_parent"), "{e}");
        Config::parse("cgroup_driver = \"systemd\"\ndefault_cgroup_parent = \"bosun.slice\"\n")
            .expect("a slice suits systemd");
    }

    #[test]
    fn flags_are_checked_with_the_file_and_errors_name_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("config.toml");
        std::fs::write(&path, "default_cgroup_parent = \"/bosun\"\n").expect("write");
        Config::load(Some(&path), |_| {}).expect("cgroupfs and a path");
        let e = Config::load(Some(&path), |c| c.cgroup_driver = CgroupDriver::Systemd)
            .expect_err("--cgroup-driver systemd and a cgroupfs path")
            .to_string();
        assert!(
            e.contains("config.toml") && e.contains("default_cgroup_parent"),
            "{e}"
        );
        let missing = dir.path().join("missing.toml");
        assert!(
            Config::load(Some(&missing), |_| {}).is_err(),
            "named: must exist"
        );
    }

    #[test]
    fn the_systemd_driver_needs_systemd_as_init() {
        let c = Config {
            cgroup_driver: CgroupDriver::Systemd,
            default_cgroup_parent: "bosun.slice".into(),
            ..Config::default()
        };
        match c.check_host() {
            Ok(()) => assert!(Path::new(SYSTEMD_RUNNING).exists()),
            Err(e) => {
                assert!(!Path::new(SYSTEMD_RUNNING).exists(), "{e}");
                assert!(e.to_string().contains("needs systemd as init"), "{e}");
            }
        }
        Config::default()
            .check_host()
            .expect("cgroupfs needs nothing");
    }

    #[test]
    fn extra_sockets_are_absolute_distinct_paths() {
        let c = Config::parse("extra_sockets = [\"/run/containerd/containerd.sock\"]\n")
            .expect("parse");
        assert_eq!(
            c.extra_sockets,
            [PathBuf::from("/run/containerd/containerd.sock")]
        );
        assert!(Config::default().extra_sockets.is_empty());
        for (text, why) in [
            ("extra_sockets = [\"run/x.sock\"]", "not an absolute path"),
            (
                "extra_sockets = [\"/run/bosun/bosun.sock\"]",
                "is the main socket",
            ),
            ("extra_sockets = [\"/a.sock\", \"/a.sock\"]", "listed twice"),
        ] {
            let e = refused(text);
            assert!(
                e.contains("extra_sockets") && e.contains(why),
                "{text}: {e}"
            );
        }
    }

    #[test]
    fn a_bad_metrics_address_is_refused_at_load() {
        for ok in ["", "127.0.0.1:0", "[::1]:9090", "localhost:9090"] {
            Config::parse(&format!("metrics_address = {ok:?}\n")).expect(ok);
        }
        for bad in ["localhost", "127.0.0.1:port", "127.0.0.1:70000"] {
            let e = refused(&format!("metrics_address = {bad:?}\n"));
            assert!(
                e.contains("metrics_address") && e.contains("host:port"),
                "{e}"
            );
        }
    }

    #[test]
    fn bad_network_keys_are_refused_at_load() {
        for (text, key) in [
            ("subnet = \"nope\"", "network.subnet"),
            ("subnet = \"10.0.0.0/24,10.1.0.0/24\"", "network.subnet"),
            ("bridge = \"a-very-long-bridge-name\"", "network.bridge"),
            ("name = \"a b\"", "network.name"),
        ] {
            let e = refused(&format!("[network]\n{text}\n"));
            assert!(e.contains(key), "{text}: {e}");
        }
    }

    #[test]
    fn registry_mirrors_are_checked_at_load_and_ca_files_on_the_host() {
        let e = refused("[registry.hosts.\"docker.io\"]\nmirrors = [\"ftp://m\"]\n");
        assert!(e.starts_with("registry docker.io: mirror"), "{e}");
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        let text = format!("[registry.hosts.\"r.example:5000\"]\nca_file = {ca:?}\n");
        let c = Config::parse(&text).expect("the file is read on the host step");
        let e = c.check_host().expect_err("missing CA file").to_string();
        assert!(
            e.contains("[registry.hosts.\"r.example:5000\"] ca_file") && e.contains("ca.pem"),
            "{e}"
        );
        std::fs::write(&ca, "").expect("write");
        c.check_host().expect("a readable bundle");
    }
}
