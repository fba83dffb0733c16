//! The ordered endpoints a pull tries (mirrors, then the origin): bosun's `[registry.hosts]`, else containerd's host directories, else the registry itself.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

use crate::config::registry::{self, HostConfig, RegistryConfig};
use crate::error::Result;
use crate::image::reference::DEFAULT_DOMAIN;
use crate::image::registry::clients::ClientSettings;
use crate::image::registry::hosts_dir::HostsDirs;
use crate::image::registry::hosts_toml::{HostEntry, HostsFile};

/// Where `docker.io` really lives (docker and containerd use the same host).
pub const DOCKER_HUB_HOST: &str = "registry-1.docker.io";

/// Image domains resolve to `[registry.hosts]` keys here, where Docker Hub's names are known.
impl RegistryConfig {
    /// The settings for `host`, accepting Docker Hub's other spellings as keys.
    pub fn host(&self, host: &str) -> Option<&HostConfig> {
        self.hosts.get(host).or_else(|| {
            (host == DEFAULT_DOMAIN)
                .then(|| {
                    ["index.docker.io", DOCKER_HUB_HOST]
                        .iter()
                        .find_map(|k| self.hosts.get(*k))
                })
                .flatten()
        })
    }
}

/// How an endpoint is spoken to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    /// TLS.
    Https,
    /// Plain HTTP.
    Http,
    /// TLS first; plain HTTP when the TLS connection fails (loopback hosts without a setting).
    HttpsThenHttp,
}

/// One place a repository can be fetched from: a mirror or the origin registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// `host[:port]` to connect to.
    pub host: String,
    /// How to connect.
    pub scheme: Scheme,
    /// The path requests go below: `/v2`, a mirror's `/prefix/v2`, or a hosts file's
    /// `override_path` path as given.
    pub path: String,
    /// Whether this is a mirror (mirrors are asked anonymously: credentials are the origin's).
    pub mirror: bool,
    /// Whether it may resolve tags (hosts.toml `capabilities` without `resolve`: only what is
    /// named by digest is fetched there).
    pub resolve: bool,
    /// TLS trust, client certificate, headers, dial timeout.
    pub client: ClientSettings,
}

impl Endpoint {
    /// `<scheme>://<host><path>/<rest>`, over plain HTTP when `plain`.
    pub fn url(&self, plain: bool, rest: &str) -> String {
        let scheme = if plain { "http" } else { "https" };
        format!("{scheme}://{}{}/{rest}", self.host, self.path)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.mirror { "mirror" } else { "registry" };
        let path = self.path.strip_suffix("/v2").unwrap_or(&self.path);
        write!(f, "{what} {}{path}", self.host)
    }
}

/// Registry settings one pull brings on top of the daemon's (`ctr images pull` flags).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PullHosts {
    /// `--plain-http`: plain HTTP to a registry no host setting covers.
    pub plain_http: bool,
    /// `--skip-verify`: accept any certificate, on every endpoint.
    pub skip_verify: bool,
    /// `--hosts-dir`: read this host directory instead of `[registry] config_path`.
    pub hosts_dir: Option<PathBuf>,
    /// `--tlscacert`: one more CA bundle, on every endpoint.
    pub ca_file: Option<PathBuf>,
    /// `--tlscert`/`--tlskey`: a client certificate, where the endpoint has none.
    pub client_cert: Option<(PathBuf, Option<PathBuf>)>,
}

/// Everything that decides the endpoints of an image domain.
pub struct Hosts {
    config: RegistryConfig,
    dirs: HostsDirs,
    pull: PullHosts,
}

impl Hosts {
    /// The daemon's settings: `config`, with its `config_path` host directories.
    pub fn new(config: &RegistryConfig) -> Hosts {
        Hosts {
            config: config.clone(),
            dirs: HostsDirs::new(&config.config_path),
            pull: PullHosts::default(),
        }
    }

    /// These settings with one pull's on top.
    pub fn for_pull(&self, pull: PullHosts) -> Hosts {
        let dirs = match &pull.hosts_dir {
            Some(d) => HostsDirs::new(&d.to_string_lossy()),
            None => HostsDirs::new(&self.config.config_path),
        };
        Hosts {
            config: self.config.clone(),
            dirs,
            pull,
        }
    }

    /// The host directories read.
    pub fn dirs(&self) -> &HostsDirs {
        &self.dirs
    }

    /// The endpoints for image domain `domain`, in the order to try: mirrors, then the
    /// origin. `by_digest`: the reference names a digest (hosts that may not resolve tags
    /// serve it too). bosun's own `[registry.hosts."<domain>"]` wins over a host directory
    /// for the same host (it is logged when both exist); a host directory over the defaults.
    pub fn endpoints(&self, domain: &str, by_digest: bool) -> Result<Vec<Endpoint>> {
        let mut eps = match self.config.host(domain) {
            Some(own) => {
                if let Ok(Some(found)) = self.dirs.lookup(domain) {
                    tracing::debug!(
                        domain,
                        dir = %found.dir.display(),
                        "[registry.hosts] in bosun's config wins over the host directory"
                    );
                }
                configured(&self.config, domain, own)?
            }
            None => match self.dirs.lookup(domain)? {
                Some(found) => from_file(domain, &found.file, by_digest),
                None => vec![origin(domain, &HostConfig::default(), self.pull.plain_http)],
            },
        };
        for ep in &mut eps {
            self.pull_settings(ep);
        }
        Ok(eps)
    }

    fn pull_settings(&self, ep: &mut Endpoint) {
        let p = &self.pull;
        ep.client.skip_verify |= p.skip_verify;
        if let Some(ca) = &p.ca_file {
            ep.client.ca_files.push(ca.clone());
        }
        if ep.client.client_cert.is_none() {
            ep.client.client_cert = p.client_cert.clone();
        }
    }
}

/// The endpoints bosun's own `[registry.hosts."<domain>"]` table `own` makes.
fn configured(config: &RegistryConfig, domain: &str, own: &HostConfig) -> Result<Vec<Endpoint>> {
    let mut out = Vec::with_capacity(own.mirrors.len() + 1);
    for m in &own.mirrors {
        out.push(mirror_endpoint(config, domain, m)?);
    }
    out.push(origin(domain, own, false));
    Ok(out)
}

/// The registry itself, with its own table `own`; `plain_http` (a pull's `--plain-http`)
/// decides where `own` does not.
fn origin(domain: &str, own: &HostConfig, plain_http: bool) -> Endpoint {
    let host = origin_host(domain);
    let plain = own.plain_http.or(plain_http.then_some(true));
    Endpoint {
        host: host.to_string(),
        scheme: scheme_for(host, plain),
        path: "/v2".into(),
        mirror: false,
        resolve: true,
        client: client_settings(own),
    }
}

fn origin_host(domain: &str) -> &str {
    if domain == DEFAULT_DOMAIN {
        DOCKER_HUB_HOST
    } else {
        domain
    }
}

/// TLS settings of a `[registry.hosts]` table.
fn client_settings(h: &HostConfig) -> ClientSettings {
    ClientSettings {
        ca_files: h.ca_file.iter().cloned().collect(),
        skip_verify: h.skip_verify,
        ..Default::default()
    }
}

/// Mirror `url` of registry `domain`; the mirror's own host table (if any) gives TLS.
fn mirror_endpoint(config: &RegistryConfig, domain: &str, url: &str) -> Result<Endpoint> {
    let m = registry::mirror(domain, url)?;
    let own = config.host(m.host).cloned().unwrap_or_default();
    Ok(Endpoint {
        host: m.host.to_string(),
        scheme: scheme_for(m.host, m.plain_http.or(own.plain_http)),
        path: format!("{}/v2", m.prefix),
        mirror: true,
        resolve: true,
        client: client_settings(&own),
    })
}

/// The endpoints a hosts file makes for `domain`: its hosts (those that can pull; those that
/// may not resolve only for `by_digest` references), then its server.
fn from_file(domain: &str, file: &HostsFile, by_digest: bool) -> Vec<Endpoint> {
    let usable = |h: &&HostEntry| h.pull && (h.resolve || by_digest);
    let mut out: Vec<Endpoint> = file
        .hosts
        .iter()
        .filter(usable)
        .map(|h| file_endpoint(domain, h, true))
        .collect();
    if usable(&&file.server) {
        out.push(file_endpoint(domain, &file.server, false));
    }
    out
}

fn file_endpoint(domain: &str, h: &HostEntry, mirror: bool) -> Endpoint {
    let (host, scheme, path) = match &h.url {
        Some(u) => (u.host.clone(), u.scheme, u.path.clone()),
        None => {
            let host = origin_host(domain);
            (host.to_string(), scheme_for(host, None), "/v2".to_string())
        }
    };
    Endpoint {
        host,
        scheme,
        path,
        mirror,
        resolve: h.resolve,
        client: h.client.clone(),
    }
}

fn scheme_for(host: &str, plain_http: Option<bool>) -> Scheme {
    match plain_http {
        Some(true) => Scheme::Http,
        Some(false) => Scheme::Https,
        None if is_loopback(host) => Scheme::HttpsThenHttp,
        None => Scheme::Https,
    }
}

/// `localhost`, 127.0.0.0/8 or `::1`, with or without a port.
pub fn is_loopback(host: &str) -> bool {
    if let Some(v6) = host.strip_prefix('[') {
        let addr = v6.split(']').next().unwrap_or_default();
        return addr.parse::<Ipv6Addr>().is_ok_and(|a| a.is_loopback());
    }
    let name = host.split(':').next().unwrap_or_default();
    name.eq_ignore_ascii_case("localhost")
        || name.parse::<Ipv4Addr>().is_ok_and(|a| a.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::registry::from_toml;

    #[test]
    fn docker_hub_mirrors_come_first_then_the_origin() {
        let c = from_toml(
            r#"
            [registry.hosts."docker.io"]
            mirrors = ["http://127.0.0.1:5001", "https://mirror.example/cache/", "m2.example:8443"]
            [registry.hosts."m2.example:8443"]
            skip_verify = true
            "#,
        );
        let eps = Hosts::new(&c)
            .endpoints("docker.io", false)
            .expect("endpoints");
        let urls: Vec<String> = eps
            .iter()
            .map(|e| e.url(e.scheme == Scheme::Http, "x"))
            .collect();
        assert_eq!(
            urls,
            [
                "http://127.0.0.1:5001/v2/x",
                "https://mirror.example/cache/v2/x",
                "https://m2.example:8443/v2/x",
                "https://registry-1.docker.io/v2/x",
            ]
        );
        assert!(eps[..3].iter().all(|e| e.mirror) && !eps[3].mirror);
        assert!(eps[2].client.skip_verify && !eps[1].client.skip_verify);
        assert_eq!(eps[3].to_string(), "registry registry-1.docker.io");
    }

    #[test]
    fn loopback_hosts_fall_back_to_plain_http_unless_configured() {
        let mut c = from_toml(
            r#"
            [registry.hosts."localhost:5000"]
            plain_http = false
            [registry.hosts."10.0.0.1:5000"]
            plain_http = true
            "#,
        );
        c.config_path.clear();
        let scheme = |d: &str| Hosts::new(&c).endpoints(d, false).expect("endpoints")[0].scheme;
        assert_eq!(scheme("127.0.0.1:5000"), Scheme::HttpsThenHttp);
        assert_eq!(scheme("127.1.2.3"), Scheme::HttpsThenHttp);
        assert_eq!(scheme("[::1]:5000"), Scheme::HttpsThenHttp);
        assert_eq!(scheme("LOCALHOST"), Scheme::HttpsThenHttp);
        assert_eq!(scheme("localhost:5000"), Scheme::Https);
        assert_eq!(scheme("10.0.0.1:5000"), Scheme::Http);
        assert_eq!(scheme("quay.io"), Scheme::Https);
        assert_eq!(scheme("[::2]:5000"), Scheme::Https);
    }

    #[test]
    fn docker_hub_aliases_are_host_keys_too() {
        let mut c = RegistryConfig::default();
        c.hosts.insert(
            "index.docker.io".into(),
            HostConfig {
                plain_http: Some(true),
                ..Default::default()
            },
        );
        assert_eq!(
            Hosts::new(&c).endpoints("docker.io", false).expect("eps")[0].scheme,
            Scheme::Http
        );
    }
}
