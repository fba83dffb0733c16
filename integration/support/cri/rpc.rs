//! The CRI RuntimeService client and one helper per RPC a test makes: run, create, start, stop,
//! remove, status, list, exec; waiting for a container state and checking an exit.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::support::Daemon;

/// A CRI RuntimeService client.
pub type Rt = RuntimeServiceClient<Channel>;

/// A RuntimeService client that accepts large answers (ExecSync returns up to 2 × 16 MiB).
pub async fn client(d: &Daemon) -> Result<Rt> {
    Ok(d.runtime().await?.max_decoding_message_size(128 << 20))
}

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
    run_pod_on(rt, "", config).await
}

/// RunPodSandbox on runtime handler `handler`.
pub async fn run_pod_on(rt: &mut Rt, handler: &str, config: pb::PodSandboxConfig) -> Result<Pod> {
    let id = rt
        .run_pod_sandbox(pb::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: handler.into(),
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
    let deadline = Instant::now() + crate::support::scaled(Duration::from_secs(secs));
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

/// A number for argv that no other test uses.
pub fn unique_secs(base: u32) -> String {
    format!("{}", base + std::process::id() % 90_000)
}

/// A started busybox container running `script` in a fresh pod (`shared`: one pid namespace
/// for the pod, the CRI default and critest's); waits for its `ready` line.
pub async fn target(
    d: &Daemon,
    rt: &mut Rt,
    busybox: &str,
    name: &str,
    shared: bool,
    script: &str,
) -> Result<(Pod, pb::ContainerConfig, String)> {
    let mut config = super::pod_config(d, name);
    if shared {
        super::share_pid(&mut config);
    }
    let pod = run_pod(rt, config).await?;
    let c = super::sh_config(&pod, "target", busybox, script);
    let id = create_start(rt, &pod, &c).await?;
    super::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;
    Ok((pod, c, id))
}

/// `err` carries a gRPC status with `code`.
pub fn code_is(err: &anyhow::Error, code: tonic::Code) -> Result<()> {
    let status = err
        .chain()
        .find_map(|e| e.downcast_ref::<tonic::Status>())
        .with_context(|| format!("not a gRPC error: {err:#}"))?;
    ensure!(
        status.code() == code,
        "want {code:?}, got {:?}: {}",
        status.code(),
        status.message()
    );
    Ok(())
}

/// The gRPC status `err` carries, if any.
pub fn status_of(err: &anyhow::Error) -> Option<&tonic::Status> {
    err.chain().find_map(|e| e.downcast_ref::<tonic::Status>())
}

/// Creates and starts `c` in `pod`, waits for its exit (10 s), checks exit 0 and returns its
/// stdout lines.
pub async fn run_to_completion(
    rt: &mut Rt,
    pod: &Pod,
    c: &pb::ContainerConfig,
) -> Result<Vec<String>> {
    Ok(run_to_completion_status(rt, pod, c).await?.0)
}

/// [`run_to_completion`], also returning the final status.
pub async fn run_to_completion_status(
    rt: &mut Rt,
    pod: &Pod,
    c: &pb::ContainerConfig,
) -> Result<(Vec<String>, pb::ContainerStatus)> {
    let id = create_start(rt, pod, c).await?;
    let s = wait_exited(rt, &id, 10).await?;
    let log = super::read_log(&pod.log_of(c))?;
    let out = super::lines_of(&log, "stdout");
    let name = c
        .metadata
        .as_ref()
        .map(|m| m.name.clone())
        .unwrap_or_default();
    check_exit(&s, 0, "Completed").with_context(|| {
        format!(
            "container {name}: stdout {out:?} stderr {:?}",
            super::lines_of(&log, "stderr")
        )
    })?;
    Ok((out, s))
}

/// Verbose Status's `info[key]`, parsed as JSON.
pub async fn status_info(rt: &mut Rt, key: &str) -> Result<serde_json::Value> {
    let st = rt
        .status(pb::StatusRequest { verbose: true })
        .await
        .context("Status")?
        .into_inner();
    let json = st
        .info
        .get(key)
        .with_context(|| format!("verbose Status has no {key}"))?;
    serde_json::from_str(json).with_context(|| format!("Status {key}: {json}"))
}
