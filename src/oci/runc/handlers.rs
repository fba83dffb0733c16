//! The runtime handlers (Kubernetes RuntimeClass handlers): name → OCI runtime with its binary, root, options and features, probed once at start; `runc` is the default.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::features::{parse_runtime_features, RuntimeMountFeatures};
use super::{OciRuntime, Runc};
use crate::config::{RuntimeHandlerConfig, DEFAULT_HANDLER};
use crate::error::{Error, Result};

/// One runtime handler.
pub struct Handler {
    /// Its name (what `runtime_handler` and `runtimeClassName` say).
    pub name: String,
    /// The runtime binary (absolute once found in PATH).
    pub binary: PathBuf,
    /// The runtime's `--root`.
    pub root: PathBuf,
    /// Global options before every command.
    pub options: Vec<String>,
    /// The driver talking to it.
    pub runtime: Arc<dyn OciRuntime>,
    /// `<runtime> --version`, first line (empty when it could not run).
    pub version: String,
    /// The mount extensions its `features` lists.
    pub mounts: RuntimeMountFeatures,
    /// Recursive read-only mounts: its own `rro`, or bosun's mount_setattr on the host.
    pub recursive_read_only: bool,
    /// Its `features` lists the user namespace (or it has no `features` command).
    pub user_namespaces: bool,
    /// Why pods cannot run on it here; `None`: usable.
    pub unusable: Option<String>,
    /// Why it cannot checkpoint or restore (a crun built without CRIU); `None`: it can where
    /// CRIU itself works (the node's `criu check`).
    pub no_checkpoint: Option<String>,
    /// The declared pod overhead: millicores, bytes.
    pub overhead: Option<(u64, u64)>,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("name", &self.name)
            .field("binary", &self.binary)
            .field("root", &self.root)
            .field("unusable", &self.unusable)
            .finish_non_exhaustive()
    }
}

/// What the node offers every handler: the cgroup layout and the systemd driver.
#[derive(Debug, Clone, Default)]
pub struct NodeFacts {
    /// `/sys/fs/cgroup` is cgroup2 (unified).
    pub cgroup_unified: bool,
    /// `--systemd-cgroup` on every command.
    pub systemd_cgroup: bool,
    /// Where exec's temporary files go.
    pub tmp_dir: PathBuf,
}

/// The configured handlers.
#[derive(Debug, Clone)]
pub struct Handlers {
    list: BTreeMap<String, Arc<Handler>>,
    /// `runc`, the handler of "" and of objects recorded by an older bosun.
    default: Arc<Handler>,
}

impl Handlers {
    /// Probes every handler of `config` (resolved: see [`crate::config::runtimes::resolve`]):
    /// binary found, `--version`, `features`, the node's cgroups. Blocking; creates the
    /// roots of the usable ones. An unusable handler is logged once with the reason.
    /// InvalidArgument when `config` has no `runc` (`resolve` always adds it).
    pub fn probe(
        config: &BTreeMap<String, RuntimeHandlerConfig>,
        node: &NodeFacts,
    ) -> Result<Handlers> {
        let list: BTreeMap<String, Arc<Handler>> = config
            .iter()
            .map(|(name, c)| (name.clone(), Arc::new(probe_one(name, c, node))))
            .collect();
        let default = list.get(DEFAULT_HANDLER).cloned().ok_or_else(|| {
            Error::invalid(format!(
                "config: [runtimes] has no {DEFAULT_HANDLER} handler"
            ))
        })?;
        Ok(Handlers { list, default })
    }

    /// One handler, `runc`, over `runtime` (unit tests' fakes), applying the mount
    /// extensions `mounts` itself (the host's, as probed or set by the test).
    pub fn single(
        runtime: Arc<dyn OciRuntime>,
        binary: &Path,
        root: &Path,
        mounts: RuntimeMountFeatures,
    ) -> Handlers {
        let h = Handler {
            name: DEFAULT_HANDLER.to_string(),
            binary: binary.to_path_buf(),
            root: root.to_path_buf(),
            options: Vec::new(),
            runtime,
            version: String::new(),
            mounts,
            recursive_read_only: true,
            user_namespaces: true,
            unusable: None,
            no_checkpoint: None,
            overhead: None,
        };
        let h = Arc::new(h);
        Handlers {
            list: BTreeMap::from([(h.name.clone(), h.clone())]),
            default: h,
        }
    }

    /// Every handler, by name.
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Handler>> {
        self.list.values()
    }

    /// The default handler (`runc`).
    pub fn default_handler(&self) -> &Arc<Handler> {
        &self.default
    }

    /// The handler a RunPodSandbox names ("" = the default): InvalidArgument naming the
    /// configured ones when unknown, FailedPrecondition saying why when unusable here.
    pub fn select(&self, name: &str) -> Result<&Arc<Handler>> {
        let h = if name.is_empty() {
            self.default_handler()
        } else {
            self.list.get(name).ok_or_else(|| {
                let names: Vec<&str> = self.list.keys().map(String::as_str).collect();
                Error::invalid(format!(
                    "runtime handler {:?} is not configured (configured: {}; \"\" is {DEFAULT_HANDLER})",
                    crate::error::echo(name),
                    names.join(", ")
                ))
            })?
        };
        if let Some(why) = &h.unusable {
            return Err(Error::precondition(format!(
                "runtime handler {:?} cannot run pods on this node: {why}",
                h.name
            )));
        }
        Ok(h)
    }

    /// The handler a recorded object names ("" from an older bosun = the default). One no
    /// longer configured falls back to the default, with a warning.
    pub fn recorded(&self, name: &str) -> &Arc<Handler> {
        if name.is_empty() {
            return self.default_handler();
        }
        match self.list.get(name) {
            Some(h) => h,
            None => {
                tracing::warn!(
                    handler = name,
                    "runtime handler recorded but no longer configured: using {DEFAULT_HANDLER}"
                );
                self.default_handler()
            }
        }
    }
}

fn probe_one(name: &str, c: &RuntimeHandlerConfig, node: &NodeFacts) -> Handler {
    let binary = find_binary(&c.binary);
    let mut unusable = None;
    let (mut version, mut json) = (String::new(), Vec::new());
    let mut no_checkpoint = None;
    match &binary {
        None => unusable = Some(format!("{} not found", c.binary.display())),
        Some(bin) => {
            match run(bin, &c.options, "--version") {
                Ok(out) => {
                    version = first_line(&out);
                    no_checkpoint = crun_without_criu(&out);
                }
                Err(e) => unusable = Some(format!("{} --version: {e}", bin.display())),
            }
            json = run(bin, &c.options, "features").unwrap_or_default();
        }
    }
    let crun = version.starts_with("crun");
    if unusable.is_none() && crun && !node.cgroup_unified {
        unusable = Some(
            "crun needs the unified cgroup hierarchy (cgroup v2) and this node has cgroup v1 \
             (hybrid) mounted at /sys/fs/cgroup"
                .to_string(),
        );
    }
    let binary = binary.unwrap_or_else(|| c.binary.clone());
    if unusable.is_none() {
        if let Err(e) = std::fs::create_dir_all(&c.root) {
            unusable = Some(format!("create root {}: {e}", c.root.display()));
        }
    }
    if name == DEFAULT_HANDLER {
        // The default stays usable whatever the probe says, as the one runtime always was:
        // its calls say what is wrong.
        if let Some(why) = unusable.take() {
            tracing::warn!(handler = name, "default runtime handler: {why}");
        }
    }
    match &unusable {
        Some(why) => tracing::warn!(handler = name, "runtime handler unusable: {why}"),
        None => {
            tracing::info!(handler = name, binary = %binary.display(), root = %c.root.display(),
            version = %version, "runtime handler ready")
        }
    }
    let mut runc = Runc::new(&binary, &c.root);
    runc.options = c.options.clone();
    runc.systemd_cgroup = node.systemd_cgroup;
    runc.tmp_dir = node.tmp_dir.clone();
    // The in-process shortcuts read runc's own state files.
    runc.in_process = version.starts_with("runc");
    let overhead = c.pod_overhead.as_ref().and_then(|o| o.values().ok());
    let mounts = parse_runtime_features(&json);
    Handler {
        name: name.to_string(),
        binary,
        root: c.root.clone(),
        options: c.options.clone(),
        runtime: Arc::new(runc),
        version,
        mounts,
        recursive_read_only: mounts.rro || crate::sys::mount_api::mount_setattr_supported(),
        user_namespaces: json.is_empty() || lists_user_namespace(&json),
        unusable,
        no_checkpoint,
        overhead: overhead.filter(|&(cpu, mem)| cpu > 0 || mem > 0),
    }
}

/// `binary` itself when it has a directory part, else the first in PATH.
fn find_binary(binary: &Path) -> Option<PathBuf> {
    if binary.components().count() == 1 && binary.is_relative() {
        return crate::oci::host::find_in_path(&binary.to_string_lossy());
    }
    binary.is_file().then(|| binary.to_path_buf())
}

fn run(binary: &Path, options: &[String], arg: &str) -> std::result::Result<Vec<u8>, String> {
    let out = std::process::Command::new(binary)
        .args(options)
        .arg(arg)
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .map_err(|e| e.to_string())?;
    if out.status.success() {
        Ok(out.stdout)
    } else {
        Err(out.status.to_string())
    }
}

fn first_line(out: &[u8]) -> String {
    String::from_utf8_lossy(out)
        .lines()
        .next()
        .unwrap_or_default()
        .trim()
        .to_string()
}

/// Why a crun cannot checkpoint: its `--version` lists the features it was built with
/// (`+SYSTEMD +SELINUX … +CRIU`), and without `+CRIU` its `checkpoint` and `restore` only fail
/// (Debian 12's crun 1.8.1 is built so). Other runtimes: None (runc runs the criu binary).
fn crun_without_criu(version_out: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(version_out);
    if !text.starts_with("crun") {
        return None;
    }
    let built_with_criu = text
        .split_whitespace()
        .any(|w| w.eq_ignore_ascii_case("+CRIU"));
    (!built_with_criu).then(|| {
        format!(
            "{} was built without CRIU (its --version lists no +CRIU): it can neither \
             checkpoint nor restore",
            first_line(version_out)
        )
    })
}

/// `linux.namespaces` of `features` output lists `user`.
fn lists_user_namespace(json: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(json).is_ok_and(|v| {
        v["linux"]["namespaces"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n.as_str() == Some("user")))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::runtimes::resolve;
    use crate::error::ErrorKind;
    use std::os::unix::fs::PermissionsExt;

    /// A fake runtime script answering `--version` with `version`.
    fn script(dir: &Path, name: &str, version: &str) -> PathBuf {
        let path = dir.join(name);
        let body = format!(
            "#!/bin/sh\ncase \"$1\" in --version) echo '{version}';; \
             features) echo '{{\"linux\":{{\"namespaces\":[\"pid\"]}},\"mountOptions\":[\"rro\"]}}';; \
             *) exit 1;; esac\n"
        );
        std::fs::write(&path, body).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        path
    }

    fn handlers(dir: &Path, extra: &[(&str, &Path)], unified: bool) -> Handlers {
        let runc = script(dir, "runc", "runc version 1.2.5");
        let mut config = BTreeMap::new();
        for (name, bin) in extra {
            let c = RuntimeHandlerConfig {
                binary: bin.to_path_buf(),
                ..Default::default()
            };
            config.insert(name.to_string(), c);
        }
        let config = resolve(&config, &runc, &dir.join("state")).expect("valid");
        let node = NodeFacts {
            cgroup_unified: unified,
            ..Default::default()
        };
        Handlers::probe(&config, &node).expect("runc is configured")
    }

    #[test]
    fn unknown_handlers_are_refused_naming_the_configured_ones() {
        let dir = tempfile::tempdir().expect("tmp");
        let h = handlers(dir.path(), &[], true);
        assert_eq!(h.select("").expect("default").name, "runc");
        assert_eq!(h.select("runc").expect("runc").name, "runc");
        let e = h.select("kata").expect_err("unknown");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert!(e.message().contains("\"kata\""), "{e}");
        assert!(e.message().contains("crun, runc"), "{e}");
        assert_eq!(h.recorded("gone").name, "runc");
        assert_eq!(h.recorded("").name, "runc");
    }

    #[test]
    fn a_handler_is_probed_for_its_features_and_root() {
        let dir = tempfile::tempdir().expect("tmp");
        let h = handlers(dir.path(), &[], true);
        let runc = h.select("runc").expect("usable");
        assert!(runc.mounts.rro);
        assert!(!runc.user_namespaces);
        assert!(runc.root.is_dir(), "root created");
        assert_eq!(runc.version, "runc version 1.2.5");
    }

    #[test]
    fn missing_binaries_and_crun_on_cgroup_v1_are_unusable_saying_why() {
        let dir = tempfile::tempdir().expect("tmp");
        let crun = script(dir.path(), "crun", "crun version 1.8.1");
        let missing = dir.path().join("nope");
        let h = handlers(dir.path(), &[("crun", &crun), ("gone", &missing)], false);
        let e = h.select("crun").expect_err("v1");
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
        assert!(e.message().contains("cgroup v2"), "{e}");
        let e = h.select("gone").expect_err("missing");
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
        assert!(e.message().contains("not found"), "{e}");
        let h = handlers(dir.path(), &[("crun", &crun)], true);
        assert!(h.select("crun").is_ok());
    }

    #[test]
    fn a_crun_built_without_criu_cannot_checkpoint() {
        let debian = b"crun version 1.8.1\ncommit: f8a096be\nrundir: /run/crun\nspec: 1.0.0\n\
                       +SYSTEMD +SELINUX +APPARMOR +CAP +SECCOMP +EBPF +YAJL\n";
        let why = crun_without_criu(debian).expect("no +CRIU");
        assert!(
            why.starts_with("crun version 1.8.1 was built without CRIU"),
            "{why}"
        );
        let with = b"crun version 1.19\nspec: 1.0.0\n+SYSTEMD +SELINUX +CRIU +LIBKRUN +YAJL\n";
        assert_eq!(crun_without_criu(with), None);
        assert_eq!(
            crun_without_criu(b"runc version 1.1.5\ncommit: v1.1.5\n"),
            None
        );
        let dir = tempfile::tempdir().expect("tmp");
        let crun = script(dir.path(), "crun", "crun version 1.8.1");
        let h = handlers(dir.path(), &[("crun", &crun)], true);
        let crun = h.select("crun").expect("usable for pods");
        assert!(crun
            .no_checkpoint
            .as_deref()
            .is_some_and(|w| w.contains("+CRIU")));
        assert_eq!(h.select("runc").expect("runc").no_checkpoint, None);
    }
}
