//! `[registry]`: per-registry host settings (mirrors, plain HTTP, TLS), containerd's host directories and the registry client's timeouts.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, ResultExt};

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
    /// containerd's registry host directories (`<dir>/<host>/hosts.toml`, `_default`), roots
    /// separated by `:` as in containerd's `config_path`; empty: none. A host named in `hosts`
    /// above is not looked up here.
    #[serde(default = "default_config_path")]
    pub config_path: String,
}

/// containerd 2's default `config_path`.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/containerd/certs.d:/etc/docker/certs.d";

fn default_config_path() -> String {
    DEFAULT_CONFIG_PATH.to_string()
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
            config_path: default_config_path(),
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

    /// Checks every mirror URL and the host directories' paths, so a typo is refused at load
    /// rather than at the first pull.
    pub fn check(&self) -> Result<()> {
        for (domain, host) in &self.hosts {
            for url in &host.mirrors {
                mirror(domain, url)?;
            }
        }
        for dir in self.config_path.split(':').filter(|d| !d.is_empty()) {
            if !Path::new(dir).is_absolute() {
                return Err(Error::invalid(format!(
                    "[registry] config_path: {dir:?} is not an absolute path (directories \
                     separated by \":\", e.g. {DEFAULT_CONFIG_PATH:?}; empty: none)"
                )));
            }
        }
        Ok(())
    }

    /// Reads every CA file now (the host step of the config check), so a missing or broken
    /// one stops the daemon before it takes its lock, naming the host's table.
    pub fn check_host(&self) -> Result<()> {
        for (domain, host) in &self.hosts {
            if let Some(ca) = &host.ca_file {
                ca_certificates(ca)
                    .map_err(|e| e.context(format!("[registry.hosts.{domain:?}] ca_file")))?;
            }
        }
        Ok(())
    }
}

/// A mirror URL (`[scheme://]host[:port][/prefix]`) taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MirrorUrl<'a> {
    /// `http://`: `Some(true)`; `https://`: `Some(false)`; no scheme: `None` (the mirror
    /// host's own `plain_http` decides).
    pub plain_http: Option<bool>,
    /// `host[:port]`.
    pub host: &'a str,
    /// The path before `/v2` (empty, or `/something`), without a trailing `/`.
    pub prefix: &'a str,
}

/// Mirror `url` of registry `domain`, taken apart; the error names both.
pub fn mirror<'a>(domain: &str, url: &'a str) -> Result<MirrorUrl<'a>> {
    mirror_url(url)
        .map_err(|why| Error::invalid(format!("registry {domain}: mirror {url:?}: {why}")))
}

fn mirror_url(url: &str) -> std::result::Result<MirrorUrl<'_>, String> {
    let (plain_http, rest) = match url.split_once("://") {
        Some(("http", rest)) => (Some(true), rest),
        Some(("https", rest)) => (Some(false), rest),
        Some((other, _)) => return Err(format!("unsupported scheme {other:?} (http or https)")),
        None => (None, url),
    };
    let (host, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], rest[i..].trim_end_matches('/')),
        None => (rest, ""),
    };
    let valid = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-.:[]".contains(&b))
        && reqwest::Url::parse(&format!("https://{host}/")).is_ok();
    if !valid {
        return Err(format!("invalid host {host:?}"));
    }
    if prefix.contains(['?', '#']) {
        return Err("query or fragment not allowed".into());
    }
    Ok(MirrorUrl {
        plain_http,
        host,
        prefix,
    })
}

/// The certificates of the PEM bundle at `path`, read now.
pub fn ca_certificates(path: &Path) -> Result<Vec<reqwest::Certificate>> {
    let pem = std::fs::read(path).ctx(|| format!("registry CA file {}", path.display()))?;
    reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
        Error::invalid(format!(
            "registry CA file {}: {}",
            path.display(),
            root_cause(&e)
        ))
    })
}

/// The innermost error of `e`'s chain (the parser's own words, not reqwest's "builder error").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
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

/// The `[registry]` section of config text `text`, decoded (for tests).
#[cfg(test)]
pub(crate) fn from_toml(text: &str) -> RegistryConfig {
    super::ConfigFile::parse(text).expect("toml").registry
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_toml_deserialises_with_defaults() {
        let c = from_toml(
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
        assert_eq!(c.config_path, DEFAULT_CONFIG_PATH);
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

    #[test]
    fn config_path_takes_absolute_directories_or_nothing() {
        for ok in ["", "/etc/containerd/certs.d", "/a:/b", DEFAULT_CONFIG_PATH] {
            let c = from_toml(&format!("[registry]\nconfig_path = {ok:?}\n"));
            c.check().expect(ok);
        }
        let c = from_toml("[registry]\nconfig_path = \"/a:certs.d\"\n");
        let e = c.check().expect_err("relative");
        assert!(
            e.to_string()
                .contains("[registry] config_path: \"certs.d\""),
            "{e}"
        );
    }

    #[test]
    fn bad_mirrors_are_refused_naming_the_host() {
        for m in ["ftp://x", "", "http://", "a b", "https://x/p?q=1"] {
            let mut c = RegistryConfig::default();
            c.hosts.insert(
                "docker.io".into(),
                HostConfig {
                    mirrors: vec![m.into()],
                    ..Default::default()
                },
            );
            let e = c.check().expect_err(m);
            assert!(
                e.to_string().starts_with("registry docker.io: mirror"),
                "{e}"
            );
        }
    }
}
