//! `[pod]`: the standalone pod supervisor's directories and restart back-off.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

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
