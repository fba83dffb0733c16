//! `[runtimes.<name>]`: the runtime handlers (Kubernetes RuntimeClass handlers), each an OCI runtime with a runc-compatible command line; `runc` (the default) and `crun` are always configured.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// The handler an empty CRI `runtime_handler` means.
pub const DEFAULT_HANDLER: &str = "runc";
/// What [`super::keys::accepted_keys`] shows for a handler's name.
pub const NAME: &str = "<name>";

/// One runtime handler.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeHandlerConfig {
    /// The runtime binary (absolute path or a name looked up in PATH at start); empty: the
    /// handler's name (for `runc`: the top-level `runtime` key).
    pub binary: PathBuf,
    /// The runtime's `--root` state directory; empty: `<state>/runc` for `runc`,
    /// `<state>/runtimes/<name>` for any other handler.
    pub root: PathBuf,
    /// Global options put before every command of the runtime (`["--debug"]`).
    pub options: Vec<String>,
    /// The pod overhead this handler declares (what a RuntimeClass's `overhead.podFixed`
    /// would say): added to the limits of its standalone pods' cgroups.
    pub pod_overhead: Option<PodOverhead>,
}

/// A declared pod overhead: Kubernetes quantities.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PodOverhead {
    /// CPU (`"100m"`).
    pub cpu: String,
    /// Memory (`"32Mi"`).
    pub memory: String,
}

impl PodOverhead {
    /// The CPU in millicores and the memory in bytes (0 where unset).
    pub fn values(&self) -> Result<(u64, u64)> {
        let one = |key: &str, text: &str, scale: f64| -> Result<u64> {
            if text.is_empty() {
                return Ok(0);
            }
            match super::quantity::parse(text) {
                Some(v) if v >= 0.0 => Ok((v * scale).ceil() as u64),
                _ => Err(Error::invalid(format!(
                    "pod_overhead.{key} {text:?} is not a Kubernetes quantity"
                ))),
            }
        };
        Ok((
            one("cpu", &self.cpu, 1000.0)?,
            one("memory", &self.memory, 1.0)?,
        ))
    }
}

/// A handler name is a DNS label (what RuntimeClass.handler allows).
fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !name.starts_with('-')
        && !name.ends_with('-');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "runtimes.{name:?}: a handler name is a DNS label (lowercase letters, digits, '-')"
        )))
    }
}

/// The handlers as configured plus the built-in `runc` and `crun`, every field filled in:
/// binaries (`runtime` for runc) and roots (under `state`). Errors name the key.
pub fn resolve(
    runtimes: &BTreeMap<String, RuntimeHandlerConfig>,
    runtime: &Path,
    state: &Path,
) -> Result<BTreeMap<String, RuntimeHandlerConfig>> {
    let mut out = BTreeMap::new();
    for name in [DEFAULT_HANDLER, "crun"] {
        out.insert(name.to_string(), RuntimeHandlerConfig::default());
    }
    for (name, h) in runtimes {
        check_name(name)?;
        if let Some(o) = &h.pod_overhead {
            o.values()
                .map_err(|e| e.context(format!("runtimes.{name}")))?;
        }
        if !h.root.as_os_str().is_empty() && !h.root.is_absolute() {
            return Err(Error::invalid(format!(
                "runtimes.{name}.root {} is not an absolute path",
                h.root.display()
            )));
        }
        out.insert(name.clone(), h.clone());
    }
    for (name, h) in out.iter_mut() {
        if h.binary.as_os_str().is_empty() {
            h.binary = if name == DEFAULT_HANDLER {
                runtime.to_path_buf()
            } else {
                PathBuf::from(name)
            };
        }
        if h.root.as_os_str().is_empty() {
            h.root = if name == DEFAULT_HANDLER {
                state.join("runc")
            } else {
                state.join("runtimes").join(name)
            };
        }
    }
    let mut roots: BTreeMap<&Path, &str> = BTreeMap::new();
    for (name, h) in &out {
        if let Some(other) = roots.insert(&h.root, name) {
            return Err(Error::invalid(format!(
                "runtimes.{name}.root {} is also the root of handler {other}",
                h.root.display()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(name: &str, h: RuntimeHandlerConfig) -> BTreeMap<String, RuntimeHandlerConfig> {
        BTreeMap::from([(name.to_string(), h)])
    }

    #[test]
    fn runc_and_crun_are_built_in_with_their_defaults() {
        let r = resolve(
            &BTreeMap::new(),
            Path::new("/usr/sbin/runc"),
            Path::new("/run/b"),
        )
        .expect("defaults");
        assert_eq!(r.keys().collect::<Vec<_>>(), ["crun", "runc"]);
        assert_eq!(r["runc"].binary, Path::new("/usr/sbin/runc"));
        assert_eq!(r["runc"].root, Path::new("/run/b/runc"));
        assert_eq!(r["crun"].binary, Path::new("crun"));
        assert_eq!(r["crun"].root, Path::new("/run/b/runtimes/crun"));
    }

    #[test]
    fn a_configured_handler_keeps_its_keys() {
        let h = RuntimeHandlerConfig {
            binary: "/usr/sbin/runc".into(),
            root: "/run/alt".into(),
            options: vec!["--debug".into()],
            pod_overhead: Some(PodOverhead {
                cpu: "250m".into(),
                memory: "64Mi".into(),
            }),
        };
        let r = resolve(
            &one("alt", h.clone()),
            Path::new("runc"),
            Path::new("/run/b"),
        )
        .expect("valid");
        assert_eq!(r["alt"], h);
        assert_eq!(
            h.pod_overhead.expect("set").values().expect("quantities"),
            (250, 64 << 20)
        );
    }

    #[test]
    fn bad_handlers_are_refused_naming_the_key() {
        let refused = |name: &str, h: RuntimeHandlerConfig| {
            resolve(&one(name, h), Path::new("runc"), Path::new("/run/b"))
                .expect_err("refused")
                .to_string()
        };
        assert!(refused("Kata_1", Default::default()).contains("DNS label"));
        let rel = RuntimeHandlerConfig {
            root: "rel".into(),
            ..Default::default()
        };
        assert!(refused("x", rel).contains("runtimes.x.root"));
        let same = RuntimeHandlerConfig {
            root: "/run/b/runc".into(),
            ..Default::default()
        };
        assert!(refused("x", same).contains("also the root of handler"));
        let bad = RuntimeHandlerConfig {
            pod_overhead: Some(PodOverhead {
                cpu: "lots".into(),
                memory: String::new(),
            }),
            ..Default::default()
        };
        assert!(refused("x", bad).contains("pod_overhead.cpu"));
    }
}
