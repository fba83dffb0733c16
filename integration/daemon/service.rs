//! Daemon behaviour over the socket: Version, Status, RuntimeConfig, socket mode, single instance, signals.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};

use anyhow::{ensure, Context};
use bosun::proto::runtime::v1 as pb;

use crate::support::{block_on, trial, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "daemon::version_status_and_runtime_config",
            &[Need::Root],
            version_status_and_runtime_config,
        ),
        trial(
            "daemon::socket_is_0660_and_second_daemon_is_refused",
            &[Need::Root],
            socket_is_0660_and_second_daemon_is_refused,
        ),
        trial(
            "daemon::sigterm_exits_zero_and_stale_socket_is_replaced",
            &[Need::Root],
            sigterm_exits_zero_and_stale_socket_is_replaced,
        ),
        trial(
            "daemon::sigterm_does_not_wait_forever_for_a_silent_client",
            &[Need::Root],
            sigterm_does_not_wait_forever_for_a_silent_client,
        ),
        trial(
            "daemon::checkpoint_of_an_unknown_container_is_not_found",
            &[Need::Root],
            checkpoint_of_an_unknown_container_is_not_found,
        ),
        trial(
            "daemon::bad_config_is_refused_with_the_key",
            &[Need::Root],
            bad_config_is_refused_with_the_key,
        ),
        trial(
            "daemon::bad_node_config_is_refused_before_anything_is_made",
            &[Need::Root],
            bad_node_config_is_refused_before_anything_is_made,
        ),
    ]
}

fn version_status_and_runtime_config() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    block_on(async {
        let mut rt = d.runtime().await?;
        let v = rt
            .version(pb::VersionRequest::default())
            .await?
            .into_inner();
        ensure!(v.runtime_name == "bosun", "{v:?}");
        ensure!(v.runtime_api_version == "v1", "{v:?}");
        ensure!(
            !v.version.is_empty() && v.runtime_version.contains(env!("CARGO_PKG_VERSION")),
            "{v:?}"
        );
        ensure!(
            v.runtime_version.contains("commit"),
            "commit missing: {v:?}"
        );

        let st = rt
            .status(pb::StatusRequest { verbose: true })
            .await?
            .into_inner();
        let conds = st.status.context("status missing")?.conditions;
        let get = |t: &str| conds.iter().find(|c| c.r#type == t).cloned();
        let ready = get("RuntimeReady").context("RuntimeReady missing")?;
        ensure!(ready.status, "{ready:?}");
        // No CNI config in the test's conf dir: the embedded default network, by name.
        let net = get("NetworkReady").context("NetworkReady missing")?;
        ensure!(
            net.status && net.message.contains(&d.net().name),
            "NetworkReady must be true on the embedded network: {net:?}"
        );
        let cfg = st.info.get("config").context("verbose info lacks config")?;
        ensure!(
            cfg.contains(&d.root().display().to_string()),
            "effective config not shown: {cfg}"
        );
        let net: serde_json::Value = serde_json::from_str(
            st.info
                .get("network")
                .context("verbose info lacks network")?,
        )?;
        ensure!(
            net["ready"] == true && net["name"] == d.net().name.as_str(),
            "verbose network info: {net}"
        );
        let addr = st
            .info
            .get("streamingAddress")
            .context("no streaming address")?;
        ensure!(addr.starts_with("127.0.0.1:"), "streaming address {addr}");

        let rc = rt
            .runtime_config(pb::RuntimeConfigRequest {})
            .await?
            .into_inner();
        // The driver the test daemons run with (cgroupfs unless the lane asks for systemd),
        // answered explicitly (the enum's default is SYSTEMD).
        let want = match crate::support::cgroup::driver() {
            crate::support::cgroup::Driver::Cgroupfs => pb::CgroupDriver::Cgroupfs,
            crate::support::cgroup::Driver::Systemd => pb::CgroupDriver::Systemd,
        };
        ensure!(
            rc.linux.map(|l| l.cgroup_driver) == Some(want as i32),
            "RuntimeConfig must answer {want:?}: {:?}",
            rc.linux
        );
        let out = d.cli(&["version"])?;
        ensure!(out.status.success(), "{out:?}");
        ensure!(
            String::from_utf8_lossy(&out.stdout).contains("daemon: bosun"),
            "{out:?}"
        );
        Ok(())
    })
}

fn socket_is_0660_and_second_daemon_is_refused() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    let meta = std::fs::metadata(d.socket())?;
    ensure!(meta.file_type().is_socket());
    ensure!(
        meta.permissions().mode() & 0o777 == 0o660,
        "mode {:o}",
        meta.permissions().mode()
    );
    let out = std::process::Command::new(crate::support::daemon::BOSUN)
        .arg("--socket")
        .arg(d.dir().join("other.sock"))
        .args(["daemon", "--root"])
        .arg(d.root())
        .arg("--state")
        .arg(d.state())
        .output()?;
    ensure!(!out.status.success(), "second daemon must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("another bosun daemon") && err.contains(&d.pid().unwrap_or(0).to_string()),
        "{err}"
    );
    ensure!(
        std::fs::symlink_metadata(d.socket()).is_ok(),
        "first daemon's socket must stay"
    );
    // Same root, another state dir: still refused (two daemons must never share a store).
    let out = std::process::Command::new(crate::support::daemon::BOSUN)
        .arg("--socket")
        .arg(d.dir().join("third.sock"))
        .args(["daemon", "--root"])
        .arg(d.root())
        .arg("--state")
        .arg(d.dir().join("other-state"))
        .output()?;
    ensure!(!out.status.success(), "a daemon sharing the root must fail");
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(err.contains("root dir"), "{err}");
    Ok(())
}

fn sigterm_exits_zero_and_stale_socket_is_replaced() -> anyhow::Result<()> {
    let mut d = Daemon::start("")?;
    let st = d.terminate().context("no exit status")?;
    ensure!(st.success(), "SIGTERM must exit 0: {st:?}\n{}", d.log());
    ensure!(!d.socket().exists(), "socket removed on clean exit");
    d.restart()?;
    d.kill9();
    ensure!(d.socket().exists(), "a crash leaves the socket behind");
    // The crashed daemon's listener can outlive it for a moment in a child it forked that has
    // not exec'd yet: connections succeed and nobody serves them. The harness must not take
    // that listener (here the test's own) for the restarted daemon's.
    std::fs::remove_file(d.socket())?;
    let stale = std::os::unix::net::UnixListener::bind(d.socket())?;
    d.restart()?;
    let conn = std::os::unix::net::UnixStream::connect(d.socket())?;
    let peer = crate::support::daemon::listener_pid(&conn);
    ensure!(
        peer == d.pid(),
        "serving: the listener of pid {peer:?}, not the daemon {:?}",
        d.pid()
    );
    drop(stale);
    block_on(async {
        d.runtime()
            .await?
            .version(pb::VersionRequest::default())
            .await?;
        Ok(())
    })
}

fn sigterm_does_not_wait_forever_for_a_silent_client() -> anyhow::Result<()> {
    let mut d = Daemon::start("")?;
    // Connected, never speaks HTTP/2, never reads a GOAWAY.
    let _silent = std::os::unix::net::UnixStream::connect(d.socket())?;
    let t = std::time::Instant::now();
    let st = d.terminate().context("no exit status")?;
    ensure!(st.success(), "exit status {st:?}");
    ensure!(
        t.elapsed() < std::time::Duration::from_secs(8),
        "took {:?}",
        t.elapsed()
    );
    Ok(())
}

fn checkpoint_of_an_unknown_container_is_not_found() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    block_on(async {
        let err = d
            .runtime()
            .await?
            .checkpoint_container(pb::CheckpointContainerRequest {
                container_id: "0123456789ab".into(),
                location: "/tmp/bosun-it-unknown.tar".into(),
                ..Default::default()
            })
            .await
            .expect_err("no such container");
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        ensure!(err.message().contains("0123456789ab"), "{err:?}");
        Ok(())
    })
}

fn bad_config_is_refused_with_the_key() -> anyhow::Result<()> {
    let dir = crate::support::scratch()?;
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "sockett = \"/x\"\n")?;
    let out = std::process::Command::new(crate::support::daemon::BOSUN)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--state")
        .arg(dir.path().join("state"))
        .output()?;
    ensure!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("sockett") && err.contains("config.toml"),
        "{err}"
    );
    Ok(())
}

/// Issue 26: `[node]` is checked when the config is read, not when the supervisor opens after
/// the locks, recovery and the streaming server: the daemon leaves no trace.
fn bad_node_config_is_refused_before_anything_is_made() -> anyhow::Result<()> {
    let dir = crate::support::scratch()?;
    let cfg = dir.path().join("config.toml");
    std::fs::write(&cfg, "[node]\nkube_reserved = { memory = \"lots\" }\n")?;
    let (root, state, socket) = (
        dir.path().join("root"),
        dir.path().join("state"),
        dir.path().join("bosun.sock"),
    );
    let out = std::process::Command::new(crate::support::daemon::BOSUN)
        .arg("--socket")
        .arg(&socket)
        .args(["daemon", "--config"])
        .arg(&cfg)
        .arg("--root")
        .arg(&root)
        .arg("--state")
        .arg(&state)
        .output()?;
    ensure!(
        !out.status.success(),
        "a bad [node] key must stop the daemon"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        err.contains("[node] kube_reserved.memory") && err.contains("config.toml"),
        "{err}"
    );
    for made in [&root, &state, &socket] {
        ensure!(!made.exists(), "{} was made: {err}", made.display());
    }
    Ok(())
}
