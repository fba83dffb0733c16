//! The CRI calls the bench times, kubelet-shaped requests, and the guard that removes every pod.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use bosun::proto::runtime::v1 as pb;
use pb::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use crate::daemons::{Daemon, MARK};

/// The busybox test image, as both runtimes name it after import.
pub const BUSYBOX: &str = "bench.test/busybox:latest";
/// The label every pod of this run carries (value: the run tag), for the clean-up sweep.
const RUN_LABEL: &str = "bosun-bench-run";
/// How long one clean-up call may take before the guard gives up on it.
const CLEANUP_CALL: Duration = Duration::from_secs(30);

/// `sleep 3600`.
pub const SLEEP: [&str; 2] = ["sleep", "3600"];
/// Exits 0 on SIGTERM (after the current 0.1 s sleep).
pub const TERM_HONOURING: [&str; 3] = [
    "sh",
    "-c",
    "trap \"exit 0\" TERM; while :; do sleep 0.1; done",
];
/// Ignores SIGTERM: only SIGKILL ends it.
pub const TERM_IGNORING: [&str; 3] = ["sh", "-c", "trap '' TERM; while :; do sleep 0.1; done"];

/// A pod the bench created: its id and the config it was created with (CreateContainer needs
/// it again).
pub struct Pod {
    pub id: String,
    pub config: pb::PodSandboxConfig,
}

/// A RuntimeService client that remembers every pod it created and, on drop, stops and removes
/// those still there (and any other pod carrying this run's label).
pub struct Cri {
    client: RuntimeServiceClient<Channel>,
    /// `/<MARK>-<pid>-<kind>`: the cgroup parent of every pod.
    cgroup_root: String,
    /// The kubelet's part: pod log directories.
    log_root: PathBuf,
    tag: String,
    pods: Vec<String>,
    seq: usize,
    /// A [`Cri::fork`]: it runs on a worker task, where blocking in drop would stall the
    /// runtime's only worker (and with it every connection), so it cleans up nothing.
    forked: bool,
}

impl Cri {
    pub fn new(d: &Daemon, log_root: &Path) -> Cri {
        let tag = format!("{}-{}", std::process::id(), d.kind.name());
        Cri {
            client: d.runtime(),
            cgroup_root: format!("/{MARK}-{tag}"),
            log_root: log_root.join(d.kind.name()),
            tag,
            pods: Vec::new(),
            seq: 0,
            forked: false,
        }
    }

    /// Another handle on the same connection, for concurrent callers; the pods it makes are
    /// not remembered (hand them to [`Cri::adopt`]).
    pub fn fork(&self) -> Cri {
        Cri {
            client: self.client.clone(),
            cgroup_root: self.cgroup_root.clone(),
            log_root: self.log_root.clone(),
            tag: self.tag.clone(),
            pods: Vec::new(),
            seq: 0,
            forked: true,
        }
    }

    /// Remembers pod `id` for clean-up.
    pub fn adopt(&mut self, id: String) {
        self.pods.push(id);
    }

    /// A kubelet-shaped pod config: namespace options as the kubelet's defaults (network and IPC
    /// per pod, or the host's with `host_net`; PID per container), cgroup parent
    /// `/<MARK>-<pid>-<kind>/<pod>`, a log directory that exists.
    pub fn pod_config(
        &mut self,
        series: &str,
        host_net: bool,
    ) -> anyhow::Result<pb::PodSandboxConfig> {
        self.seq += 1;
        let name = format!("{series}-{}", self.seq);
        let log_directory = self.log_root.join(&name);
        std::fs::create_dir_all(&log_directory)
            .with_context(|| format!("create {}", log_directory.display()))?;
        let ns = pb::NamespaceOption {
            network: if host_net {
                pb::NamespaceMode::Node
            } else {
                pb::NamespaceMode::Pod
            } as i32,
            pid: pb::NamespaceMode::Container as i32,
            ipc: pb::NamespaceMode::Pod as i32,
            ..Default::default()
        };
        Ok(pb::PodSandboxConfig {
            metadata: Some(pb::PodSandboxMetadata {
                name: name.clone(),
                uid: format!("{}-{name}", self.tag),
                namespace: "bench".into(),
                attempt: 0,
            }),
            // containerd (runc) cannot set a hostname without a UTS namespace of the pod's own.
            hostname: if host_net {
                String::new()
            } else {
                name.clone()
            },
            log_directory: log_directory.display().to_string(),
            labels: [(RUN_LABEL.to_string(), self.tag.clone())].into(),
            linux: Some(pb::LinuxPodSandboxConfig {
                cgroup_parent: format!("{}/{name}", self.cgroup_root),
                security_context: Some(pb::LinuxSandboxSecurityContext {
                    namespace_options: Some(ns),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    /// RunPodSandbox; the pod is remembered for clean-up. Returns it and the call's duration.
    pub async fn run_pod(
        &mut self,
        config: pb::PodSandboxConfig,
    ) -> anyhow::Result<(Pod, Duration)> {
        let req = pb::RunPodSandboxRequest {
            config: Some(config.clone()),
            runtime_handler: String::new(),
        };
        let t = Instant::now();
        let r = self.client.run_pod_sandbox(req).await;
        let took = t.elapsed();
        let id = r.context("RunPodSandbox")?.into_inner().pod_sandbox_id;
        if !self.forked {
            self.pods.push(id.clone());
        }
        Ok((Pod { id, config }, took))
    }

    /// A clone of the RuntimeService client.
    pub fn client(&self) -> RuntimeServiceClient<Channel> {
        self.client.clone()
    }

    /// ExecSync of `argv` in container `id` (10 s timeout); its exit code.
    pub async fn exec_sync(&mut self, id: &str, argv: &[&str]) -> anyhow::Result<i32> {
        let r = self
            .client
            .exec_sync(pb::ExecSyncRequest {
                container_id: id.to_string(),
                cmd: argv.iter().map(|a| a.to_string()).collect(),
                timeout: 10,
            })
            .await
            .with_context(|| format!("ExecSync {argv:?}"))?;
        Ok(r.into_inner().exit_code)
    }

    /// The pod's IP as PodSandboxStatus reports it ("" when it has none).
    pub async fn pod_ip(&mut self, id: &str) -> anyhow::Result<String> {
        let st = self
            .client
            .pod_sandbox_status(pb::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await
            .context("PodSandboxStatus")?
            .into_inner();
        Ok(st
            .status
            .and_then(|s| s.network)
            .map(|n| n.ip)
            .unwrap_or_default())
    }

    /// CreateContainer of busybox running `argv` in `pod`; returns its id and the duration.
    pub async fn create(
        &mut self,
        pod: &Pod,
        name: &str,
        argv: &[&str],
    ) -> anyhow::Result<(String, Duration)> {
        let ns = pod
            .config
            .linux
            .as_ref()
            .and_then(|l| l.security_context.as_ref())
            .and_then(|s| s.namespace_options.clone());
        let config = pb::ContainerConfig {
            metadata: Some(pb::ContainerMetadata {
                name: name.to_string(),
                attempt: 0,
            }),
            image: Some(pb::ImageSpec {
                image: BUSYBOX.into(),
                ..Default::default()
            }),
            command: argv.iter().map(|s| s.to_string()).collect(),
            log_path: format!("{name}.log"),
            linux: Some(pb::LinuxContainerConfig {
                resources: None,
                security_context: Some(pb::LinuxContainerSecurityContext {
                    namespace_options: ns,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let req = pb::CreateContainerRequest {
            pod_sandbox_id: pod.id.clone(),
            config: Some(config),
            sandbox_config: Some(pod.config.clone()),
        };
        let t = Instant::now();
        let r = self.client.create_container(req).await;
        let took = t.elapsed();
        let id = r
            .with_context(|| format!("CreateContainer {name}"))?
            .into_inner()
            .container_id;
        Ok((id, took))
    }

    pub async fn start(&mut self, id: &str) -> anyhow::Result<Duration> {
        let req = pb::StartContainerRequest {
            container_id: id.to_string(),
        };
        let t = Instant::now();
        self.client
            .start_container(req)
            .await
            .with_context(|| format!("StartContainer {id}"))?;
        Ok(t.elapsed())
    }

    /// StopContainer with `timeout` seconds; returns the wall-clock and monotonic call start
    /// and the call's duration.
    pub async fn stop(
        &mut self,
        id: &str,
        timeout: i64,
    ) -> anyhow::Result<(SystemTime, Instant, Duration)> {
        let req = pb::StopContainerRequest {
            container_id: id.to_string(),
            timeout,
        };
        let wall = SystemTime::now();
        let t = Instant::now();
        self.client
            .stop_container(req)
            .await
            .with_context(|| format!("StopContainer {id}"))?;
        Ok((wall, t, t.elapsed()))
    }

    pub async fn status(&mut self, id: &str) -> anyhow::Result<pb::ContainerStatus> {
        let req = pb::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let r = self
            .client
            .container_status(req)
            .await
            .with_context(|| format!("ContainerStatus {id}"))?;
        r.into_inner()
            .status
            .with_context(|| format!("ContainerStatus {id}: empty"))
    }

    /// Polls ContainerStatus (no pause between calls) until `id` is EXITED; returns its status
    /// and when it was first seen so.
    pub async fn wait_exited(
        &mut self,
        id: &str,
    ) -> anyhow::Result<(pb::ContainerStatus, Instant)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.status(id).await?;
            let seen = Instant::now();
            if s.state == pb::ContainerState::ContainerExited as i32 {
                return Ok((s, seen));
            }
            if seen > deadline {
                bail!(
                    "container {id} not EXITED 30 s after StopContainer (state {})",
                    s.state
                );
            }
        }
    }

    /// RemoveContainer of `id`; returns the call's duration.
    pub async fn remove_container(&mut self, id: &str) -> anyhow::Result<Duration> {
        let req = pb::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        let t = Instant::now();
        self.client
            .remove_container(req)
            .await
            .with_context(|| format!("RemoveContainer {id}"))?;
        Ok(t.elapsed())
    }

    pub async fn stop_pod(&mut self, id: &str) -> anyhow::Result<Duration> {
        let req = pb::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let t = Instant::now();
        self.client
            .stop_pod_sandbox(req)
            .await
            .with_context(|| format!("StopPodSandbox {id}"))?;
        Ok(t.elapsed())
    }

    /// RemovePodSandbox; the pod is forgotten once removed.
    pub async fn remove_pod(&mut self, id: &str) -> anyhow::Result<Duration> {
        let req = pb::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        };
        let t = Instant::now();
        self.client
            .remove_pod_sandbox(req)
            .await
            .with_context(|| format!("RemovePodSandbox {id}"))?;
        let took = t.elapsed();
        self.pods.retain(|p| p != id);
        Ok(took)
    }

    /// Stops and removes every pod still remembered.
    pub async fn remove_all(&mut self) -> anyhow::Result<()> {
        for id in self.pods.clone() {
            self.stop_pod(&id).await?;
            self.remove_pod(&id).await?;
        }
        Ok(())
    }

    /// ListContainers (no filter); returns how many, the response's encoded size and the
    /// duration (decoding included).
    pub async fn list_containers(&mut self) -> anyhow::Result<(usize, usize, Duration)> {
        let t = Instant::now();
        let r = self
            .client
            .list_containers(pb::ListContainersRequest::default())
            .await
            .context("ListContainers")?;
        let took = t.elapsed();
        let r = r.into_inner();
        Ok((r.containers.len(), prost::Message::encoded_len(&r), took))
    }

    /// Ids of this run's pods the daemon lists (a RunPodSandbox that failed on our side may
    /// still have made one).
    async fn listed_pods(&mut self) -> Vec<String> {
        let req = pb::ListPodSandboxRequest {
            filter: Some(pb::PodSandboxFilter {
                label_selector: [(RUN_LABEL.to_string(), self.tag.clone())].into(),
                ..Default::default()
            }),
        };
        match self.client.list_pod_sandbox(req).await {
            Ok(r) => r.into_inner().items.into_iter().map(|p| p.id).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// What the drop guard does, as a future.
    async fn clean_up(&mut self) {
        let mut ids = self.pods.clone();
        for id in self.listed_pods().await {
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        for id in ids {
            for step in ["stop", "remove"] {
                let call = async {
                    match step {
                        "stop" => self.stop_pod(&id).await,
                        _ => self.remove_pod(&id).await,
                    }
                };
                match tokio::time::timeout(CLEANUP_CALL, call).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => eprintln!("pods bench: clean-up: {e:#}"),
                    Err(_) => eprintln!("pods bench: clean-up: {step} pod {id}: no answer in 30 s"),
                }
            }
        }
    }
}

impl Drop for Cri {
    fn drop(&mut self) {
        // The channel's connection runs on the runtime's worker thread, so blocking this one is
        // fine; this only finds work when a phase failed. A fork's pods belong to its parent.
        if self.forked {
            return;
        }
        futures::executor::block_on(self.clean_up());
    }
}
