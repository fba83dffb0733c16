//! `[registry]`: per-registry host settings (mirrors, plain HTTP, TLS) and the registry client's timeouts.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The `[registry]` section of bosun's config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// Settings per registry host (`docker.io`, `127.0.0.1:5000`), keyed like image domains.
    #[serde(default)]
    pub hosts: BTreeMap<String, HostConfig>,
    /// TCP+TLS connect timeout in seconds (default 10).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
    /// Longest silence while reading a response, in seconds (default 30); large layers may take
    /// as long as they like as long as bytes keep arriving.
    #[serde(default = "default_read_timeout")]
    pub read_timeout_secs: u64,
}

fn default_connect_timeout() -> u64 {
    10
}

fn default_read_timeout() -> u64 {
    30
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            hosts: BTreeMap::new(),
            connect_timeout_secs: default_connect_timeout(),
            read_timeout_secs: default_read_timeout(),
        }
    }
}

impl RegistryConfig {
    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_secs(self.connect_timeout_secs.max(1))
    }

    /// The read (idle) timeout.
    pub fn read_timeout(&self) -> Duration {
        Duration::from_secs(self.read_timeout_secs.max(1))
    }

    /// Every TLS setting some endpoint may use (for building one HTTP client per setting).
    pub fn tls_settings(&self) -> Vec<TlsSettings> {
        let mut v = vec![TlsSettings::default()];
        for h in self.hosts.values() {
            let t = h.tls();
            if !v.contains(&t) {
                v.push(t);
            }
        }
        v
    }
}

/// One `[registry.hosts."<host>"]` table, in the spirit of containerd's hosts.toml.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Mirror URLs tried in order before the origin; the same repository path is requested.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mirrors: Vec<String>,
    /// `true`: plain HTTP only; `false`: HTTPS only; unset: HTTPS, except that loopback hosts
    /// fall back to plain HTTP (as docker and containerd do for localhost).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plain_http: Option<bool>,
    /// Extra CA bundle (PEM) trusted for this host, on top of the system roots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
    /// Accept any certificate (testing only).
    #[serde(default)]
    pub skip_verify: bool,
}

impl HostConfig {
    /// The TLS settings for this host.
    pub fn tls(&self) -> TlsSettings {
        TlsSettings {
            ca_file: self.ca_file.clone(),
            skip_verify: self.skip_verify,
        }
    }
}

/// TLS trust settings; one HTTP client is built per distinct value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct TlsSettings {
    /// Extra CA bundle.
    pub ca_file: Option<PathBuf>,
    /// Skip certificate verification.
    pub skip_verify: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(toml_text: &str) -> RegistryConfig {
        #[derive(Deserialize)]
        struct Top {
            registry: RegistryConfig,
        }
        toml::from_str::<Top>(toml_text).expect("toml").registry
    }

    #[test]
    fn hosts_toml_deserialises_with_defaults() {
        let c = config(
            r#"
            [registry.hosts."docker.io"]
            mirrors = ["http://127.0.0.1:5001", "https://mirror.example"]
            [registry.hosts."127.0.0.1:5000"]
            plain_http = true
            ca_file = "/etc/ssl/my-ca.pem"
            skip_verify = false
            "#,
        );
        assert_eq!(c.connect_timeout(), Duration::from_secs(10));
        assert_eq!(c.hosts["docker.io"].mirrors.len(), 2);
        let local = &c.hosts["127.0.0.1:5000"];
        assert_eq!(local.plain_http, Some(true));
        assert_eq!(
            local.ca_file.as_deref(),
            Some(std::path::Path::new("/etc/ssl/my-ca.pem"))
        );
        assert_eq!(c.tls_settings().len(), 2);
        let text = toml::to_string(&c).expect("serialise");
        assert_eq!(
            toml::from_str::<RegistryConfig>(&text).expect("round trip"),
            c
        );
        let unknown = r#"[registry.hosts."x"]
            mirror = []"#;
        #[derive(Deserialize, Debug)]
        #[allow(dead_code)]
        struct Top {
            registry: RegistryConfig,
        }
        assert!(toml::from_str::<Top>(unknown).is_err(), "typos are refused");
    }
}
