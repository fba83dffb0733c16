//! HTTP clients per endpoint settings (CA files, client certificate, headers, dial timeout), built on first use and again when a file they read changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::registry::{self, RegistryConfig};
use crate::error::{Error, Result, ResultExt};
use crate::image::registry::transport::describe;

/// How to talk to one endpoint; one HTTP client is built per distinct value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct ClientSettings {
    /// Extra CA bundles (PEM) trusted on top of the system roots.
    pub ca_files: Vec<PathBuf>,
    /// Client certificate and its key (`None`: the key is in the certificate's file).
    pub client_cert: Option<(PathBuf, Option<PathBuf>)>,
    /// Accept any certificate (testing only).
    pub skip_verify: bool,
    /// Headers sent with every request (hosts.toml `[host."…".header]`).
    pub headers: Vec<(String, String)>,
    /// TCP connect timeout, instead of `[registry] connect_timeout_secs`.
    pub dial_timeout: Option<Duration>,
}

impl ClientSettings {
    /// Whether any TLS setting is set (containerd then tries HTTPS before a plain-HTTP host).
    pub fn has_tls(&self) -> bool {
        !self.ca_files.is_empty() || self.client_cert.is_some() || self.skip_verify
    }

    /// Every file the client reads.
    fn files(&self) -> Vec<&Path> {
        let mut v: Vec<&Path> = self.ca_files.iter().map(PathBuf::as_path).collect();
        if let Some((cert, key)) = &self.client_cert {
            v.push(cert);
            v.extend(key.as_deref());
        }
        v
    }
}

/// What the files a client read looked like (mtime and size each): a change rebuilds it.
type Stamp = Vec<Option<(SystemTime, u64)>>;

fn stamp(settings: &ClientSettings) -> Stamp {
    settings
        .files()
        .iter()
        .map(|f| {
            std::fs::metadata(f)
                .ok()
                .and_then(|m| Some((m.modified().ok()?, m.len())))
        })
        .collect()
}

/// HTTP clients keyed by settings and whether proxies are bypassed (loopback hosts).
pub(crate) struct ClientPool {
    connect_timeout: Duration,
    read_timeout: Duration,
    clients: Mutex<HashMap<(ClientSettings, bool), (Stamp, reqwest::Client)>>,
}

impl ClientPool {
    /// An empty pool with `config`'s timeouts.
    pub(crate) fn new(config: &RegistryConfig) -> Self {
        ClientPool {
            connect_timeout: config.connect_timeout(),
            read_timeout: config.read_timeout(),
            clients: Mutex::default(),
        }
    }

    /// The client for `settings` (`loopback`: proxies bypassed), built now if there is none
    /// yet or a file it read changed since. Fails when a file cannot be read or parsed.
    pub(crate) fn get(&self, settings: &ClientSettings, loopback: bool) -> Result<reqwest::Client> {
        let now = stamp(settings);
        let key = (settings.clone(), loopback);
        let cached = self.clients.lock().ok().and_then(|map| {
            map.get(&key)
                .filter(|(s, _)| *s == now)
                .map(|(_, c)| c.clone())
        });
        if let Some(c) = cached {
            return Ok(c);
        }
        let client = self.build(settings, loopback)?;
        if let Ok(mut map) = self.clients.lock() {
            map.insert(key, (now, client.clone()));
        }
        Ok(client)
    }

    fn build(&self, settings: &ClientSettings, loopback: bool) -> Result<reqwest::Client> {
        let mut b = reqwest::Client::builder()
            .connect_timeout(settings.dial_timeout.unwrap_or(self.connect_timeout))
            .read_timeout(self.read_timeout)
            .user_agent(format!("bosun/{}", crate::version::VERSION))
            // reqwest drops Authorization on cross-host redirects (blob storage URLs).
            .redirect(reqwest::redirect::Policy::limited(10));
        if loopback {
            b = b.no_proxy();
        }
        for ca in &settings.ca_files {
            for c in registry::ca_certificates(ca)? {
                b = b.add_root_certificate(c);
            }
        }
        if let Some((cert, key)) = &settings.client_cert {
            b = b.identity(identity(cert, key.as_deref())?);
        }
        if settings.skip_verify {
            b = b.danger_accept_invalid_certs(true);
        }
        if !settings.headers.is_empty() {
            b = b.default_headers(headers(&settings.headers)?);
        }
        b.build()
            .map_err(|e| Error::internal(format!("build HTTP client: {}", describe(&e))))
    }
}

/// The client identity in `cert` (PEM certificate chain) and `key` (PEM key; `None`: in `cert`).
fn identity(cert: &Path, key: Option<&Path>) -> Result<reqwest::Identity> {
    let mut pem = match key {
        Some(k) => std::fs::read(k).ctx(|| format!("registry client key {}", k.display()))?,
        None => Vec::new(),
    };
    pem.push(b'\n');
    pem.extend(
        std::fs::read(cert).ctx(|| format!("registry client certificate {}", cert.display()))?,
    );
    reqwest::Identity::from_pem(&pem).map_err(|e| {
        Error::invalid(format!(
            "registry client certificate {}: {}",
            cert.display(),
            describe(&e)
        ))
    })
}

/// `pairs` as request headers; a name or value HTTP does not allow is refused. Values of one
/// name are joined with `, ` (one field with a list means the same, RFC 9110 §5.3): a
/// client's default headers hold one value per name.
pub fn headers(pairs: &[(String, String)]) -> Result<HeaderMap> {
    let mut joined: Vec<(HeaderName, String)> = Vec::new();
    for (k, v) in pairs {
        let name = HeaderName::from_bytes(k.as_bytes())
            .map_err(|_| Error::invalid(format!("header {k:?}: not a valid header name")))?;
        match joined.iter_mut().find(|(n, _)| *n == name) {
            Some((_, all)) => {
                all.push_str(", ");
                all.push_str(v);
            }
            None => joined.push((name, v.clone())),
        }
    }
    let mut map = HeaderMap::new();
    for (name, v) in joined {
        let value = HeaderValue::from_str(&v)
            .map_err(|_| Error::invalid(format!("header {name}: value {v:?} is not allowed")))?;
        map.insert(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_are_shared_until_a_file_they_read_changes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "").expect("write");
        let pool = ClientPool::new(&RegistryConfig::default());
        let s = ClientSettings {
            ca_files: vec![ca.clone()],
            headers: vec![("X-Test".into(), "1".into()), ("X-Test".into(), "2".into())],
            ..Default::default()
        };
        pool.get(&s, false).expect("build");
        let first = stamp(&s);
        pool.get(&s, false).expect("cached");
        std::fs::write(&ca, "\n\n").expect("rewrite");
        assert_ne!(stamp(&s), first, "a changed file changes the stamp");
        pool.get(&s, false).expect("rebuilt");
        std::fs::write(
            &ca,
            "-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
        )
        .expect("rewrite");
        let e = pool.get(&s, false).expect_err("a broken CA");
        assert!(e.to_string().contains("ca.pem"), "{e}");
        std::fs::remove_file(&ca).expect("rm");
        let e = pool.get(&s, false).expect_err("a missing CA");
        assert!(e.to_string().contains("ca.pem"), "{e}");
    }

    #[test]
    fn bad_headers_and_client_certificates_are_refused_naming_them() {
        let e = headers(&[("bad name".into(), "x".into())]).expect_err("name");
        assert!(e.to_string().contains("bad name"), "{e}");
        let e = headers(&[("X-A".into(), "line\nbreak".into())]).expect_err("value");
        assert!(e.to_string().contains("x-a"), "{e}");
        let h = headers(&[
            ("X-A".into(), "1".into()),
            ("x-a".into(), "2".into()),
            ("X-B".into(), "3".into()),
        ])
        .expect("headers");
        assert_eq!(h.get("x-a").and_then(|v| v.to_str().ok()), Some("1, 2"));
        assert_eq!(h.len(), 2);
        let dir = tempfile::tempdir().expect("tempdir");
        let cert = dir.path().join("client.cert");
        std::fs::write(&cert, "junk").expect("write");
        let e = identity(&cert, None).expect_err("junk");
        assert!(e.to_string().contains("client.cert"), "{e}");
        let e = identity(&dir.path().join("absent.cert"), None).expect_err("absent");
        assert!(e.to_string().contains("absent.cert"), "{e}");
    }
}
