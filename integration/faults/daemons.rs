//! Two daemons on one host (issue 28 item 2): a daemon whose embedded network would share a
//! bridge, subnet, table or lease directory with a running daemon's refuses to start, naming
//! that daemon and the `[network]` keys to change; a daemon whose pods use a CNI config is
//! never blocked by another daemon's embedded network, nor touches it (also while that one is
//! down).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Pod};
use crate::support::daemon::BOSUN;
use crate::support::{block_on, leaks, runc_bin, scratch, trial, Daemon, Need};

/// Root, runc, the test images and the CNI plugins.
const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "faults::a_daemon_sharing_a_running_daemons_embedded_network_refuses_to_start",
            NEEDS,
            sharing_refused,
        ),
        trial(
            "faults::a_daemon_on_a_cni_config_is_never_blocked_by_anothers_embedded_network",
            NEEDS,
            cni_daemon_unblocked,
        ),
    ]
}

/// Runs `bosun daemon` on a fresh root, state and socket with `network` as its `[network]`
/// section (an empty conf dir: the embedded network is the active one); returns its output
/// once it exits (within 60 s), or fails when it serves instead.
fn second_daemon(network: &str) -> Result<String> {
    let dir = scratch()?;
    let conf_dir = dir.path().join("cni-net.d");
    std::fs::create_dir_all(&conf_dir)?;
    let runc = runc_bin().context("runc")?;
    let driver = crate::support::cgroup::driver().name();
    let config = format!(
        "runtime = {:?}\ncgroup_driver = {driver:?}\n[network]\nconf_dir = {:?}\n{network}",
        runc.display().to_string(),
        conf_dir.display().to_string()
    );
    let path = dir.path().join("config.toml");
    std::fs::write(&path, config)?;
    let socket = dir.path().join("bosun.sock");
    let mut child = Command::new(BOSUN)
        .arg("--socket")
        .arg(&socket)
        .arg("daemon")
        .arg("--config")
        .arg(&path)
        .arg("--root")
        .arg(dir.path().join("root"))
        .arg("--state")
        .arg(dir.path().join("state"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let t = Instant::now();
    loop {
        if child.try_wait()?.is_some() {
            let out = child.wait_with_output()?;
            return Ok(format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let serving = std::os::unix::net::UnixStream::connect(&socket).is_ok();
        if serving || t.elapsed() > Duration::from_secs(60) {
            if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
            }
            let out = child.wait_with_output()?;
            bail!(
                "the second daemon started (serving: {serving}); its output:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The `[network]` keys of `d`'s embedded network (name, bridge, subnet, data_dir).
fn embedded_keys(d: &Daemon) -> String {
    let n = d.net();
    format!(
        "name = {:?}\nbridge = {:?}\nsubnet = {:?}\ndata_dir = {:?}\n",
        n.name,
        n.bridge,
        n.subnet(),
        n.data_dir.display().to_string()
    )
}

/// A daemon on the same embedded network as a running one (the same `[network]` keys, as two
/// daemons with the default config have), then one on a different bridge, table and lease
/// directory but an overlapping subnet: both refuse to start, naming the first daemon (pid,
/// root, socket), what they would share and the keys to change. The first keeps working.
fn sharing_refused() -> Result<()> {
    let d = cri::daemon()?;
    let pid = d.pid().context("pid")?;
    let out = second_daemon(&embedded_keys(&d))?;
    for want in [
        format!("pid {pid}"),
        format!("root {}", d.root().display()),
        format!("socket {}", d.socket().display()),
        format!("bridge {}", d.net().bridge),
        format!("subnet {}", d.net().subnet()),
        format!("table inet {}", d.net().name),
        "[network] bridge, subnet, name, data_dir".to_string(),
    ] {
        ensure!(out.contains(&want), "{want:?} missing from:\n{out}");
    }
    // Only the subnet shared (10.A.B.0/24 inside 10.A.0.0/16).
    let subnet = d.net().subnet();
    let a = subnet.split('.').nth(1).unwrap_or("0");
    let keys = format!(
        "name = \"bosun-it-other\"\nbridge = \"btother0\"\nsubnet = \"10.{a}.0.0/16\"\n\
         data_dir = \"/var/tmp/bosun-it-other-ipam\"\n"
    );
    let out = second_daemon(&keys)?;
    ensure!(
        out.contains(&format!("pid {pid}")) && out.contains("[network] subnet ("),
        "subnet clash not named:\n{out}"
    );
    // What a second daemon that was not refused would have made.
    let _ = std::fs::remove_dir_all("/var/tmp/bosun-it-other-ipam");
    let _ = Command::new("nft")
        .args(["delete", "table", "inet", "bosun-it-other"])
        .stderr(Stdio::null())
        .status();
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "first")).await?;
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(pod.id)
        }),
    )
    .and_then(|id| leaks::assert_none(&d, &[id]))
}

/// Rewrites `d`'s config file so its embedded network is `keys` (lines `name = …`,
/// `bridge = …`, `subnet = …`, `data_dir = …` replaced); takes effect at the next start.
fn reconfigure(d: &Daemon, keys: &str) -> Result<()> {
    let path = d.dir().join("config.toml");
    let text = std::fs::read_to_string(&path)?;
    let replaced: Vec<String> = text
        .lines()
        .map(|l| {
            let key = l.split(" =").next().unwrap_or_default();
            match keys.lines().find(|k| k.starts_with(&format!("{key} ="))) {
                Some(k) if ["name", "bridge", "subnet", "data_dir"].contains(&key) => k.to_string(),
                _ => l.to_string(),
            }
        })
        .collect();
    std::fs::write(&path, replaced.join("\n") + "\n")?;
    Ok(())
}

/// A pod on daemon `d` (a CNI config): runs READY with an address, then is removed.
fn pod_round_trip(d: &Daemon, name: &str) -> Result<String> {
    cri::with_log(
        d,
        block_on(async {
            let mut rt = cri::client(d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(d, name)).await?;
            let st = cri::pod_status(&mut rt, &pod.id).await?;
            let ip = st.network.map(|n| n.ip).unwrap_or_default();
            ensure!(d.net().contains(&ip), "pod {} got {ip:?}", pod.id);
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(pod.id)
        }),
    )
}

/// `pod` of daemon `d` (embedded network) still holds its lease and its veth.
fn still_attached(d: &Daemon, pod: &Pod) -> Result<()> {
    let leased = d.net().journal().contains_key(&pod.id);
    let veth = bosun::network::native::veth_name(&pod.id);
    let up = Path::new("/sys/class/net").join(&veth).exists();
    ensure!(
        leased && up,
        "the first daemon's pod lost its network (lease {leased}, veth {veth} {up}); journal {:?}",
        d.net().journal_lines()
    );
    Ok(())
}

/// The case: the second daemon's `[network]` names the first's embedded network (as
/// both would with the default config), its pods use a CNI config. Its pods run and are
/// removed (no `leases.lock is held by another bosun daemon`), nothing is left of them; it
/// never touches the first's lease journal, also when it restarts while the first is down;
/// the first's pod keeps its address throughout and is removed cleanly at the end.
fn cni_daemon_unblocked() -> Result<()> {
    let mut first = cri::daemon()?;
    let pod = cri::with_log(
        &first,
        block_on(async {
            let mut rt = cri::client(&first).await?;
            cri::run_pod(&mut rt, cri::pod_config(&first, "embedded")).await
        }),
    )?;
    let mut second = cri::daemon()?;
    second.net().write_conflist()?;
    reconfigure(&second, &embedded_keys(&first))?;
    second.restart()?;
    let mut seen = vec![pod_round_trip(&second, "cni")?];
    leaks::assert_none(&second, &seen)?;
    still_attached(&first, &pod)?;
    // The first daemon down (its pod runs on): the second restarts and must leave its
    // journal alone (the lease journal is the first's until its root is gone).
    first.terminate();
    second.restart()?;
    seen.push(pod_round_trip(&second, "cni-again")?);
    leaks::assert_none(&second, &seen)?;
    still_attached(&first, &pod)?;
    first.restart()?;
    still_attached(&first, &pod)?;
    cri::with_log(
        &first,
        block_on(async {
            let mut rt = cri::client(&first).await?;
            let st = cri::pod_status(&mut rt, &pod.id).await?;
            ensure!(
                st.state == pb::PodSandboxState::SandboxReady as i32,
                "after the restarts: {st:?}"
            );
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(&first, &[pod.id])
}
