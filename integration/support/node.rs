//! Supervised pods on a small node: a daemon whose allocatable is 500m cpu and 512 MiB, pods
//! with requests and limits, admission refusals, `bosun node describe`, QoS parents.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;

use super::cgroup::{self, Driver};
use super::cri::{self, NEEDS};
use super::pods::{self, BUSYBOX};
use super::{Daemon, Need};

/// A supervised-pod test's needs and `more`.
pub fn needs_and(more: Need) -> &'static [Need] {
    Vec::leak(NEEDS.iter().copied().chain([more]).collect())
}

/// Allocatable of 500m cpu, 512 MiB and `pods` pods, whatever the machine has (reservations
/// take the rest; no eviction thresholds).
pub fn small_node(pods: u32, more: &str) -> Result<Daemon> {
    small_node_evicting(pods, "{}", more)
}

/// [`small_node`] with `eviction_hard` (a TOML inline table); the hard memory.available
/// threshold is also taken from allocatable and watched on `kubepods` (512 MiB).
pub fn small_node_evicting(pods: u32, eviction_hard: &str, more: &str) -> Result<Daemon> {
    small_node_reserving(pods, eviction_hard, "", more)
}

/// [`small_node_evicting`] with `reserve` (`, pid = "N"`) added to `system_reserved`.
pub fn small_node_reserving(
    pods: u32,
    eviction_hard: &str,
    reserve: &str,
    more: &str,
) -> Result<Daemon> {
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as i64;
    let meminfo = std::fs::read_to_string("/proc/meminfo")?;
    let total_kib: i64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("MemTotal")?;
    let node = format!(
        "max_pods = {pods}\neviction_hard = {eviction_hard}\n\
         kube_reserved = {{ cpu = \"{}m\" }}\n\
         system_reserved = {{ memory = \"{}\"{reserve} }}\n{more}",
        cpus * 1000 - 500,
        total_kib * 1024 - (512 << 20)
    );
    pods::node_daemon(10, "", &node)
}

/// A pod with one sleeping container and `resources` (YAML flow map) and `spec` lines.
pub fn pod(name: &str, resources: &str, spec: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  terminationGracePeriodSeconds: 2
{spec}  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "trap 'exit 0' TERM; while true; do sleep 0.2; done"]
    resources: {resources}
"#
    )
}

/// Applies `yaml` and waits (60 s) for pod `name`'s container `main` to run.
pub fn run(d: &Daemon, yaml: &str, name: &str) -> Result<Pod> {
    pods::apply(d, yaml)?;
    pods::wait_for(d, name, 60, "running", |p| pods::running(p, "main"))
}

/// The pod status's reason and message.
pub fn reason_message(p: &Pod) -> (String, String) {
    let s = p.status.clone().unwrap_or_default();
    (s.reason.unwrap_or_default(), s.message.unwrap_or_default())
}

/// Applies `yaml` and waits for the pod to be refused: phase Failed, `reason`, `message`,
/// no container ever started, a Warning event with the reason.
pub fn refused(d: &Daemon, yaml: &str, name: &str, reason: &str, message: &str) -> Result<()> {
    pods::apply(d, yaml)?;
    let p = pods::wait_for(d, name, 30, "Failed", |p| pods::phase(p) == "Failed")?;
    let (r, m) = reason_message(&p);
    ensure!(r == reason, "{name}: reason {r:?}, want {reason:?}");
    ensure!(m == message, "{name}: message {m:?}, want {message:?}");
    let started = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.state.as_ref().is_some_and(|s| s.waiting.is_none()));
    ensure!(!started, "{name}: a container ran: {:?}", p.status);
    let events = pods::cli(d, &["events", name])?;
    ensure!(
        events.contains("Warning") && events.contains(reason),
        "{name}: no Warning {reason} event in:\n{events}"
    );
    Ok(())
}

/// `bosun node describe`'s text.
pub fn node_describe(d: &Daemon) -> Result<String> {
    let out = d.cli(&["node", "describe"])?;
    ensure!(
        out.status.success(),
        "bosun node describe: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `text` has a line containing every one of `parts`.
pub fn has_line(text: &str, parts: &[&str]) -> Result<()> {
    ensure!(
        text.lines().any(|l| parts.iter().all(|p| l.contains(p))),
        "no line with {parts:?} in:\n{text}"
    );
    Ok(())
}

/// Each of `names` still runs its container `container` (eviction passed it by).
pub fn untouched(d: &Daemon, names: &[&str], container: &str) -> Result<()> {
    for name in names {
        let p = pods::get(d, name)?.with_context(|| name.to_string())?;
        ensure!(
            pods::phase(&p) == "Running" && pods::running(&p, container),
            "{name} was touched: {:?}",
            p.status
        );
    }
    Ok(())
}

/// Deletes pods `names` (waiting until they are gone) and checks the node is clean.
pub fn delete_all(d: &Daemon, names: &[&str]) -> Result<()> {
    let mut args = vec!["delete", "--wait=true"];
    args.extend_from_slice(names);
    pods::cli(d, &args)?;
    cri::assert_clean(d)
}

/// Writes the priority classes the preemption tests use into `dir`.
pub fn write_classes(dir: &Path) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    std::fs::write(
        dir.join("classes.yaml"),
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 100\n\
         ---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n",
    )?;
    Ok(())
}

/// The cgroup parent (a path for cgroupfs, a slice for systemd) the kubelet's naming gives
/// QoS cgroup `parts` (`["kubepods", "burstable", "pod<uid>"]`) below the daemon's `parent`:
/// `<parent>/kubepods/burstable/pod<uid>`, or `<base>-kubepods-burstable-pod<uid_>.slice`.
pub fn qos_parent(parent: &str, parts: &[&str]) -> String {
    match cgroup::driver() {
        Driver::Cgroupfs => format!("{}/{}", parent.trim_end_matches('/'), parts.join("/")),
        Driver::Systemd => {
            let base = parent.strip_suffix(".slice").unwrap_or(parent);
            format!("{base}-{}.slice", parts.join("-"))
        }
    }
}
