//! The cgroup driver: whether cgroups are plain cgroupfs paths or systemd slices and scopes.

use serde::{Deserialize, Serialize};

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
