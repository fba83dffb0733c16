//! `[network]`: where CNI configs and plugins are, and bosun's embedded default network.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::cidr::{self, Cidr};
use crate::error::{Error, Result};

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

impl NetworkConfig {
    /// Checks the embedded network's keys (name, bridge, subnet) at load, even while a CNI
    /// config file makes another network the active one: the embedded plan is still what
    /// tears down and recovers pods it attached.
    pub fn check(&self) -> Result<()> {
        self.check_names()?;
        self.subnets().map(drop)
    }

    /// Checks `name` (also the nftables table's) and `bridge` (an interface name).
    pub fn check_names(&self) -> Result<()> {
        if !word(&self.name, 64) {
            return Err(Error::invalid(format!(
                "config network.name {:?}: 1-64 letters, digits, '-', '_', '.'",
                crate::error::echo(&self.name)
            )));
        }
        if !word(&self.bridge, 15) {
            return Err(Error::invalid(format!(
                "config network.bridge {:?}: an interface name of 1-15 letters, digits, '-', '_', '.'",
                crate::error::echo(&self.bridge)
            )));
        }
        Ok(())
    }

    /// The pod subnets of `subnet`, in the order written.
    pub fn subnets(&self) -> Result<Vec<Cidr>> {
        cidr::parse_list(&self.subnet).map_err(|e| e.context("config network.subnet"))
    }
}

/// Whether `s` is 1-`max` letters, digits, `-`, `_`, `.` (a table or interface name).
fn word(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}
