//! Ending what a container leaves behind in a pid namespace it does not own, once its init exits.
//!
//! A container's exit is its init's exit. With a pid namespace of its own, the kernel kills
//! every other process of the container as the init dies. Sharing the pod's (or the host's,
//! or another container's) namespace, background processes outlive the init and may hold the
//! container's stdout open: the monitor would wait for an end of file that never comes. So,
//! like containerd's shim for a container without its own pid namespace, the monitor has the
//! runtime SIGKILL every process left in the container's cgroup (`runc kill --all ID KILL`),
//! then reads the output they wrote before dying, then records the exit (issue 12).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::args::MonitorArgs;
use super::error::{Context, Result};

/// The longest `runc kill --all` may take before it is killed itself.
const KILL_TIMEOUT: Duration = Duration::from_secs(5);

/// How a container's leftovers are killed: present only when it shares a pid namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leftovers {
    runtime: PathBuf,
    root: PathBuf,
    id: String,
    systemd_cgroup: bool,
    /// The handler's global options (`--runtime-option`), first, as for `run` (monitor::runc).
    options: Vec<String>,
}

impl Leftovers {
    /// For the container of `config`: `None` when its bundle gives it a pid namespace of its
    /// own (or cannot be read: then nothing is killed, the drain limit still applies).
    pub fn for_container(config: &MonitorArgs) -> Option<Leftovers> {
        let spec = read_spec(&config.bundle).ok()?;
        (!owns_pid_namespace(&spec)).then(|| Leftovers {
            runtime: config.runtime.clone(),
            root: config.runtime_root.clone(),
            id: config.id.clone(),
            systemd_cgroup: config.systemd_cgroup,
            options: config.runtime_options.clone(),
        })
    }

    /// The runtime's command line after its binary.
    pub fn kill_args(&self) -> Vec<std::ffi::OsString> {
        let mut args: Vec<std::ffi::OsString> = self.options.iter().map(Into::into).collect();
        args.extend(["--root".into(), self.root.clone().into()]);
        if self.systemd_cgroup {
            // As for every other runc call of this container (oci::runc, monitor::runc).
            args.push("--systemd-cgroup".into());
        }
        args.extend([
            "kill".into(),
            "--all".into(),
            self.id.clone().into(),
            "KILL".into(),
        ]);
        args
    }

    /// SIGKILL to every process left in the container's cgroup; waits for the runtime (at
    /// most [`KILL_TIMEOUT`]). Only that child is waited for: other children are reaped by
    /// the supervisor's loop as usual.
    pub fn kill(&self) -> Result<()> {
        let mut cmd = Command::new(&self.runtime);
        cmd.args(self.kill_args())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        super::signals::reset_in_child(&mut cmd);
        let mut child = cmd
            .spawn()
            .with_context(|| format!("run {} kill --all", self.runtime.display()))?;
        let until = Instant::now() + KILL_TIMEOUT;
        loop {
            if child.try_wait().context("wait for runc kill")?.is_some() {
                return Ok(());
            }
            if Instant::now() >= until {
                let _ = child.kill();
                let _ = child.wait();
                return Err(super::error::Error::msg("runc kill --all: timed out"));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

fn read_spec(bundle: &Path) -> Result<serde_json::Value> {
    let path = bundle.join("config.json");
    let text = std::fs::read(&path).with_context(|| format!("read {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("parse {}", path.display()))
}

/// Whether an OCI spec creates a new pid namespace (a `pid` entry without a path); the same
/// test containerd's shim makes before it kills a container's leftovers.
pub fn owns_pid_namespace(spec: &serde_json::Value) -> bool {
    spec["linux"]["namespaces"].as_array().is_some_and(|list| {
        list.iter().any(|ns| {
            ns["type"].as_str() == Some("pid")
                && ns["path"].as_str().is_none_or(|path| path.is_empty())
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_new_pid_namespace_is_owned() {
        let spec = |ns: serde_json::Value| json!({"linux": {"namespaces": ns}});
        assert!(owns_pid_namespace(&spec(
            json!([{"type": "network"}, {"type": "pid"}])
        )));
        assert!(owns_pid_namespace(&spec(
            json!([{"type": "pid", "path": ""}])
        )));
        // The pod's namespace (joined by path), the host's (no entry), no linux section.
        assert!(!owns_pid_namespace(&spec(
            json!([{"type": "pid", "path": "/proc/42/ns/pid"}])
        )));
        assert!(!owns_pid_namespace(&spec(json!([{"type": "ipc"}]))));
        assert!(!owns_pid_namespace(&json!({})));
    }

    #[test]
    fn the_kill_names_the_root_and_the_container() {
        let dir = tempfile::tempdir().expect("tempdir");
        let write = |ns: &str| {
            std::fs::write(
                dir.path().join("config.json"),
                format!(r#"{{"linux": {{"namespaces": [{ns}]}}}}"#),
            )
            .expect("write config.json")
        };
        let config = MonitorArgs {
            id: "c1".into(),
            bundle: dir.path().to_path_buf(),
            runtime: "/usr/sbin/runc".into(),
            runtime_root: "/run/r".into(),
            log_path: "/l".into(),
            exit_file: "/e".into(),
            sync_fd: 3,
            stdin: false,
            stdin_once: false,
            tty: false,
            log_max_line: 0,
            systemd_cgroup: false,
            runtime_options: Vec::new(),
            restore: None,
        };
        write(r#"{"type": "pid"}"#);
        assert_eq!(Leftovers::for_container(&config), None);
        write(r#"{"type": "pid", "path": "/proc/7/ns/pid"}"#);
        let l = Leftovers::for_container(&config).expect("shared pid namespace");
        let args_of = |l: &Leftovers| -> Vec<String> {
            l.kill_args()
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect()
        };
        assert_eq!(
            args_of(&l),
            ["--root", "/run/r", "kill", "--all", "c1", "KILL"]
        );
        let systemd = Leftovers {
            systemd_cgroup: true,
            ..l
        };
        assert_eq!(
            args_of(&systemd),
            [
                "--root",
                "/run/r",
                "--systemd-cgroup",
                "kill",
                "--all",
                "c1",
                "KILL"
            ]
        );
        // A handler's options come first, as in `run` (they are the runtime's global flags).
        let mut opts = config.clone();
        opts.runtime_options = vec!["--debug".into()];
        let with_options = Leftovers::for_container(&opts).expect("shared");
        assert_eq!(
            args_of(&with_options),
            ["--debug", "--root", "/run/r", "kill", "--all", "c1", "KILL"]
        );
    }

    #[test]
    fn a_kill_that_runs_reports_success_and_a_missing_runtime_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("runc");
        crate::testutil::script(&script, "#!/bin/sh\nexit 0\n");
        let l = Leftovers {
            runtime: script,
            root: "/r".into(),
            id: "c".into(),
            systemd_cgroup: false,
            options: Vec::new(),
        };
        l.kill().expect("kill");
        let missing = Leftovers {
            runtime: dir.path().join("absent"),
            ..l
        };
        assert!(missing.kill().is_err());
    }
}
