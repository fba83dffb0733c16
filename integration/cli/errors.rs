//! The client commands' errors, from the built binary with no daemon: what can be checked locally is said before the socket is dialled, and an unreachable daemon is named with what to do next.

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context};

use crate::support::daemon::BOSUN;
use crate::support::trial;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cli::errors::local_mistakes_are_named_before_the_daemon_is_dialled",
            &[],
            local_mistakes_are_named_before_the_daemon_is_dialled,
        ),
        trial(
            "cli::errors::an_unreachable_daemon_is_named_with_what_to_do",
            &[],
            an_unreachable_daemon_is_named_with_what_to_do,
        ),
    ]
}

/// Runs `bosun --socket <socket> ARGS`, which must fail; returns its stderr.
fn fails(socket: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(BOSUN)
        .arg("--socket")
        .arg(socket)
        .args(args)
        .env_remove("BOSUN_SOCKET")
        .output()
        .with_context(|| format!("run {BOSUN}"))?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(!out.status.success(), "bosun {args:?} succeeded: {stderr}");
    Ok(stderr)
}

fn local_mistakes_are_named_before_the_daemon_is_dialled() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("bosun.sock");
    let missing = dir.path().join("missing.yaml");
    let missing = missing.to_str().context("utf-8 path")?;
    let tar = dir.path().join("missing.tar");
    let tar = tar.to_str().context("utf-8 path")?;
    for (args, want) in [
        (
            vec!["pod", "apply", "-f", missing],
            "missing.yaml: no such file",
        ),
        (vec!["image", "import", tar], "archive"),
        (
            vec!["image", "pull", "--creds", "alice", "busybox"],
            "USER:PASSWORD",
        ),
        (vec!["pod", "delete", "web", "--force"], "--grace-period 0"),
        (
            vec!["pod", "condition", "set", "web", "Ready=maybe"],
            "TYPE=True",
        ),
        (vec!["pod", "get", "-l", "app"], "only k=v"),
        (vec!["port-forward", "pod", "x:80"], "bad port pair"),
    ] {
        let stderr = fails(&socket, &args)?;
        ensure!(
            stderr.contains(want),
            "bosun {args:?}: want {want:?}: {stderr}"
        );
        ensure!(
            !stderr.contains("bosun daemon at"),
            "bosun {args:?} dialled the daemon first: {stderr}"
        );
    }
    Ok(())
}

fn an_unreachable_daemon_is_named_with_what_to_do() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("bosun.sock");
    let manifest = dir.path().join("web.yaml");
    std::fs::write(&manifest, "apiVersion: v1\nkind: Pod\n")?;
    let manifest = manifest.to_str().context("utf-8 path")?;
    let commands: [&[&str]; 9] = [
        &["version"],
        &["image", "ls"],
        &["pod", "get"],
        &["pod", "apply", "-f", manifest],
        &["pod", "logs", "web"],
        &["node", "describe"],
        &["exec", "ctr", "--", "true"],
        &["attach", "ctr"],
        &["port-forward", "pod", "8080:80"],
    ];
    for args in commands {
        let stderr = fails(&socket, args)?;
        for want in [
            socket.to_str().context("utf-8 path")?,
            "does not exist",
            "systemctl start bosun",
            "--socket",
        ] {
            ensure!(
                stderr.contains(want),
                "bosun {args:?}: want {want:?}: {stderr}"
            );
        }
    }
    Ok(())
}
