//! Supervised-pod fixtures: a daemon with `[pod]` dirs in its scratch dir, `bosun pod` CLI calls, and polling a pod's JSON until a condition holds.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::{ContainerStateWaiting, ContainerStatus, Pod, PodCondition};

use super::cri;
use super::manifest::{busybox, PodManifest};
use super::Daemon;

/// A daemon for supervised-pod tests: `[pod]` dirs and the cgroup parent under its scratch
/// dir, back-off starting at 1 s capped at `backoff_max` s, plus `extra` TOML (top-level keys).
pub fn daemon(backoff_max: u64, extra: &str) -> Result<Daemon> {
    node_daemon(backoff_max, extra, "eviction_hard = {}")
}

/// [`daemon`] with `node` as its `[node]` keys (pod cgroups always below the daemon's own
/// cgroup parent, so nothing outlives it). [`daemon`] turns eviction off: a CI machine short
/// of disk must not evict other tests' pods.
pub fn node_daemon(backoff_max: u64, extra: &str, node: &str) -> Result<Daemon> {
    node_daemon_after(backoff_max, extra, node, |_| Ok(()))
}

/// [`node_daemon`], started once `before` has prepared its scratch dir.
pub fn node_daemon_after(
    backoff_max: u64,
    extra: &str,
    node: &str,
    before: impl FnOnce(&std::path::Path) -> Result<()>,
) -> Result<Daemon> {
    let config = supervisor_config(backoff_max, extra, node);
    let d = cri::daemon_after(&config, before)?;
    cri::import(&d, "busybox")?;
    Ok(d)
}

/// The config of a daemon for supervised-pod tests: `[pod]` dirs and the cgroup parent under
/// its scratch dir, back-off from 1 s up to `backoff_max` s, `extra` top-level keys, `node` as
/// its `[node]` keys (pod cgroups always below the daemon's own cgroup parent).
pub fn supervisor_config(backoff_max: u64, extra: &str, node: &str) -> String {
    format!(
        "default_cgroup_parent = \"@CGROUP@\"\n{extra}\n[pod]\nlog_dir = \"@DIR@/pod-logs\"\n\
         configmap_dir = \"@DIR@/configmaps\"\nsecret_dir = \"@DIR@/secrets\"\n\
         manifest_dir = \"@DIR@/manifests\"\nbackoff_initial_secs = 1\nbackoff_max_secs = {backoff_max}\n\
         [node]\ncgroup_root = \"@CGROUP@\"\npriority_class_dir = \"@DIR@/priorityclasses\"\n{node}\n"
    )
}

/// The busybox test image reference.
pub const BUSYBOX: &str = "bosun.test/busybox:latest";

/// Runs `bosun pod ARGS`; returns stdout, or an error with stderr.
pub fn cli(d: &Daemon, args: &[&str]) -> Result<String> {
    let mut all = vec!["pod"];
    all.extend_from_slice(args);
    let out = d.cli(&all)?;
    ensure!(
        out.status.success(),
        "bosun pod {}: {}: {}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs `bosun pod ARGS` expecting failure; returns stderr.
pub fn cli_fails(d: &Daemon, args: &[&str]) -> Result<String> {
    let mut all = vec!["pod"];
    all.extend_from_slice(args);
    let out = d.cli(&all)?;
    ensure!(
        !out.status.success(),
        "bosun pod {} succeeded: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A `bosun pod ARGS` that keeps running (`logs -f`, `get -w`): kill it when done.
pub struct Follower {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<String>,
}

impl Follower {
    /// Starts `bosun pod ARGS`; its stdout lines arrive through [`Follower::line`].
    pub fn start(d: &Daemon, args: &[&str]) -> Result<Follower> {
        let mut all = vec!["pod"];
        all.extend_from_slice(args);
        let mut child = d.cli_spawn(&all)?;
        let stdout = child.stdout.take().context("no stdout")?;
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Follower { child, lines })
    }

    /// The next line, waiting until `deadline`; `None` at EOF or past it.
    pub fn line(&self, deadline: Instant) -> Option<String> {
        let left = deadline.saturating_duration_since(Instant::now());
        self.lines.recv_timeout(left).ok()
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Writes `yaml` into the scratch dir and applies it; returns the CLI's output.
pub fn apply(d: &Daemon, yaml: &str) -> Result<String> {
    let f = manifest_file(d, yaml)?;
    cli(d, &["apply", "-f", &f.to_string_lossy()])
}

/// Writes `yaml` to a new file in the scratch dir.
pub fn manifest_file(d: &Daemon, yaml: &str) -> Result<PathBuf> {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let f = d.dir().join(format!("manifest-{n}.yaml"));
    std::fs::write(&f, yaml)?;
    Ok(f)
}

/// The pod as `bosun pod get NAME -o json` shows it; `None` when it does not exist.
pub fn get(d: &Daemon, name: &str) -> Result<Option<Pod>> {
    let out = d.cli(&["pod", "get", name, "-o", "json"])?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("not found") {
            return Ok(None);
        }
        bail!("bosun pod get {name}: {err}");
    }
    Ok(Some(
        serde_json::from_slice(&out.stdout).context("bosun pod get -o json")?,
    ))
}

/// Polls the pod every 200 ms until `pred` holds (returns the pod) or `secs` pass (error
/// naming `what`, with the last JSON seen and the daemon log).
pub fn wait_for(
    d: &Daemon,
    name: &str,
    secs: u64,
    what: &str,
    pred: impl Fn(&Pod) -> bool,
) -> Result<Pod> {
    let deadline = Instant::now() + super::scaled(Duration::from_secs(secs));
    let mut last = None;
    while Instant::now() < deadline {
        if let Some(p) = get(d, name)? {
            if pred(&p) {
                return Ok(p);
            }
            last = Some(p);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let json = last
        .map(|p| serde_json::to_string_pretty(&p.status).unwrap_or_default())
        .unwrap_or_else(|| "<no pod>".into());
    cri::with_log(
        d,
        Err(anyhow::anyhow!(
            "pod {name}: {what} not reached in {secs}s; last status:\n{json}"
        )),
    )
}

/// Waits until the pod is gone; returns how long that took.
pub fn wait_gone(d: &Daemon, name: &str, secs: u64) -> Result<Duration> {
    let t = Instant::now();
    while t.elapsed() < super::scaled(Duration::from_secs(secs)) {
        if get(d, name)?.is_none() {
            return Ok(t.elapsed());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    cri::with_log(
        d,
        Err(anyhow::anyhow!("pod {name} still exists after {secs}s")),
    )
}

/// The pod's phase.
pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The pod's condition `kind`.
fn find_condition<'a>(p: &'a Pod, kind: &str) -> Option<&'a PodCondition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == kind))
}

/// A condition's status ("True"/"False"/"").
pub fn condition(p: &Pod, kind: &str) -> String {
    find_condition(p, kind)
        .map(|c| c.status.clone())
        .unwrap_or_default()
}

/// A condition's lastTransitionTime (RFC 3339), "" when absent.
pub fn transition(p: &Pod, kind: &str) -> String {
    find_condition(p, kind)
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

/// The status of container (or init container) `name`.
pub fn container(p: &Pod, name: &str) -> Option<ContainerStatus> {
    let s = p.status.as_ref()?;
    s.container_statuses
        .iter()
        .flatten()
        .chain(s.init_container_statuses.iter().flatten())
        .find(|c| c.name == name)
        .cloned()
}

/// Container `name` is running.
pub fn running(p: &Pod, name: &str) -> bool {
    container(p, name)
        .and_then(|c| c.state)
        .is_some_and(|s| s.running.is_some())
}

/// Container `name`'s restart count.
pub fn restarts(p: &Pod, name: &str) -> i32 {
    container(p, name).map_or(0, |c| c.restart_count)
}

/// Container `name`'s waiting state, if it waits.
fn waiting(p: &Pod, name: &str) -> Option<ContainerStateWaiting> {
    container(p, name)
        .and_then(|c| c.state)
        .and_then(|s| s.waiting)
}

/// Container `name`'s waiting reason (empty when not waiting).
pub fn waiting_reason(p: &Pod, name: &str) -> String {
    waiting(p, name).and_then(|w| w.reason).unwrap_or_default()
}

/// Container `name`'s waiting message (empty when not waiting).
pub fn waiting_message(p: &Pod, name: &str) -> String {
    waiting(p, name).and_then(|w| w.message).unwrap_or_default()
}

/// The events of the pod as `bosun pod events NAME` prints them.
pub fn events(d: &Daemon, name: &str) -> Result<String> {
    cli(d, &["events", name])
}

/// Deletes the pod (waiting until it is gone) and checks the node is clean.
pub fn delete_and_check(d: &Daemon, name: &str) -> Result<()> {
    cli(d, &["delete", name, "--grace-period", "1"])?;
    wait_gone(d, name, 20)?;
    cri::assert_clean(d)
}

/// Wall-clock seconds (f64) in a marker file written by `date +%s.%N` or `cat /proc/uptime`-free
/// busybox: the file holds `<label> <seconds>` lines; returns the seconds of `label`.
pub fn marker(path: &std::path::Path, label: &str) -> Result<f64> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == label).then(|| v.trim().parse::<f64>().ok()).flatten()
        })
        .with_context(|| format!("no {label} in {}:\n{text}", path.display()))
}

/// A pod `name` with restartPolicy `policy` whose container writes a termination message and
/// exits `code` after half a second.
pub fn one_shot(name: &str, policy: &str, code: i32) -> String {
    PodManifest::new(name)
        .restart_policy(policy)
        .grace(1)
        .container(busybox("main").sh(&format!(
            "sleep 0.5; echo bye > /dev/termination-log; exit {code}"
        )))
        .yaml()
}
