//! A container's environment from its manifest: env, envFrom, $(VAR) expansion, field and resource refs, ConfigMaps and Secrets.

use std::collections::HashMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::{Container, ObjectFieldSelector, ResourceFieldSelector};

use super::translate::PodContext;
use crate::config::quantity;
use crate::error::{Error, Result};

/// Where ConfigMaps and Secrets come from on a node without an API server: plain files,
/// one directory per object and one file per key:
///
/// ```text
/// <configmap_dir>/<namespace>/<name>/<key>     ([pod] configmap_dir, default /etc/bosun/configmaps)
/// <secret_dir>/<namespace>/<name>/<key>        ([pod] secret_dir,    default /etc/bosun/secrets)
/// ```
///
/// A file's content is the key's value (bytes, not base64). Files whose names are not valid
/// keys (`[-._a-zA-Z0-9]+`) or start with `..` are ignored.
#[derive(Debug, Clone)]
pub struct Sources {
    /// ConfigMaps root.
    pub configmap_dir: PathBuf,
    /// Secrets root.
    pub secret_dir: PathBuf,
}

/// One key of a ConfigMap or Secret and its value.
pub type KeyValue = (String, Vec<u8>);

/// Which kind of object a source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourceKind {
    ConfigMap,
    Secret,
}

impl SourceKind {
    /// `configmap` or `secret`.
    pub fn as_str(self) -> &'static str {
        match self {
            SourceKind::ConfigMap => "configmap",
            SourceKind::Secret => "secret",
        }
    }
}

impl Sources {
    /// The directory of one object.
    pub fn dir(&self, kind: SourceKind, namespace: &str, name: &str) -> PathBuf {
        let root = match kind {
            SourceKind::ConfigMap => &self.configmap_dir,
            SourceKind::Secret => &self.secret_dir,
        };
        root.join(namespace).join(name)
    }

    /// Every key of an object, sorted; `None` when the object does not exist.
    pub fn object(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Vec<KeyValue>>> {
        if !is_key(name) {
            return Err(Error::invalid(format!(
                "{} name {name:?} is not valid",
                kind.as_str()
            )));
        }
        let dir = self.dir(kind, namespace, name);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::internal(format!(
                    "{} {namespace}/{name}: read {}: {e}",
                    kind.as_str(),
                    dir.display()
                )))
            }
        };
        let mut out = Vec::new();
        for e in rd.flatten() {
            let key = e.file_name().to_string_lossy().into_owned();
            if !is_key(&key) || key.starts_with("..") {
                continue;
            }
            if !e.path().is_file() {
                continue;
            }
            let v = std::fs::read(e.path()).map_err(|err| {
                Error::internal(format!(
                    "{} {namespace}/{name}: read key {key}: {err}",
                    kind.as_str()
                ))
            })?;
            out.push((key, v));
        }
        out.sort();
        Ok(Some(out))
    }

    /// One key of an object; `None` when the object or the key does not exist.
    pub fn key(
        &self,
        kind: SourceKind,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<Option<Vec<u8>>> {
        if !is_key(key) {
            return Err(Error::invalid(format!(
                "{} key {key:?} is not valid",
                kind.as_str()
            )));
        }
        Ok(self
            .object(kind, namespace, name)?
            .and_then(|o| o.into_iter().find(|(k, _)| k == key).map(|(_, v)| v)))
    }
}

/// A ConfigMap/Secret key: `[-._a-zA-Z0-9]+`, at most 253 characters.
pub fn is_key(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
}

/// Facts about the pod's place that env and the downward API expose.
pub struct EnvFacts<'a> {
    /// status.podIP (none before the sandbox has one, or for host-network pods before start).
    pub pod_ip: Option<&'a str>,
    /// status.hostIP.
    pub host_ip: &'a str,
    /// spec.nodeName (the node's hostname).
    pub node_name: &'a str,
}

/// The environment of container `c`: envFrom first, then env in order, each value with
/// `$(VAR)` references to earlier variables expanded (`$$` escapes), as the kubelet builds it.
pub fn resolve(
    ctx: &PodContext,
    c: &Container,
    facts: &EnvFacts,
    sources: &Sources,
) -> Result<Vec<(String, Vec<u8>)>> {
    let what = |var: &str| format!("pod {}: container {}: env {var}", ctx.key(), c.name);
    let ns = ctx.namespace();
    let mut out: Vec<(String, Vec<u8>)> = Vec::new();
    let set = |out: &mut Vec<(String, Vec<u8>)>, k: String, v: Vec<u8>| match out
        .iter_mut()
        .find(|(n, _)| *n == k)
    {
        Some(e) => e.1 = v,
        None => out.push((k, v)),
    };
    for from in c.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (kind, name, optional) = if let Some(r) = &from.config_map_ref {
            (SourceKind::ConfigMap, r.name.clone(), r.optional)
        } else if let Some(r) = &from.secret_ref {
            (SourceKind::Secret, r.name.clone(), r.optional)
        } else {
            continue;
        };
        match sources.object(kind, ns, &name)? {
            Some(keys) => {
                for (k, v) in keys {
                    let var = format!("{prefix}{k}");
                    if is_env_name(&var) {
                        set(&mut out, var, v);
                    }
                }
            }
            None if optional == Some(true) => {}
            None => {
                return Err(Error::invalid(format!(
                    "pod {}: container {}: envFrom: {} {ns}/{name} not found (under {})",
                    ctx.key(),
                    c.name,
                    kind.as_str(),
                    sources.dir(kind, ns, &name).display()
                )))
            }
        }
    }
    for e in c.env.iter().flatten() {
        let value: Option<Vec<u8>> = if let Some(v) = &e.value {
            let known: HashMap<&str, &[u8]> = out
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_slice()))
                .collect();
            Some(expand(v, &known))
        } else if let Some(src) = &e.value_from {
            if let Some(f) = &src.field_ref {
                Some(
                    field_ref(ctx, f, facts)
                        .map_err(|m| Error::invalid(format!("{}: fieldRef: {m}", what(&e.name))))?
                        .into_bytes(),
                )
            } else if let Some(r) = &src.resource_field_ref {
                Some(
                    resource_ref(c, ctx, r)
                        .map_err(|m| {
                            Error::invalid(format!("{}: resourceFieldRef: {m}", what(&e.name)))
                        })?
                        .into_bytes(),
                )
            } else if let Some(r) = &src.config_map_key_ref {
                key_ref(
                    sources,
                    SourceKind::ConfigMap,
                    ns,
                    &r.name,
                    &r.key,
                    r.optional,
                )
                .map_err(|m| Error::invalid(format!("{}: {m}", what(&e.name))))?
            } else if let Some(r) = &src.secret_key_ref {
                key_ref(sources, SourceKind::Secret, ns, &r.name, &r.key, r.optional)
                    .map_err(|m| Error::invalid(format!("{}: {m}", what(&e.name))))?
            } else {
                Some(Vec::new())
            }
        } else {
            Some(Vec::new())
        };
        if let Some(v) = value {
            set(&mut out, e.name.clone(), v);
        }
    }
    Ok(out)
}

/// An environment variable name the kubelet accepts (C identifier-ish; dots and dashes allowed).
fn is_env_name(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with(|c: char| c.is_ascii_digit())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

fn key_ref(
    sources: &Sources,
    kind: SourceKind,
    ns: &str,
    name: &str,
    key: &str,
    optional: Option<bool>,
) -> std::result::Result<Option<Vec<u8>>, String> {
    match sources.key(kind, ns, name, key) {
        Ok(Some(v)) => Ok(Some(v)),
        Ok(None) if optional == Some(true) => Ok(None),
        Ok(None) => Err(format!(
            "{} {ns}/{name} has no key {key:?} (under {})",
            kind.as_str(),
            sources.dir(kind, ns, name).display()
        )),
        Err(e) => Err(e.to_string()),
    }
}

/// `$(VAR)` → the value of an earlier variable; `$$` → `$`; unknown references stay as written.
pub fn expand(s: &str, known: &HashMap<&str, &[u8]>) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'$' && i + 1 < b.len() {
            if b[i + 1] == b'$' {
                out.push(b'$');
                i += 2;
                continue;
            }
            if b[i + 1] == b'(' {
                if let Some(end) = b[i + 2..].iter().position(|&c| c == b')') {
                    let name = &s[i + 2..i + 2 + end];
                    match known.get(name) {
                        Some(v) => out.extend_from_slice(v),
                        None => out.extend_from_slice(&b[i..i + 3 + end]),
                    }
                    i += 3 + end;
                    continue;
                }
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// A downward API field of the pod (env and volume files).
pub fn field_ref(
    ctx: &PodContext,
    f: &ObjectFieldSelector,
    facts: &EnvFacts,
) -> std::result::Result<String, String> {
    let meta = &ctx.pod.metadata;
    let path = f.field_path.as_str();
    let map_get = |m: Option<&std::collections::BTreeMap<String, String>>, k: &str| {
        m.and_then(|m| m.get(k)).cloned().unwrap_or_default()
    };
    if let Some(k) = subscript(path, "metadata.labels") {
        return Ok(map_get(meta.labels.as_ref(), k));
    }
    if let Some(k) = subscript(path, "metadata.annotations") {
        return Ok(map_get(meta.annotations.as_ref(), k));
    }
    let spec = ctx.pod.spec.as_ref();
    Ok(match path {
        "metadata.name" => ctx.name().to_string(),
        "metadata.namespace" => ctx.namespace().to_string(),
        "metadata.uid" => ctx.uid.to_string(),
        "metadata.labels" => format_map(meta.labels.as_ref()),
        "metadata.annotations" => format_map(meta.annotations.as_ref()),
        "spec.nodeName" => facts.node_name.to_string(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_else(|| "default".into()),
        "status.hostIP" | "status.hostIPs" => facts.host_ip.to_string(),
        "status.podIP" | "status.podIPs" => {
            if spec.and_then(|s| s.host_network).unwrap_or(false) {
                facts.host_ip.to_string()
            } else {
                facts.pod_ip.unwrap_or_default().to_string()
            }
        }
        other => return Err(format!("unsupported fieldPath {other:?}")),
    })
}

/// `prefix['key']` → `key`.
fn subscript<'a>(path: &'a str, prefix: &str) -> Option<&'a str> {
    let rest = path.strip_prefix(prefix)?;
    let inner = rest.strip_prefix("['")?.strip_suffix("']")?;
    Some(inner)
}

/// The downward API's `key="value"` lines, sorted by key.
pub fn format_map(m: Option<&std::collections::BTreeMap<String, String>>) -> String {
    m.into_iter()
        .flatten()
        .map(|(k, v)| format!("{k}={v:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// limits/requests of cpu/memory/ephemeral-storage of container `c` (or the one named by
/// `containerName`), divided by the divisor and rounded up, as the kubelet does. An unset limit
/// reports the node's allocatable amount.
pub fn resource_ref(
    c: &Container,
    ctx: &PodContext,
    r: &ResourceFieldSelector,
) -> std::result::Result<String, String> {
    let target = match r.container_name.as_deref().filter(|n| !n.is_empty()) {
        Some(n) if n != c.name => ctx
            .pod
            .spec
            .as_ref()
            .and_then(|s| {
                s.containers
                    .iter()
                    .chain(s.init_containers.iter().flatten())
                    .find(|x| x.name == n)
            })
            .ok_or_else(|| format!("no container {n:?}"))?,
        _ => c,
    };
    let (section, res) = r
        .resource
        .split_once('.')
        .ok_or_else(|| format!("unsupported resource {:?}", r.resource))?;
    let res_map = target.resources.as_ref().and_then(|rr| match section {
        "limits" => rr.limits.as_ref(),
        "requests" => rr.requests.as_ref().or(rr.limits.as_ref()),
        _ => None,
    });
    if !matches!(section, "limits" | "requests") {
        return Err(format!("unsupported resource {:?}", r.resource));
    }
    let value = res_map
        .and_then(|m| m.get(res))
        .and_then(|q| quantity::parse(&q.0));
    let value = match (value, section, res) {
        (Some(v), _, _) => v,
        (None, "limits", "cpu") => node_cpus(),
        (None, "limits", "memory") => super::translate::node_memory() as f64,
        (None, "limits", "ephemeral-storage") => 0.0,
        (None, "requests", "cpu" | "memory" | "ephemeral-storage") => 0.0,
        _ => return Err(format!("unsupported resource {:?}", r.resource)),
    };
    let divisor = match &r.divisor {
        Some(d) => quantity::parse(&d.0)
            .filter(|d| *d > 0.0)
            .ok_or_else(|| format!("divisor {:?} is not a positive quantity", d.0))?,
        None => 1.0,
    };
    // Rounded to 1e-6 first, so 1.5 / 0.001 is 1500 and not 1501 after float error.
    let n = ((value / divisor * 1e6).round() / 1e6)
        .ceil()
        .max(if res == "cpu" { 1.0 } else { 0.0 });
    Ok(format!("{}", n as i64))
}

fn node_cpus() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}
