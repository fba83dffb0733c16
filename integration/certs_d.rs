//! containerd's registry host directories (`certs.d/<host>/hosts.toml`) with real registries on loopback: a mirror only hosts.toml names, a plain-HTTP server, a TLS mirror trusted through `ca`, a file edited while the daemon runs, and bosun's own `[registry.hosts]` winning.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::ctr::Ctr;
use crate::support::registry::Registry;
use crate::support::{block_on, image_field, trial, Daemon, Need};

const NEEDS: &[Need] = &[Need::Root, Need::Images, Need::Registry];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "certs_d::a_mirror_and_a_plain_http_server_named_only_in_hosts_toml",
            NEEDS,
            mirror_and_plain_http_server,
        ),
        trial(
            "certs_d::a_tls_mirror_trusted_through_its_ca_file",
            NEEDS,
            tls_mirror_with_ca,
        ),
        trial(
            "certs_d::ctr_pull_with_hosts_dir_tlscacert_and_skip_verify",
            NEEDS,
            ctr_pull_flags,
        ),
        trial(
            "certs_d::hosts_toml_edited_while_the_daemon_runs",
            NEEDS,
            edited_while_running,
        ),
    ]
}

/// A daemon whose host directory is `<its dir>/certs.d`, plus `extra` TOML.
fn daemon(extra: &str) -> Result<Daemon> {
    Daemon::start(&format!(
        "[registry]\nconfig_path = \"@DIR@/certs.d\"\nconnect_timeout_secs = 2\n{extra}"
    ))
}

/// Writes `<d's certs.d>/<host>/hosts.toml`.
fn hosts_toml(d: &Daemon, host: &str, text: &str) -> Result<()> {
    let dir = d.dir().join("certs.d").join(host);
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("hosts.toml"), text).with_context(|| dir.display().to_string())
}

/// CRI PullImage of `image`: its image id, or the error's message.
fn pull(d: &Daemon, image: &str) -> Result<std::result::Result<String, String>> {
    block_on(async {
        let r = d
            .images()
            .await?
            .pull_image(pb::PullImageRequest {
                image: Some(pb::ImageSpec {
                    image: image.into(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await;
        Ok(r.map(|r| r.into_inner().image_ref)
            .map_err(|s| s.message().to_string()))
    })
}

fn busybox_id() -> String {
    image_field("busybox", "image_id")
}

fn mirror_and_plain_http_server() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let d = daemon("")?;
    // kind's local-registry recipe: the image's host does not resolve; only the mirror can
    // serve it.
    hosts_toml(
        &d,
        "mirror-origin.invalid",
        &format!(
            "[host.\"http://127.0.0.1:1\"]\n  capabilities = [\"pull\", \"resolve\"]\n\
             [host.\"http://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
            reg.host()
        ),
    )?;
    let got = pull(&d, "mirror-origin.invalid/bosun/busybox:latest")?;
    ensure!(got.as_deref() == Ok(busybox_id().as_str()), "{got:?}");
    // `server` alone: the registry itself, over plain HTTP, somewhere else.
    hosts_toml(
        &d,
        "registry.invalid:5000",
        &format!("server = \"http://{}\"\n", reg.host()),
    )?;
    let got = pull(&d, "registry.invalid:5000/bosun/busybox:latest")?;
    ensure!(got.as_deref() == Ok(busybox_id().as_str()), "{got:?}");
    // `_default` covers hosts without their own directory.
    hosts_toml(
        &d,
        "_default",
        &format!("[host.\"http://{}\"]\n", reg.host()),
    )?;
    let got = pull(&d, "elsewhere.invalid/bosun/busybox:latest")?;
    ensure!(got.as_deref() == Ok(busybox_id().as_str()), "{got:?}");
    Ok(())
}

fn tls_mirror_with_ca() -> Result<()> {
    let reg = Registry::start_tls()?;
    reg.push(&["busybox"])?;
    let d = daemon("")?;
    let mirror = format!(
        "[host.\"https://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n",
        reg.host()
    );
    hosts_toml(&d, "tls-origin.invalid", &mirror)?;
    let untrusted = pull(&d, "tls-origin.invalid/bosun/busybox:latest")?;
    ensure!(
        untrusted.is_err(),
        "an unknown CA must not be trusted: {untrusted:?}"
    );
    // The CA file, relative to the host directory, as containerd resolves it.
    let dir = d.dir().join("certs.d/tls-origin.invalid");
    std::fs::copy(reg.ca_file(), dir.join("mirror-ca.pem"))?;
    hosts_toml(
        &d,
        "tls-origin.invalid",
        &format!("{mirror}  ca = \"mirror-ca.pem\"\n"),
    )?;
    let got = pull(&d, "tls-origin.invalid/bosun/busybox:latest")?;
    ensure!(got.as_deref() == Ok(busybox_id().as_str()), "{got:?}");
    Ok(())
}

fn edited_while_running() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let d = daemon(&format!(
        "[registry.hosts.\"configured.invalid\"]\nmirrors = [\"http://{}\"]\n",
        reg.host()
    ))?;
    let image = "edit-origin.invalid/bosun/busybox:latest";
    let before = pull(&d, image)?;
    ensure!(before.is_err(), "no hosts file yet: {before:?}");
    hosts_toml(
        &d,
        "edit-origin.invalid",
        &format!("[host.\"http://{}\"]\n", reg.host()),
    )?;
    let got = pull(&d, image)?;
    ensure!(
        got.as_deref() == Ok(busybox_id().as_str()),
        "read again without a restart: {got:?}"
    );
    // A broken file is refused, naming the file and the key, not skipped.
    hosts_toml(
        &d,
        "edit-origin.invalid",
        &format!("[host.\"http://{}\"]\nskip-verify = true\n", reg.host()),
    )?;
    let file = d.dir().join("certs.d/edit-origin.invalid/hosts.toml");
    let refused = pull(&d, "edit-origin.invalid/bosun/busybox:v2")?;
    let e = refused
        .err()
        .context("a broken hosts file must fail the pull")?;
    ensure!(
        e.contains(&file.display().to_string()) && e.contains("skip-verify: unknown key"),
        "{e}"
    );
    ensure!(
        d.log().contains("registry host settings refused"),
        "logged once per change"
    );
    // bosun's own [registry.hosts] wins over a hosts file for the same host.
    hosts_toml(&d, "configured.invalid", "[host.\"http://127.0.0.1:1\"]\n")?;
    let got = pull(&d, "configured.invalid/bosun/busybox:latest")?;
    ensure!(got.as_deref() == Ok(busybox_id().as_str()), "{got:?}");
    check_removed(&d, &file)
}

/// With its hosts file gone, the host is the registry itself again (unreachable here).
fn check_removed(d: &Daemon, file: &Path) -> Result<()> {
    std::fs::remove_file(file)?;
    let gone = pull(d, "edit-origin.invalid/bosun/busybox:v3")?;
    let e = gone.err().context("the mirror must be forgotten")?;
    ensure!(e.contains("edit-origin.invalid"), "{e}");
    Ok(())
}

/// `ctr images pull`'s own registry flags, on a daemon that reads no host directory: a
/// `--hosts-dir` naming a TLS mirror with its CA, `--tlscacert` and `-k` for a TLS registry.
fn ctr_pull_flags() -> Result<()> {
    let reg = Registry::start_tls()?;
    reg.push(&["busybox"])?;
    let d = Daemon::start("[registry]\nconfig_path = \"\"\nconnect_timeout_secs = 2\n")?;
    let ctr = Ctr::new(&d)?;
    let hosts_dir = d.dir().join("ctr-hosts");
    let dir = hosts_dir.join("tls-ctr.invalid");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join("hosts.toml"),
        format!(
            "[host.\"https://{}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  ca = \"{}\"\n",
            reg.host(),
            reg.ca_file().display()
        ),
    )?;
    let image = "tls-ctr.invalid/bosun/busybox:latest";
    let e = ctr.refused(&format!("-n k8s.io images pull {image}"))?;
    ensure!(
        e.contains("tls-ctr.invalid"),
        "the daemon has no host directory: {e}"
    );
    ctr.ok(
        &format!(
            "-n k8s.io images pull --hosts-dir {} {image}",
            hosts_dir.display()
        ),
        None,
    )?;
    ensure!(
        ctr.names()?.iter().any(|n| n == image),
        "{:?}",
        ctr.names()?
    );
    let direct = reg.image("busybox");
    ctr.refused(&format!("-n k8s.io images pull {direct}"))?;
    ensure!(
        !ctr.names()?.contains(&direct),
        "an untrusted registry gave nothing"
    );
    ctr.ok(
        &format!(
            "-n k8s.io images pull --tlscacert {} {direct}",
            reg.ca_file().display()
        ),
        None,
    )?;
    ctr.ok(&format!("-n k8s.io images rm {direct}"), None)?;
    ctr.ok(&format!("-n k8s.io images pull -k {direct}"), None)?;
    ensure!(ctr.names()?.contains(&direct), "{:?}", ctr.names()?);
    Ok(())
}
