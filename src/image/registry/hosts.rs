//! The ordered endpoints a pull tries (mirrors, then the origin) from the `[registry.hosts]` settings.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use crate::config::registry::{self, HostConfig, RegistryConfig, TlsSettings};
use crate::error::Result;
use crate::image::reference::DEFAULT_DOMAIN;

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
    /// Path before `/v2` (empty, or `/something` from a mirror URL).
    pub prefix: String,
    /// Whether this is a mirror (mirrors are asked anonymously: credentials are the origin's).
    pub mirror: bool,
    /// Certificate trust for this endpoint.
    pub tls: TlsSettings,
}

impl Endpoint {
    /// `<scheme>://<host><prefix>/v2/<rest>`, over plain HTTP when `plain`.
    pub fn url(&self, plain: bool, rest: &str) -> String {
        let scheme = if plain { "http" } else { "https" };
        format!("{scheme}://{}{}/v2/{rest}", self.host, self.prefix)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = if self.mirror { "mirror" } else { "registry" };
        write!(f, "{what} {}{}", self.host, self.prefix)
    }
}

/// The endpoints for image domain `domain`, in the order to try: mirrors, then the origin.
pub fn endpoints(config: &RegistryConfig, domain: &str) -> Result<Vec<Endpoint>> {
    let own = config.host(domain).cloned().unwrap_or_default();
    let mut out = Vec::with_capacity(own.mirrors.len() + 1);
    for m in &own.mirrors {
        out.push(mirror_endpoint(config, domain, m)?);
    }
    let host = if domain == DEFAULT_DOMAIN {
        DOCKER_HUB_HOST
    } else {
        domain
    };
    out.push(Endpoint {
        host: host.to_string(),
        scheme: scheme_for(host, own.plain_http),
        prefix: String::new(),
        mirror: false,
        tls: own.tls(),
    });
    Ok(out)
}

/// Mirror `url` of registry `domain`; the mirror's own host table (if any) gives TLS.
fn mirror_endpoint(config: &RegistryConfig, domain: &str, url: &str) -> Result<Endpoint> {
    let m = registry::mirror(domain, url)?;
    let own = config.host(m.host).cloned().unwrap_or_default();
    Ok(Endpoint {
        host: m.host.to_string(),
        scheme: scheme_for(m.host, m.plain_http.or(own.plain_http)),
        prefix: m.prefix.to_string(),
        mirror: true,
        tls: own.tls(),
    })
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
        let eps = endpoints(&c, "docker.io").expect("endpoints");
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
        assert!(eps[2].tls.skip_verify && !eps[1].tls.skip_verify);
        assert_eq!(eps[3].to_string(), "registry registry-1.docker.io");
    }

    #[test]
    fn loopback_hosts_fall_back_to_plain_http_unless_configured() {
        let c = from_toml(
            r#"
            [registry.hosts."localhost:5000"]
            plain_http = false
            [registry.hosts."10.0.0.1:5000"]
            plain_http = true
            "#,
        );
        let scheme = |d: &str| endpoints(&c, d).expect("endpoints")[0].scheme;
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
            endpoints(&c, "docker.io").expect("eps")[0].scheme,
            Scheme::Http
        );
    }
}
