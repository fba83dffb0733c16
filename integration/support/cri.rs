//! CRI fixtures: pod and container configs unique per test, lifecycle helpers over the
//! RuntimeService, CRI log parsing, and the leftover checks (mounts, monitors, cgroups, runc
//! state, pinned namespaces) every CRI test ends with. The scans here are also what
//! [`Daemon`]'s drop uses to clean up after a failed test.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use super::{images_dir, runc_bin, wait_until, Daemon, Need};

/// A CRI RuntimeService client.
pub type Rt = RuntimeServiceClient<Channel>;

/// What every CRI test needs: root, runc and the test images.
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];

/// The namespace every test pod lives in.
pub const NAMESPACE: &str = "bosun-it";

// ------------------------------------------------------------------------------------------
// Daemon and images

/// A daemon for a CRI test (runc from [`runc_bin`]) plus `extra` TOML.
pub fn daemon_with(extra: &str) -> Result<Daemon> {
    daemon_after(extra, |_| Ok(()))
}

/// [`daemon_with`], started once `before` has prepared its scratch dir.
pub fn daemon_after(extra: &str, before: impl FnOnce(&Path) -> Result<()>) -> Result<Daemon> {
    let runc = runc_bin().context("no runc")?;
    let config = format!("runtime = {:?}\n{extra}", runc.display().to_string());
    Daemon::start_after(&config, before)
}

/// A daemon for a CRI test.
pub fn daemon() -> Result<Daemon> {
    daemon_with("")
}

/// `r`, with the last lines of the daemon's log added to an error (what the daemon said about
/// the failed step).
pub fn with_log<T>(d: &Daemon, r: Result<T>) -> Result<T> {
    r.map_err(|e| {
        let log = d.log();
        // The runtime's own lines, not the HTTP/2 transport's debug chatter.
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                !["h2::", "hyper", "tower::", "tonic::transport"]
                    .iter()
                    .any(|n| l.contains(n))
            })
            .collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        anyhow::anyhow!("{e:#}\n--- daemon log (last 40 runtime lines):\n{tail}")
    })
}

/// Imports test image `name` (`test-images/<name>.oci.tar`) and returns the reference to use
/// in a ContainerConfig: `bosun.test/<name>:latest`.
pub fn import(d: &Daemon, name: &str) -> Result<String> {
    let reference = format!("bosun.test/{name}:latest");
    let archive = images_dir().join(format!("{name}.oci.tar"));
    let archive = archive.display().to_string();
    let out = d.cli(&["image", "import", "--tag", &reference, &archive])?;
    ensure!(
        out.status.success(),
        "bosun image import {archive}: {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(reference)
}

/// A RuntimeService client that accepts large answers (ExecSync returns up to 2 × 16 MiB).
pub async fn client(d: &Daemon) -> Result<Rt> {
    Ok(d.runtime().await?.max_decoding_message_size(128 << 20))
}

// ------------------------------------------------------------------------------------------
// Configs

static SEQ: AtomicU32 = AtomicU32::new(0);

/// `<prefix>-<pid>-<n>`: unique in this test process (pod names, uids).
pub fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// The namespace options the kubelet sends for an ordinary pod: own network and IPC, one pid
/// namespace per container (`pid`: CONTAINER) or per pod (POD: shareProcessNamespace).
pub fn namespaces(pid: pb::NamespaceMode) -> pb::NamespaceOption {
    pb::NamespaceOption {
        network: pb::NamespaceMode::Pod as i32,
        pid: pid as i32,
        ipc: pb::NamespaceMode::Pod as i32,
        ..Default::default()
    }
}

/// A pod config like the kubelet's, unique per call: name/uid from [`unique`], namespace
/// [`NAMESPACE`], log directory in the test's scratch dir, the test's cgroup parent, pid
/// namespace per container.
pub fn pod_config(d: &Daemon, name: &str) -> pb::PodSandboxConfig {
    let name = unique(name);
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: name.clone(),
            uid: format!("uid-{name}"),
            namespace: NAMESPACE.into(),
            attempt: 0,
        }),
        hostname: name.clone(),
        log_directory: d.dir().join("logs").join(&name).display().to_string(),
        linux: Some(pb::LinuxPodSandboxConfig {
            cgroup_parent: d.cgroup_parent(),
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(pb::NamespaceMode::Container)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Makes the pod share one pid namespace (shareProcessNamespace: a pod init is PID 1). Apply
/// before creating containers: [`container_config`] copies the pod's namespace options.
pub fn share_pid(pod: &mut pb::PodSandboxConfig) {
    if let Some(sc) = pod.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
        sc.namespace_options = Some(namespaces(pb::NamespaceMode::Pod));
    }
}

/// A container config like the kubelet's: metadata `name`, `image`, log path `<name>.log`
/// (relative to the pod's log directory), the pod's namespace options, the image's command.
pub fn container_config(pod: &Pod, name: &str, image: &str) -> pb::ContainerConfig {
    let ns = pod
        .config
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.clone());
    pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        log_path: format!("{name}.log"),
        linux: Some(pb::LinuxContainerConfig {
            resources: None,
            security_context: Some(pb::LinuxContainerSecurityContext {
                namespace_options: ns,
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// [`container_config`] running `sh -c script`.
pub fn sh_config(pod: &Pod, name: &str, image: &str, script: &str) -> pb::ContainerConfig {
    let mut c = container_config(pod, name, image);
    c.command = vec!["sh".into(), "-c".into(), script.into()];
    c
}

/// The container's security context (created if missing).
pub fn security(c: &mut pb::ContainerConfig) -> &mut pb::LinuxContainerSecurityContext {
    c.linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
}

/// The container's resources (created if missing).
pub fn resources(c: &mut pb::ContainerConfig) -> &mut pb::LinuxContainerResources {
    c.linux
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default)
}

/// A `KeyValue` env entry.
pub fn env(key: &str, value: &str) -> pb::KeyValue {
    pb::KeyValue {
        key: key.into(),
        value: value.as_bytes().to_vec(),
    }
}

/// A string map from pairs.
pub fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ------------------------------------------------------------------------------------------
// Lifecycle helpers

/// A running pod and the config it was run with.
#[derive(Debug, Clone)]
pub struct Pod {
    pub id: String,
    pub config: pb::PodSandboxConfig,
}

impl Pod {
    /// The pod's log directory.
    pub fn log_dir(&self) -> PathBuf {
        PathBuf::from(&self.config.log_directory)
    }
    /// Where the log of a container created with `c` is.
    pub fn log_of(&self, c: &pb::ContainerConfig) -> PathBuf {
        self.log_dir().join(&c.log_path)
    }
}

/// RunPodSandbox with `config` (runtime handler "").
pub async fn run_pod(rt: &mut Rt, config: pb::PodSandboxConfig) -> Result<Pod> {
    let id = rt
        .run_pod_sandbox(pb::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        })
        .await
        .context("RunPodSandbox")?
        .into_inner()
        .pod_sandbox_id;
    ensure!(!id.is_empty(), "RunPodSandbox returned an empty id");
    Ok(Pod { id, config })
}

/// PodSandboxStatus.
pub async fn pod_status(rt: &mut Rt, id: &str) -> Result<pb::PodSandboxStatus> {
    rt.pod_sandbox_status(pb::PodSandboxStatusRequest {
        pod_sandbox_id: id.into(),
        verbose: false,
    })
    .await
    .with_context(|| format!("PodSandboxStatus {id}"))?
    .into_inner()
    .status
    .context("PodSandboxStatus without a status")
}

/// StopPodSandbox then RemovePodSandbox.
pub async fn remove_pod(rt: &mut Rt, id: &str) -> Result<()> {
    rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .with_context(|| format!("StopPodSandbox {id}"))?;
    rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .with_context(|| format!("RemovePodSandbox {id}"))?;
    Ok(())
}

/// CreateContainer in `pod`.
pub async fn create(rt: &mut Rt, pod: &Pod, c: &pb::ContainerConfig) -> Result<String> {
    let name = c.metadata.as_ref().map(|m| m.name.clone());
    let id = try_create(rt, pod, c)
        .await
        .with_context(|| format!("CreateContainer {name:?}"))?;
    ensure!(!id.is_empty(), "CreateContainer returned an empty id");
    Ok(id)
}

/// CreateContainer in `pod`, the gRPC status kept (for refusals).
pub async fn try_create(
    rt: &mut Rt,
    pod: &Pod,
    c: &pb::ContainerConfig,
) -> std::result::Result<String, tonic::Status> {
    rt.create_container(pb::CreateContainerRequest {
        pod_sandbox_id: pod.id.clone(),
        config: Some(c.clone()),
        sandbox_config: Some(pod.config.clone()),
    })
    .await
    .map(|r| r.into_inner().container_id)
}

/// `r` must have failed with `code` and a message holding every one of `words`.
pub fn refused<T: std::fmt::Debug>(
    what: &str,
    r: std::result::Result<T, tonic::Status>,
    code: tonic::Code,
    words: &[&str],
) -> Result<()> {
    let e = match r {
        Ok(v) => bail!("{what}: accepted ({v:?})"),
        Err(e) => e,
    };
    ensure!(
        e.code() == code && words.iter().all(|w| e.message().contains(w)),
        "{what}: {:?} {:?}, want {code:?} naming {words:?}",
        e.code(),
        e.message()
    );
    Ok(())
}

/// StartContainer.
pub async fn start(rt: &mut Rt, id: &str) -> Result<()> {
    rt.start_container(pb::StartContainerRequest {
        container_id: id.into(),
    })
    .await
    .with_context(|| format!("StartContainer {id}"))?;
    Ok(())
}

/// CreateContainer then StartContainer.
pub async fn create_start(rt: &mut Rt, pod: &Pod, c: &pb::ContainerConfig) -> Result<String> {
    let id = create(rt, pod, c).await?;
    start(rt, &id).await?;
    Ok(id)
}

/// StopContainer with `timeout` seconds; returns how long the call took.
pub async fn stop(rt: &mut Rt, id: &str, timeout: i64) -> Result<Duration> {
    let t = Instant::now();
    rt.stop_container(pb::StopContainerRequest {
        container_id: id.into(),
        timeout,
    })
    .await
    .with_context(|| format!("StopContainer {id} (timeout {timeout})"))?;
    Ok(t.elapsed())
}

/// RemoveContainer.
pub async fn remove(rt: &mut Rt, id: &str) -> Result<()> {
    rt.remove_container(pb::RemoveContainerRequest {
        container_id: id.into(),
    })
    .await
    .with_context(|| format!("RemoveContainer {id}"))?;
    Ok(())
}

/// ContainerStatus.
pub async fn status(rt: &mut Rt, id: &str) -> Result<pb::ContainerStatus> {
    rt.container_status(pb::ContainerStatusRequest {
        container_id: id.into(),
        verbose: false,
    })
    .await
    .with_context(|| format!("ContainerStatus {id}"))?
    .into_inner()
    .status
    .context("ContainerStatus without a status")
}

/// The state of a status as its enum (UNKNOWN for out-of-range values).
pub fn state_of(s: &pb::ContainerStatus) -> pb::ContainerState {
    pb::ContainerState::try_from(s.state).unwrap_or(pb::ContainerState::ContainerUnknown)
}

/// Polls ContainerStatus every 50 ms until the container is in `want` (at most `secs`).
pub async fn wait_state(
    rt: &mut Rt,
    id: &str,
    want: pb::ContainerState,
    secs: u64,
) -> Result<pb::ContainerStatus> {
    let deadline = Instant::now() + super::scaled(Duration::from_secs(secs));
    loop {
        let s = status(rt, id).await?;
        if state_of(&s) == want {
            return Ok(s);
        }
        if Instant::now() > deadline {
            bail!(
                "container {id} not {want:?} after {secs} s: {:?} exit {} reason {:?} message {:?}",
                state_of(&s),
                s.exit_code,
                s.reason,
                s.message
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (at most `secs`) for the container to be EXITED.
pub async fn wait_exited(rt: &mut Rt, id: &str, secs: u64) -> Result<pb::ContainerStatus> {
    wait_state(rt, id, pb::ContainerState::ContainerExited, secs).await
}

/// Checks an EXITED status's exit code and reason.
pub fn check_exit(s: &pb::ContainerStatus, code: i32, reason: &str) -> Result<()> {
    ensure!(
        state_of(s) == pb::ContainerState::ContainerExited,
        "container {} is {:?}, not EXITED",
        s.id,
        state_of(s)
    );
    ensure!(
        s.exit_code == code && s.reason == reason,
        "container {}: exit code {} reason {:?} (message {:?}), want {code} {reason:?}",
        s.id,
        s.exit_code,
        s.reason,
        s.message
    );
    Ok(())
}

/// ListContainers with `filter`.
pub async fn list_containers(
    rt: &mut Rt,
    filter: Option<pb::ContainerFilter>,
) -> Result<Vec<pb::Container>> {
    Ok(rt
        .list_containers(pb::ListContainersRequest { filter })
        .await
        .context("ListContainers")?
        .into_inner()
        .containers)
}

/// ListPodSandbox with `filter`.
pub async fn list_pods(
    rt: &mut Rt,
    filter: Option<pb::PodSandboxFilter>,
) -> Result<Vec<pb::PodSandbox>> {
    Ok(rt
        .list_pod_sandbox(pb::ListPodSandboxRequest { filter })
        .await
        .context("ListPodSandbox")?
        .into_inner()
        .items)
}

/// ExecSync of `cmd` with `timeout` seconds (0: none).
pub async fn exec(
    rt: &mut Rt,
    id: &str,
    cmd: &[&str],
    timeout: i64,
) -> std::result::Result<pb::ExecSyncResponse, tonic::Status> {
    rt.exec_sync(pb::ExecSyncRequest {
        container_id: id.into(),
        cmd: cmd.iter().map(|s| s.to_string()).collect(),
        timeout,
    })
    .await
    .map(|r| r.into_inner())
}

/// Unix nanoseconds now (to compare with CRI timestamps).
pub fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// Seconds (for messages) of a nanosecond difference.
pub fn secs(ns: i64) -> f64 {
    ns as f64 / 1e9
}

// ------------------------------------------------------------------------------------------
// CRI log files

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// RFC3339Nano UTC timestamp.
    pub time: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// `P` (partial) or `F` (full / last piece).
    pub tag: String,
    /// The content.
    pub msg: String,
}

/// Parses a CRI log file: every line `<RFC3339Nano> <stdout|stderr> <P|F> <msg>`; the
/// timestamps never go backwards.
pub fn read_log(path: &Path) -> Result<Vec<LogLine>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("read log {}", path.display()))?;
    parse_log(&text).with_context(|| format!("log {}", path.display()))
}

/// See [`read_log`].
pub fn parse_log(text: &str) -> Result<Vec<LogLine>> {
    let mut out: Vec<LogLine> = Vec::new();
    for line in text.split_terminator('\n') {
        let mut f = line.splitn(4, ' ');
        let (Some(time), Some(stream), Some(tag), Some(msg)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            bail!("bad record {line:?}");
        };
        ensure!(is_rfc3339_nano(time), "bad timestamp in {line:?}");
        ensure!(
            stream == "stdout" || stream == "stderr",
            "bad stream in {line:?}"
        );
        ensure!(tag == "P" || tag == "F", "bad tag in {line:?}");
        if let Some(prev) = out.last() {
            ensure!(
                canonical_time(&prev.time) <= canonical_time(time),
                "timestamps go backwards: {} then {time}",
                prev.time
            );
        }
        out.push(LogLine {
            time: time.into(),
            stream: stream.into(),
            tag: tag.into(),
            msg: msg.into(),
        });
    }
    Ok(out)
}

/// The whole lines of one stream (P pieces joined up to their F).
pub fn lines_of(log: &[LogLine], stream: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in log.iter().filter(|l| l.stream == stream) {
        cur.push_str(&l.msg);
        if l.tag == "F" {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Waits (at most `secs`) until the log at `path` parses and `pred` holds for its stdout
/// lines; returns the records.
pub async fn wait_log(
    path: &Path,
    secs: u64,
    pred: impl Fn(&[String]) -> bool,
) -> Result<Vec<LogLine>> {
    let deadline = Instant::now() + super::scaled(Duration::from_secs(secs));
    loop {
        // The monitor may be writing a record right now: a reader (like the kubelet's) takes
        // only the lines that have ended, and sees the rest when they have.
        let log = match std::fs::read_to_string(path) {
            Ok(text) => {
                let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
                parse_log(whole).with_context(|| format!("log {}", path.display()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("read log {}", path.display())),
        };
        if pred(&lines_of(&log, "stdout")) {
            return Ok(log);
        }
        if Instant::now() > deadline {
            bail!(
                "log {} did not get the expected lines in {secs} s: {:?}",
                path.display(),
                lines_of(&log, "stdout")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `2006-01-02T15:04:05.999999999Z` (UTC, trailing zeros of the fraction dropped).
pub fn is_rfc3339_nano(ts: &str) -> bool {
    let Some(rest) = ts.strip_suffix('Z') else {
        return false;
    };
    if rest.len() < 19 || !rest.is_char_boundary(19) {
        return false;
    }
    let (secs, frac) = rest.split_at(19);
    let shape = secs.bytes().enumerate().all(|(i, c)| match i {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        _ => c.is_ascii_digit(),
    });
    let frac_ok = frac.is_empty()
        || frac.strip_prefix('.').is_some_and(|d| {
            (1..=9).contains(&d.len()) && d.bytes().all(|c| c.is_ascii_digit()) && !d.ends_with('0')
        });
    shape && frac_ok
}

/// A timestamp with its fraction padded to 9 digits, so strings compare in time order.
fn canonical_time(ts: &str) -> String {
    let rest = ts.trim_end_matches('Z');
    let (secs, frac) = rest.split_once('.').unwrap_or((rest, ""));
    format!("{secs}.{frac:0<9}")
}

// ------------------------------------------------------------------------------------------
// Scans of the host: mounts, processes, cgroups, runc state

/// `(mount point, fs type)` of every mount at or under `dir`, in mount order.
pub fn mounts_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mp = unescape_mount(left.split(' ').nth(4)?);
            let fs = right.split(' ').next()?.to_string();
            mp.starts_with(dir).then_some((mp, fs))
        })
        .collect()
}

/// mountinfo's octal escapes (`\040` for a space).
fn unescape_mount(s: &str) -> PathBuf {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (b[i], octal) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    let os: std::ffi::OsString = std::os::unix::ffi::OsStringExt::from_vec(out);
    PathBuf::from(os)
}

/// Every pid in /proc.
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's argv (empty for kernel threads and vanished processes).
pub fn cmdline(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            b.split(|c| *c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A process's state letter and parent pid (`None` when it is gone).
pub fn proc_state(pid: i32) -> Option<(char, i32)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let mut f = rest.split(' ');
    let state = f.next()?.chars().next()?;
    let ppid = f.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether `arg` names the path `needle` or something below it (`/x/dir` matches
/// `--root=/x/dir/root`, not `/x/dir2`).
fn mentions(arg: &str, needle: &str) -> bool {
    arg.match_indices(needle)
        .any(|(i, _)| matches!(arg.as_bytes().get(i + needle.len()), None | Some(b'/')))
}

/// Live (not zombie) processes whose argv names the path `needle` or a path below it.
pub fn processes_mentioning(needle: &str) -> Vec<i32> {
    let me = std::process::id() as i32;
    pids()
        .into_iter()
        .filter(|p| *p != me)
        .filter(|p| cmdline(*p).iter().any(|a| mentions(a, needle)))
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Live `bosun monitor --id <id>` processes.
pub fn monitors_of(id: &str) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| {
            let argv = cmdline(*p);
            argv.windows(3)
                .any(|w| w[0] == "monitor" && w[1] == "--id" && w[2] == id)
        })
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Live processes whose argv is exactly `argv` (e.g. `["sleep", "987001"]`).
pub fn processes_with_argv(argv: &[&str]) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| cmdline(*p) == argv)
        .filter(|p| proc_state(*p).is_some_and(|(s, _)| s != 'Z'))
        .collect()
}

/// Zombie children of `pid`.
pub fn zombies_of(pid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|p| proc_state(*p) == Some(('Z', pid)))
        .collect()
}

/// The cgroup directories `<hierarchy>/<parent>` (v1 hierarchies and the v2 root) that exist;
/// a systemd slice name is expanded to its path.
pub fn cgroup_parent_dirs(parent: &str) -> Vec<PathBuf> {
    let dir = super::cgroup::parent_dir(parent);
    let rel = dir.trim_start_matches('/');
    if rel.is_empty() {
        return Vec::new();
    }
    let root = Path::new("/sys/fs/cgroup");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|h| h.path().join(rel)).collect())
        .unwrap_or_default();
    dirs.push(root.join(rel));
    dirs.retain(|p| p.is_dir());
    dirs.sort();
    dirs.dedup();
    dirs
}

/// Every cgroup below the cgroup parent `parent` (deepest first), in every hierarchy.
pub fn cgroups_below(parent: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = cgroup_parent_dirs(parent);
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                out.push(e.path());
                stack.push(e.path());
            }
        }
    }
    out.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    out
}

/// The cgroups of container `id` under `parent`, in every hierarchy (`<id>`, or the
/// `bosun-<id>.scope` of the systemd driver).
pub fn cgroups_of(parent: &str, id: &str) -> Vec<PathBuf> {
    cgroup_parent_dirs(parent)
        .into_iter()
        .flat_map(|d| [d.join(id), d.join(format!("bosun-{id}.scope"))])
        .filter(|d| d.is_dir())
        .collect()
}

/// The pid of container `id`'s init as runc records it (`runc state`).
pub fn init_pid(d: &Daemon, id: &str) -> Result<i64> {
    let runc = runc_bin().context("runc")?;
    let out = std::process::Command::new(runc)
        .arg("--root")
        .arg(d.state().join("runc"))
        .args(["state", id])
        .output()?;
    ensure!(
        out.status.success(),
        "runc state {id}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    v["pid"].as_i64().context("runc state without a pid")
}

/// The ids runc knows under `<state>/runc`.
pub fn runc_containers(state: &Path) -> Vec<String> {
    let root = state.join("runc");
    let Some(runc) = runc_bin() else {
        return Vec::new();
    };
    if !root.is_dir() {
        return Vec::new();
    }
    std::process::Command::new(runc)
        .arg("--root")
        .arg(&root)
        .args(["list", "-q"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The names in a directory (empty when it does not exist).
pub fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// What a daemon left behind: mounts under its root and state, sandbox and container dirs,
/// monitors and pod inits, cgroups under the test's cgroup parent. Empty when clean.
pub fn leftovers(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    for dir in [d.state(), d.root()] {
        for (mp, fs) in mounts_under(&dir) {
            // A file system a test gave the daemon as its root (a small disk) is no leftover.
            if mp == d.root() {
                continue;
            }
            out.push(format!("mount {} ({fs})", mp.display()));
        }
    }
    for dir in [
        d.state().join("sandboxes"),
        d.state().join("containers"),
        d.root().join("sandboxes"),
        d.root().join("containers"),
        // Removals delete in the background: nothing may stay there.
        d.state().join("trash"),
        d.root().join("trash"),
    ] {
        for e in entries(&dir) {
            out.push(format!("dir {}", dir.join(e).display()));
        }
    }
    for p in processes_mentioning(&d.state().display().to_string()) {
        if Some(p as u32) != d.pid() {
            out.push(format!("process {p}: {:?}", cmdline(p)));
        }
    }
    for cg in cgroups_below(&d.cgroup_parent()) {
        if !is_qos_skeleton(&cg) {
            out.push(format!("cgroup {}", cg.display()));
        }
    }
    // systemd driver: scopes (running or failed) of the daemon's slice and the slices below it.
    if let Some(base) = d.cgroup_parent().strip_suffix(".slice") {
        for unit in super::cgroup::units_with_prefix(&format!("{base}-")) {
            let name = unit.split_whitespace().next().unwrap_or_default();
            if !is_qos_slice(name) {
                out.push(format!("unit {unit}"));
            }
        }
    }
    out
}

/// `kubepods` and its `burstable`/`besteffort` cgroups: the node's, made with its first
/// supervised pod and kept while the daemon lives (as the kubelet keeps them); the daemon's
/// drop removes them with its cgroup parent. cgroupfs names them `kubepods/burstable`, the
/// systemd driver `…-kubepods.slice/…-kubepods-burstable.slice`.
fn is_qos_skeleton(cg: &Path) -> bool {
    let name = cg.file_name().unwrap_or_default();
    let parent = cg.parent().and_then(|p| p.file_name()).unwrap_or_default();
    name == "kubepods"
        || (parent == "kubepods" && (name == "burstable" || name == "besteffort"))
        || is_qos_slice(&name.to_string_lossy())
}

/// A systemd driver's QoS slice: `<parent>-kubepods.slice` and its burstable/besteffort.
fn is_qos_slice(name: &str) -> bool {
    [
        "-kubepods.slice",
        "-kubepods-burstable.slice",
        "-kubepods-besteffort.slice",
    ]
    .iter()
    .any(|s| name.ends_with(s))
}

/// Checks nothing is left of any sandbox or container (waiting up to 10 s for exits to
/// settle): no mount, pinned namespace, sandbox/container dir, monitor, pod init, cgroup or
/// runc container.
pub fn assert_clean(d: &Daemon) -> Result<()> {
    let clean = wait_until(10, || leftovers(d).is_empty());
    let mut left = leftovers(d);
    left.extend(
        runc_containers(&d.state())
            .into_iter()
            .map(|c| format!("runc container {c}")),
    );
    let r = if clean && left.is_empty() {
        Ok(())
    } else {
        Err(anyhow::anyhow!("left behind:\n  {}", left.join("\n  ")))
    };
    with_log(d, r)
}

/// Asks a live daemon to stop and remove every pod (each call bounded by `timeout`); errors
/// are ignored. Runs on its own thread and runtime, so it works from any context.
pub fn remove_all_pods(socket: &Path, timeout: Duration) {
    let socket = socket.to_path_buf();
    let worker = std::thread::Builder::new().spawn(move || {
        let Ok(rt) = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        else {
            return;
        };
        rt.block_on(async move {
            let connect = bosun::cli::client::connect(&socket);
            let Ok(Ok(ch)) = tokio::time::timeout(timeout, connect).await else {
                return;
            };
            // Supervised pods first, through their own API: stopping their sandboxes over CRI
            // would only make the supervisor re-create them.
            let mut pods = bosun::proto::bosun::v1::pods_client::PodsClient::new(ch.clone());
            if let Ok(Ok(list)) = tokio::time::timeout(
                timeout,
                pods.list(bosun::proto::bosun::v1::ListPodsRequest::default()),
            )
            .await
            {
                for v in list.into_inner().pods {
                    let Ok(p) = serde_json::from_str::<serde_json::Value>(&v.pod_json) else {
                        continue;
                    };
                    let field = |k: &str| p["metadata"][k].as_str().unwrap_or_default().to_string();
                    let _ = tokio::time::timeout(
                        timeout,
                        pods.delete(bosun::proto::bosun::v1::DeletePodRequest {
                            namespace: field("namespace"),
                            name: field("name"),
                            grace_period: Some(0),
                            force: true,
                        }),
                    )
                    .await;
                }
            }
            let mut c: Rt = RuntimeServiceClient::new(ch);
            let Ok(Ok(list)) = tokio::time::timeout(
                timeout,
                c.list_pod_sandbox(pb::ListPodSandboxRequest { filter: None }),
            )
            .await
            else {
                return;
            };
            for pod in list.into_inner().items {
                let _ = tokio::time::timeout(
                    timeout,
                    c.stop_pod_sandbox(pb::StopPodSandboxRequest {
                        pod_sandbox_id: pod.id.clone(),
                    }),
                )
                .await;
                let _ = tokio::time::timeout(
                    timeout,
                    c.remove_pod_sandbox(pb::RemovePodSandboxRequest {
                        pod_sandbox_id: pod.id,
                    }),
                )
                .await;
            }
        });
    });
    if let Ok(w) = worker {
        let _ = w.join();
    }
}

/// After the daemon is gone: deletes every runc container under `<state>/runc`, kills every
/// process whose argv names `dir` (monitors, pod inits, stuck runc calls) and every process
/// left in the cgroups under `cgroup_parent`, lazily unmounts everything under `dir` (deepest
/// first) and removes the cgroups (deepest first, then the parent itself). Never panics.
pub fn scrub(dir: &Path, state: &Path, cgroup_parent: &str) {
    use rustix::process::{kill_process, Pid, Signal};
    let kill = |pid: i32| {
        if let Some(p) = Pid::from_raw(pid) {
            let _ = kill_process(p, Signal::KILL);
        }
    };
    if let Some(runc) = runc_bin() {
        for id in runc_containers(state) {
            let _ = std::process::Command::new(&runc)
                .arg("--root")
                .arg(state.join("runc"))
                .args(["delete", "--force", &id])
                .output();
        }
    }
    let needle = dir.display().to_string();
    let all_dead = wait_until(2, || {
        let left = processes_mentioning(&needle);
        left.iter().for_each(|p| kill(*p));
        left.is_empty()
    });
    if !all_dead {
        eprintln!(
            "cleanup: processes of {needle} survive SIGKILL: {:?}",
            processes_mentioning(&needle)
        );
    }
    let mut mounts: Vec<PathBuf> = mounts_under(dir).into_iter().map(|(m, _)| m).collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    mounts.dedup();
    for mp in mounts {
        // Stacked mounts on one point need one unmount each.
        for _ in 0..8 {
            if rustix::mount::unmount(&mp, rustix::mount::UnmountFlags::DETACH).is_err() {
                break;
            }
        }
    }
    // The systemd driver's slice: stopping it stops every scope and slice below it.
    super::cgroup::stop_slice(cgroup_parent);
    let mut cgroups = cgroups_below(cgroup_parent);
    cgroups.extend(cgroup_parent_dirs(cgroup_parent));
    let removed = wait_until(5, || {
        cgroups.retain(|cg| {
            let procs = std::fs::read_to_string(cg.join("cgroup.procs")).unwrap_or_default();
            procs
                .lines()
                .filter_map(|l| l.trim().parse::<i32>().ok())
                .for_each(kill);
            std::fs::remove_dir(cg).is_err() && cg.exists()
        });
        cgroups.is_empty()
    });
    if !removed {
        eprintln!("cleanup: cgroups not removed: {cgroups:?}");
    }
}
