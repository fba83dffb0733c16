//! Running one CNI plugin: finding its binary, its environment (CNI_*), stdin, and a timeout
//! after which it is killed. Plugins are tokio child processes: nothing blocks a thread.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::result::error_message;
use super::PodNetwork;
use crate::error::{Error, ErrorKind, Result};

/// A CNI command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// ADD.
    Add,
    /// DEL.
    Del,
    /// CHECK.
    Check,
}

impl Command {
    /// The CNI_COMMAND value.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Add => "ADD",
            Command::Del => "DEL",
            Command::Check => "CHECK",
        }
    }
}

/// `CNI_ARGS` for a pod, as the kubelet's dockershim and containerd send it.
pub fn cni_args(pod: &PodNetwork) -> String {
    format!(
        "IgnoreUnknown=1;K8S_POD_NAMESPACE={};K8S_POD_NAME={};K8S_POD_INFRA_CONTAINER_ID={};K8S_POD_UID={}",
        pod.namespace, pod.name, pod.id, pod.uid
    )
}

/// The CNI_* variables of one call. `netns` is empty when the namespace is gone (DEL after a
/// reboot: plugins then release what they can).
pub fn env(
    cmd: Command,
    pod: &PodNetwork,
    ifname: &str,
    netns: &Path,
    bin_dirs: &[PathBuf],
) -> Vec<(&'static str, String)> {
    let path = bin_dirs
        .iter()
        .map(|d| d.display().to_string())
        .collect::<Vec<_>>()
        .join(":");
    vec![
        ("CNI_COMMAND", cmd.as_str().to_string()),
        ("CNI_CONTAINERID", pod.id.clone()),
        ("CNI_NETNS", netns.display().to_string()),
        ("CNI_IFNAME", ifname.to_string()),
        ("CNI_ARGS", cni_args(pod)),
        ("CNI_PATH", path),
    ]
}

/// The first executable `plugin` in `bin_dirs`; the error names the plugin and the dirs.
pub fn find_plugin(plugin: &str, bin_dirs: &[PathBuf]) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    for dir in bin_dirs {
        let p = dir.join(plugin);
        if let Ok(m) = std::fs::metadata(&p) {
            if m.is_file() && m.permissions().mode() & 0o111 != 0 {
                return Ok(p);
            }
        }
    }
    let dirs: Vec<String> = bin_dirs.iter().map(|d| d.display().to_string()).collect();
    Err(Error::not_found(format!(
        "CNI plugin {plugin:?} not found in {}",
        dirs.join(", ")
    )))
}

/// Runs `binary` with `env` and `stdin`; its stdout on success. The plugin leads a process
/// group of its own: after `timeout` the group (the plugin and the `iptables` or IPAM plugin it
/// runs) is killed and the plugin reaped (DeadlineExceeded). A failure carries the plugin's
/// CNI error message.
pub async fn run(
    binary: &Path,
    env: &[(&'static str, String)],
    stdin: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>> {
    let name = binary
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let cmd_name = env
        .iter()
        .find(|(k, _)| *k == "CNI_COMMAND")
        .map(|(_, v)| v.as_str())
        .unwrap_or("?");
    let what = format!("CNI plugin {name} {cmd_name}");
    let mut child = tokio::process::Command::new(binary)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::internal(format!("{what}: spawn {}: {e}", binary.display())))?;
    let mut input = child.stdin.take();
    let data = stdin.to_vec();
    #[cfg(feature = "failpoints")]
    let point = format!("cni.{}.plugin-running", cmd_name.to_lowercase());
    let writer = tokio::spawn(async move {
        if let Some(w) = input.as_mut() {
            // A plugin that exits without reading its stdin is not an error here.
            let _ = w.write_all(&data).await;
        }
        // The plugin has its whole input: it runs on whatever happens to the daemon now.
        crate::failpoint!(point);
    });
    let reader = |pipe: Option<tokio::process::ChildStdout>| {
        tokio::spawn(async move {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf).await;
            }
            buf
        })
    };
    let out = reader(child.stdout.take());
    let err_pipe = child.stderr.take();
    let err = tokio::spawn(async move {
        let mut buf = Vec::new();
        if let Some(mut p) = err_pipe {
            let _ = p.read_to_end(&mut buf).await;
        }
        buf
    });
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return Err(Error::internal(format!("{what}: wait: {e}"))),
        Err(_) => {
            // Our unreaped child: its pid, and so its group id, cannot have been reused.
            if let Some(pgid) = child
                .id()
                .and_then(|p| rustix::process::Pid::from_raw(p as i32))
            {
                let _ = rustix::process::kill_process_group(pgid, rustix::process::Signal::KILL);
            }
            let _ = child.kill().await;
            writer.abort();
            out.abort();
            err.abort();
            return Err(Error::new(
                ErrorKind::DeadlineExceeded,
                format!("{what}: timed out after {timeout:?}; killed"),
            ));
        }
    };
    writer.abort();
    // A grandchild could hold the pipes open: do not wait for them forever.
    let grace = Duration::from_secs(2);
    let stdout = tokio::time::timeout(grace, out)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    let stderr = tokio::time::timeout(grace, err)
        .await
        .ok()
        .and_then(|r| r.ok())
        .unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(Error::internal(format!(
            "{what}: {}",
            error_message(&stdout, &stderr, &status.to_string())
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> PodNetwork {
        PodNetwork {
            id: "sb1".into(),
            netns: "/run/x/ns/net".into(),
            name: "web".into(),
            namespace: "default".into(),
            uid: "u-1".into(),
            ..Default::default()
        }
    }

    #[test]
    fn env_has_every_cni_variable() {
        let e = env(
            Command::Del,
            &pod(),
            "eth0",
            Path::new("/run/x/ns/net"),
            &[PathBuf::from("/opt/cni/bin"), PathBuf::from("/usr/lib/cni")],
        );
        let get = |k: &str| e.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        assert_eq!(get("CNI_COMMAND").as_deref(), Some("DEL"));
        assert_eq!(get("CNI_CONTAINERID").as_deref(), Some("sb1"));
        assert_eq!(get("CNI_NETNS").as_deref(), Some("/run/x/ns/net"));
        assert_eq!(get("CNI_IFNAME").as_deref(), Some("eth0"));
        assert_eq!(
            get("CNI_PATH").as_deref(),
            Some("/opt/cni/bin:/usr/lib/cni")
        );
        assert_eq!(
            get("CNI_ARGS").as_deref(),
            Some("IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=sb1;K8S_POD_UID=u-1")
        );
    }

    #[test]
    fn plugins_are_found_in_order_and_must_be_executable() {
        use std::os::unix::fs::PermissionsExt;
        let (a, b) = (
            tempfile::tempdir().expect("a"),
            tempfile::tempdir().expect("b"),
        );
        let dirs = [a.path().to_path_buf(), b.path().to_path_buf()];
        std::fs::write(a.path().join("bridge"), "").expect("write");
        std::fs::write(b.path().join("bridge"), "").expect("write");
        std::fs::set_permissions(
            b.path().join("bridge"),
            std::fs::Permissions::from_mode(0o755),
        )
        .expect("chmod");
        // a/bridge is not executable: b/bridge is the one.
        assert_eq!(
            find_plugin("bridge", &dirs).expect("found"),
            b.path().join("bridge")
        );
        let e = find_plugin("portmap", &dirs).expect_err("missing");
        assert!(e.to_string().contains("\"portmap\" not found"), "{e}");
    }

    fn script(dir: &Path, body: &str) -> PathBuf {
        let p = dir.join("plugin");
        crate::testutil::script(&p, &format!("#!/bin/sh\n{body}\n"));
        p
    }

    #[tokio::test]
    async fn a_slow_plugin_is_killed_at_the_timeout_with_what_it_runs() {
        let dir = tempfile::tempdir().expect("tmp");
        let pidfile = dir.path().join("pid");
        let childfile = dir.path().join("child");
        // The plugin's own child (as iptables under bridge) must not outlive the call.
        let p = script(
            dir.path(),
            &format!(
                "sleep 30 & echo $! > {}; echo $$ > {}; wait",
                childfile.display(),
                pidfile.display()
            ),
        );
        let t = std::time::Instant::now();
        let e = run(
            &p,
            &[("CNI_COMMAND", "ADD".into())],
            b"{}",
            Duration::from_millis(300),
        )
        .await
        .expect_err("timeout");
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        for file in [&pidfile, &childfile] {
            let pid: i32 = std::fs::read_to_string(file)
                .expect("pid")
                .trim()
                .parse()
                .expect("int");
            // Gone, or a zombie its new parent has yet to reap (a SIGKILL lands in a moment:
            // on a loaded machine the test may look first).
            let stat = || std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            let deadline = std::time::Instant::now() + Duration::from_secs(2);
            while !(stat().is_empty() || stat().contains(") Z"))
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(Duration::from_millis(10));
            }
            let stat = stat();
            assert!(
                stat.is_empty() || stat.contains(") Z"),
                "{} {pid} still runs after the timeout: {stat}",
                file.display()
            );
        }
    }

    #[tokio::test]
    async fn stdin_reaches_the_plugin_and_errors_are_reported() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = script(dir.path(), "cat");
        let out = run(&p, &[], b"{\"a\":1}", Duration::from_secs(5))
            .await
            .expect("ok");
        assert_eq!(out, b"{\"a\":1}");
        let p = script(
            dir.path(),
            "echo '{\"code\":7,\"msg\":\"bad config\"}'; exit 1",
        );
        let e = run(
            &p,
            &[("CNI_COMMAND", "ADD".into())],
            b"",
            Duration::from_secs(5),
        )
        .await
        .expect_err("fails");
        assert!(
            e.to_string().contains("plugin ADD: bad config (code 7)"),
            "{e}"
        );
    }
}
