//! containerd's registry host file (`certs.d/<host>/hosts.toml`) and the older certificate-only directory, read into endpoints' settings.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::eviction::parse_duration;
use crate::error::{Error, Result};
use crate::image::registry::clients::{self, ClientSettings};
use crate::image::registry::hosts::Scheme;

/// The file a host directory holds.
pub const HOSTS_FILE: &str = "hosts.toml";

/// A host directory's settings: hosts tried in file order, then the registry itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostsFile {
    /// `[host."<url>"]` tables, in the order the file lists them.
    pub hosts: Vec<HostEntry>,
    /// `server` and the file's top-level keys: the registry itself.
    pub server: HostEntry,
}

/// One host of a hosts file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostEntry {
    /// Where it is; `None` for a file without `server`: the registry's own address.
    pub url: Option<HostUrl>,
    /// `capabilities` has `pull` (the default): it serves manifests and blobs by digest.
    pub pull: bool,
    /// `capabilities` has `resolve` (the default): it may turn tags into digests.
    pub resolve: bool,
    /// `ca`, `client`, `skip_verify`, `header`, `dial_timeout`.
    pub client: ClientSettings,
}

/// Where a host is: scheme, `host[:port]`, and the API's path (`/v2`, or as given with
/// `override_path`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostUrl {
    /// How to connect.
    pub scheme: Scheme,
    /// `host[:port]`.
    pub host: String,
    /// The path requests go below.
    pub path: String,
}

/// The keys of a host table (the file's top level has `server` and `host` too).
const HOST_KEYS: [&str; 7] = [
    "capabilities",
    "ca",
    "client",
    "skip_verify",
    "header",
    "override_path",
    "dial_timeout",
];

/// Parses the hosts file `file` (in host directory `dir`, which relative paths are taken from).
/// Every key of containerd's format is read; an unknown key, a value of the wrong type, or a
/// second client certificate is refused naming the file and the key: a misspelt `skip_verify`
/// or `ca` ignored would pull from elsewhere, or with other trust, than the file says.
pub fn parse(file: &Path, dir: &Path, text: &str) -> Result<HostsFile> {
    let bad = |key: &str, why: String| Error::invalid(format!("{}: {key}: {why}", file.display()));
    let top: toml::Table =
        toml::from_str(text).map_err(|e| Error::invalid(format!("{}: {e}", file.display())))?;
    for key in top.keys() {
        if key != "server" && key != "host" && !HOST_KEYS.contains(&key.as_str()) {
            return Err(bad(key, format!("unknown key ({})", known_keys())));
        }
    }
    let server_url = match top.get("server") {
        None => None,
        Some(toml::Value::String(s)) => Some(s.as_str()),
        Some(v) => return Err(bad("server", format!("a string, not {}", v.type_str()))),
    };
    let server = entry(server_url, &top, dir, &|k, why| {
        bad(if k.is_empty() { "server" } else { k }, why)
    })?;
    let mut hosts = Vec::new();
    match top.get("host") {
        None => {}
        Some(toml::Value::Table(t)) => {
            for name in in_file_order(text, t) {
                let key = format!("host.{name:?}");
                let Some(toml::Value::Table(h)) = t.get(&name) else {
                    return Err(bad(&key, "not a table".into()));
                };
                for k in h.keys() {
                    if !HOST_KEYS.contains(&k.as_str()) {
                        return Err(bad(
                            &format!("{key}.{k}"),
                            format!("unknown key ({})", known_keys()),
                        ));
                    }
                }
                hosts.push(entry(Some(&name), h, dir, &|k, why| {
                    if k.is_empty() {
                        bad(&key, why)
                    } else {
                        bad(&format!("{key}.{k}"), why)
                    }
                })?);
            }
        }
        Some(v) => return Err(bad("host", format!("a table, not {}", v.type_str()))),
    }
    Ok(HostsFile { hosts, server })
}

fn known_keys() -> String {
    format!("known: server, host, {}", HOST_KEYS.join(", "))
}

/// The host names of table `host` in the order `text` defines them (TOML tables have none).
fn in_file_order(text: &str, hosts: &toml::Table) -> Vec<String> {
    #[derive(serde::Deserialize)]
    struct Order {
        #[serde(default)]
        host: BTreeMap<String, toml::Spanned<toml::Value>>,
    }
    let mut names: Vec<(usize, String)> = match toml::from_str::<Order>(text) {
        Ok(o) => o
            .host
            .into_iter()
            .map(|(k, v)| (v.span().start, k))
            .collect(),
        Err(_) => hosts.keys().cloned().enumerate().collect(),
    };
    names.sort();
    names.into_iter().map(|(_, k)| k).collect()
}

type Bad<'a> = &'a dyn Fn(&str, String) -> Error;

/// One host: `url` (a `[host."…"]` name or `server`) and its table `t`; `bad` names a key of
/// the table in an error (the empty key: the host's URL).
fn entry(url: Option<&str>, t: &toml::Table, dir: &Path, bad: Bad<'_>) -> Result<HostEntry> {
    let override_path = match t.get("override_path") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(v) => {
            return Err(bad(
                "override_path",
                format!("a boolean, not {}", v.type_str()),
            ))
        }
    };
    let skip_verify = match t.get("skip_verify") {
        None => false,
        Some(toml::Value::Boolean(b)) => *b,
        Some(v) => {
            return Err(bad(
                "skip_verify",
                format!("a boolean, not {}", v.type_str()),
            ))
        }
    };
    let (pull, resolve) = capabilities(t.get("capabilities"), bad)?;
    let ca_files = match t.get("ca") {
        None => Vec::new(),
        Some(v) => strings(v).map_err(|why| bad("ca", why))?,
    }
    .into_iter()
    .map(|p| absolute(dir, &p))
    .collect();
    let client_cert = match t.get("client") {
        None => None,
        Some(v) => client_pair(v, dir).map_err(|why| bad("client", why))?,
    };
    let mut headers = Vec::new();
    match t.get("header") {
        None => {}
        Some(toml::Value::Table(h)) => {
            for (k, v) in h {
                for value in strings(v).map_err(|why| bad(&format!("header.{k}"), why))? {
                    headers.push((k.clone(), value));
                }
            }
            clients::headers(&headers).map_err(|e| bad("header", e.message().to_string()))?;
        }
        Some(v) => return Err(bad("header", format!("a table, not {}", v.type_str()))),
    }
    let dial_timeout = match t.get("dial_timeout") {
        None => None,
        Some(toml::Value::String(s)) => Some(parse_duration(s).ok_or_else(|| {
            bad(
                "dial_timeout",
                format!("{s:?} is not a duration such as \"5s\""),
            )
        })?),
        Some(v) => {
            return Err(bad(
                "dial_timeout",
                format!("a string, not {}", v.type_str()),
            ))
        }
    };
    let client = ClientSettings {
        ca_files,
        client_cert,
        skip_verify,
        headers,
        dial_timeout,
    };
    let url = match url {
        Some(u) => Some(host_url(u, override_path, client.has_tls()).map_err(|why| bad("", why))?),
        None => None,
    };
    Ok(HostEntry {
        url,
        pull,
        resolve,
        client,
    })
}

/// `capabilities`: every one when absent; `push` and `referrers` are allowed (bosun only pulls).
fn capabilities(v: Option<&toml::Value>, bad: Bad<'_>) -> Result<(bool, bool)> {
    let Some(v) = v else {
        return Ok((true, true));
    };
    let list = strings(v).map_err(|why| bad("capabilities", why))?;
    let (mut pull, mut resolve) = (false, false);
    for c in &list {
        match c.to_ascii_lowercase().as_str() {
            "pull" => pull = true,
            "resolve" => resolve = true,
            "push" | "referrers" => {}
            other => {
                return Err(bad(
                    "capabilities",
                    format!("unknown capability {other:?} (pull, resolve, push, referrers)"),
                ))
            }
        }
    }
    Ok((pull, resolve))
}

/// A string or a list of strings.
fn strings(v: &toml::Value) -> std::result::Result<Vec<String>, String> {
    match v {
        toml::Value::String(s) => Ok(vec![s.clone()]),
        toml::Value::Array(a) => a
            .iter()
            .map(|x| match x {
                toml::Value::String(s) => Ok(s.clone()),
                other => Err(format!(
                    "a list of strings, not one with {}",
                    other.type_str()
                )),
            })
            .collect(),
        other => Err(format!(
            "a string or a list of strings, not {}",
            other.type_str()
        )),
    }
}

/// `client`: `"cert"`, `["cert"]`, or `[["cert", "key"]]`; bosun presents one certificate.
fn client_pair(
    v: &toml::Value,
    dir: &Path,
) -> std::result::Result<Option<(PathBuf, Option<PathBuf>)>, String> {
    let pairs: Vec<(String, Option<String>)> = match v {
        toml::Value::String(s) => vec![(s.clone(), None)],
        toml::Value::Array(a) => a
            .iter()
            .map(|x| match x {
                toml::Value::String(s) => Ok((s.clone(), None)),
                toml::Value::Array(p) => {
                    match strings(&toml::Value::Array(p.clone()))?.as_slice() {
                        [cert, key] => Ok((cert.clone(), Some(key.clone()))),
                        _ => Err(format!(
                            "a pair must be [certificate, key], not {} paths",
                            p.len()
                        )),
                    }
                }
                other => Err(format!(
                    "a path or a [certificate, key] pair, not {}",
                    other.type_str()
                )),
            })
            .collect::<std::result::Result<_, _>>()?,
        other => Err(format!("a path or a list, not {}", other.type_str()))?,
    };
    match pairs.as_slice() {
        [] => Ok(None),
        [(cert, key)] => Ok(Some((
            absolute(dir, cert),
            key.as_deref().map(|k| absolute(dir, k)),
        ))),
        _ => Err(format!(
            "{} client certificates: bosun presents one per host (containerd would pick one \
             by what the server accepts); list the one to use",
            pairs.len()
        )),
    }
}

fn absolute(dir: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    }
}

/// A host's URL as containerd reads it: no scheme means HTTPS; the path gets `/v2` unless it
/// ends in it or `override_path`; plain HTTP with TLS settings (and not port 80) tries HTTPS
/// first, as containerd does.
fn host_url(url: &str, override_path: bool, tls: bool) -> std::result::Result<HostUrl, String> {
    let full = match url.split_once("://") {
        Some(("http" | "https", _)) => url.to_string(),
        Some((other, _)) => {
            return Err(format!(
                "{url:?}: unsupported scheme {other:?} (http or https)"
            ))
        }
        None => format!("https://{url}"),
    };
    let parsed = reqwest::Url::parse(&full).map_err(|e| format!("{url:?}: {e}"))?;
    let host = match (parsed.host_str(), parsed.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_string(),
        (None, _) => return Err(format!("{url:?}: no host")),
    };
    if parsed.query().is_some() || parsed.fragment().is_some() || !parsed.username().is_empty() {
        return Err(format!(
            "{url:?}: only scheme, host, port and path are allowed"
        ));
    }
    let scheme = match parsed.scheme() {
        "https" => Scheme::Https,
        "http" if tls && parsed.port() != Some(80) => Scheme::HttpsThenHttp,
        _ => Scheme::Http,
    };
    // The URL parser resolved `.` and `..` already; empty segments and a trailing `/` go (as
    // Go's path.Clean drops them).
    let mut path: String = parsed
        .path()
        .split('/')
        .filter(|p| !p.is_empty())
        .map(|p| format!("/{p}"))
        .collect();
    if !override_path && !path.ends_with("/v2") {
        path.push_str("/v2");
    }
    Ok(HostUrl { scheme, host, path })
}

/// A host directory without a hosts file, as docker reads it: `*.crt` are CAs, `*.cert` a
/// client certificate with its `*.key`; they apply to the registry itself.
pub fn cert_dir(dir: &Path) -> Result<HostsFile> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .map_err(|e| Error::invalid(format!("{}: {e}", dir.display())))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    let mut client = ClientSettings::default();
    for n in &names {
        if n.ends_with(".crt") {
            client.ca_files.push(dir.join(n));
        } else if let Some(stem) = n.strip_suffix(".cert") {
            if client.client_cert.is_some() {
                return Err(Error::invalid(format!(
                    "{}: more than one client certificate (*.cert): bosun presents one per host",
                    dir.display()
                )));
            }
            let key = dir.join(format!("{stem}.key"));
            client.client_cert = Some((dir.join(n), key.exists().then_some(key)));
        }
    }
    Ok(HostsFile {
        hosts: Vec::new(),
        server: HostEntry {
            url: None,
            pull: true,
            resolve: true,
            client,
        },
    })
}
