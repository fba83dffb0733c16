//! The scenario fixture every CRI test starts from: one daemon (default, or with config
//! tweaks), its test images, a tokio runtime and a CRI client, the pods the test runs, and what
//! every test ends with: its pods stopped and removed, nothing left on the host
//! ([`cri::assert_clean`]), and the daemon's log added to a failure ([`cri::with_log`]).
//!
//! ```ignore
//! Scenario::new().run(async |s| {
//!     let pod = s.pod(s.pod_config("hello")).await?;
//!     let c = pod.container("main", &s.image("busybox")).sh("echo hi");
//!     let id = s.create_start(&pod, &c).await?;
//!     cri::check_exit(&s.wait_exited(&id, 10).await?, 0, "Completed")
//! })
//! ```
//!
//! A failed test leaves its clean-up to [`Daemon`]'s drop (every pod removed, everything of
//! the scratch dir scrubbed), as a test without the fixture does.

use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::cri::{self, Pod, PodBuilder, Rt};
use super::{block_on, pods, Daemon};

/// What the daemon of a scenario is for.
enum Kind {
    /// CRI only.
    Cri,
    /// Supervised pods too: `[pod]` dirs and the back-off cap in seconds, `[node]` keys.
    Supervisor { backoff_max: u64, node: String },
}

/// What prepares a daemon's scratch dir before it starts.
type Prepare = Box<dyn FnOnce(&Path) -> Result<()>>;

/// A scenario to run: the daemon's configuration and images, then [`Scenario::run`].
pub struct Scenario {
    kind: Kind,
    config: String,
    runtime: Option<String>,
    images: Option<Vec<String>>,
    before: Option<Prepare>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

impl Scenario {
    /// A CRI daemon running containers with [`super::runc_bin`], on the test's own cgroup parent and
    /// pod network, with the busybox test image imported.
    pub fn new() -> Scenario {
        Scenario {
            kind: Kind::Cri,
            config: String::new(),
            runtime: None,
            images: None,
            before: None,
        }
    }

    /// A daemon that also supervises pods: `[pod]` dirs and the cgroup parent in its scratch
    /// dir, back-off from 1 s up to `backoff_max` s, eviction off (a CI machine short of disk
    /// must not evict other tests' pods) unless [`Scenario::node`] says otherwise.
    pub fn supervisor(backoff_max: u64) -> Scenario {
        Scenario {
            kind: Kind::Supervisor {
                backoff_max,
                node: "eviction_hard = {}".into(),
            },
            ..Scenario::new()
        }
    }

    /// A supervisor's `[node]` keys (replacing the default that turns eviction off).
    pub fn node(mut self, keys: &str) -> Scenario {
        if let Kind::Supervisor { node, .. } = &mut self.kind {
            *node = keys.into();
        }
        self
    }

    /// More TOML for the daemon's config (top-level keys first; `@DIR@` is its scratch dir,
    /// `@CGROUP@` its cgroup parent).
    pub fn config(mut self, toml: &str) -> Scenario {
        self.config.push_str(toml);
        self
    }

    /// The OCI runtime binary instead of [`super::runc_bin`].
    pub fn runtime(mut self, path: &Path) -> Scenario {
        self.runtime = Some(path.display().to_string());
        self
    }

    /// Imports test image `name` (`test-images/<name>.oci.tar`); naming any image replaces the
    /// busybox default.
    pub fn image(mut self, name: &str) -> Scenario {
        self.images.get_or_insert_with(Vec::new).push(name.into());
        self
    }

    /// Imports no image at all.
    pub fn no_image(mut self) -> Scenario {
        self.images = Some(Vec::new());
        self
    }

    /// Prepares the daemon's scratch dir before it starts (e.g. mounts a small file system
    /// where its root goes: every mount below the scratch dir goes with the daemon).
    pub fn before(mut self, prepare: impl FnOnce(&Path) -> Result<()> + 'static) -> Scenario {
        self.before = Some(Box::new(prepare));
        self
    }

    /// Starts the daemon and imports the images.
    fn start(self) -> Result<(Daemon, Vec<String>)> {
        let config = match &self.kind {
            Kind::Cri => self.config,
            Kind::Supervisor { backoff_max, node } => {
                pods::supervisor_config(*backoff_max, &self.config, node)
            }
        };
        let before = self.before.unwrap_or_else(|| Box::new(|_| Ok(())));
        let d = match self.runtime {
            None => cri::daemon_after(&config, before)?,
            Some(runtime) => {
                Daemon::start_after(&format!("runtime = {runtime:?}\n{config}"), before)?
            }
        };
        let names = self.images.unwrap_or_else(|| vec!["busybox".into()]);
        for name in &names {
            cri::import(&d, name)?;
        }
        Ok((d, names))
    }

    /// Runs `body` with the daemon, a runtime and a CRI client ([`Scene`]); then stops and
    /// removes the pods it ran with [`Scene::pod`] and checks that nothing is left
    /// ([`cri::assert_clean`]). A failure carries the daemon's last log lines.
    pub fn run(self, body: impl AsyncFnOnce(&mut Scene) -> Result<()>) -> Result<()> {
        let (daemon, images) = self.start()?;
        let (daemon, r) = block_on(async move {
            let rt = match cri::client(&daemon).await {
                Ok(rt) => rt,
                Err(e) => return (daemon, Err(e)),
            };
            let mut s = Scene {
                daemon,
                rt,
                images,
                pods: Mutex::new(Vec::new()),
            };
            let mut r = body(&mut s).await;
            if r.is_ok() {
                r = s.remove_pods().await;
            }
            (s.daemon, r)
        });
        cri::with_log(&daemon, r)?;
        cri::assert_clean(&daemon)
    }

    /// [`Scenario::run`] for a body without a runtime or client (one that drives the daemon
    /// through the CLI and waits by polling); the body removes what it made.
    pub fn run_sync(self, body: impl FnOnce(&mut Daemon) -> Result<()>) -> Result<()> {
        let (mut daemon, _) = self.start()?;
        let r = body(&mut daemon);
        cri::with_log(&daemon, r)?;
        cri::assert_clean(&daemon)
    }
}

/// A running scenario: its daemon, a CRI client, its images and the pods it ran. Every method
/// takes `&self` (the client is cloned per call, one connection shared), so `s.daemon` can be
/// borrowed across them.
pub struct Scene {
    /// The daemon.
    pub daemon: Daemon,
    /// A RuntimeService client on it (for the RPCs without a helper here).
    pub rt: Rt,
    images: Vec<String>,
    /// Pods run through [`Scene::pod`] and not removed through [`Scene::remove_pod`].
    pods: Mutex<Vec<String>>,
}

impl Scene {
    /// The reference of test image `name` in a ContainerConfig: `bosun.test/<name>:latest`.
    pub fn image(&self, name: &str) -> String {
        debug_assert!(
            self.images.iter().any(|i| i == name),
            "image {name} was not imported"
        );
        format!("bosun.test/{name}:latest")
    }

    /// A pod config for this daemon (see [`PodBuilder::new`]).
    pub fn pod_config(&self, name: &str) -> PodBuilder {
        PodBuilder::new(&self.daemon, name)
    }

    /// RunPodSandbox; the pod is stopped and removed at the end of the scenario.
    pub async fn pod(&self, config: impl Into<pb::PodSandboxConfig>) -> Result<Pod> {
        self.pod_on("", config).await
    }

    /// [`Scene::pod`] on runtime handler `handler`.
    pub async fn pod_on(
        &self,
        handler: &str,
        config: impl Into<pb::PodSandboxConfig>,
    ) -> Result<Pod> {
        let pod = cri::run_pod_on(&mut self.rt.clone(), handler, config.into()).await?;
        self.pods.lock().map_err(poisoned)?.push(pod.id.clone());
        Ok(pod)
    }

    /// StopPodSandbox then RemovePodSandbox, now.
    pub async fn remove_pod(&self, pod: &Pod) -> Result<()> {
        cri::remove_pod(&mut self.rt.clone(), &pod.id).await?;
        self.pods
            .lock()
            .map_err(poisoned)?
            .retain(|id| *id != pod.id);
        Ok(())
    }

    /// PodSandboxStatus.
    pub async fn pod_status(&self, id: &str) -> Result<pb::PodSandboxStatus> {
        cri::pod_status(&mut self.rt.clone(), id).await
    }

    /// StopPodSandbox.
    pub async fn stop_pod(&self, id: &str) -> Result<()> {
        self.rt
            .clone()
            .stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: id.into(),
            })
            .await
            .with_context(|| format!("StopPodSandbox {id}"))?;
        Ok(())
    }

    /// CreateContainer.
    pub async fn create(&self, pod: &Pod, c: &pb::ContainerConfig) -> Result<String> {
        cri::create(&mut self.rt.clone(), pod, c).await
    }

    /// StartContainer.
    pub async fn start(&self, id: &str) -> Result<()> {
        cri::start(&mut self.rt.clone(), id).await
    }

    /// CreateContainer then StartContainer.
    pub async fn create_start(&self, pod: &Pod, c: &pb::ContainerConfig) -> Result<String> {
        cri::create_start(&mut self.rt.clone(), pod, c).await
    }

    /// [`Scene::create_start`], then waits (10 s) for the container's `ready` line.
    pub async fn ready(&self, pod: &Pod, c: &pb::ContainerConfig) -> Result<String> {
        let id = self.create_start(pod, c).await?;
        cri::wait_log(&pod.log_of(c), 10, |l| l.iter().any(|x| x == "ready")).await?;
        Ok(id)
    }

    /// StopContainer with `timeout` seconds; how long the call took.
    pub async fn stop(&self, id: &str, timeout: i64) -> Result<Duration> {
        cri::stop(&mut self.rt.clone(), id, timeout).await
    }

    /// RemoveContainer.
    pub async fn remove(&self, id: &str) -> Result<()> {
        cri::remove(&mut self.rt.clone(), id).await
    }

    /// ContainerStatus.
    pub async fn status(&self, id: &str) -> Result<pb::ContainerStatus> {
        cri::status(&mut self.rt.clone(), id).await
    }

    /// Polls ContainerStatus until the container is in `want` (at most `secs`).
    pub async fn wait_state(
        &self,
        id: &str,
        want: pb::ContainerState,
        secs: u64,
    ) -> Result<pb::ContainerStatus> {
        cri::wait_state(&mut self.rt.clone(), id, want, secs).await
    }

    /// Waits (at most `secs`) for the container to be EXITED.
    pub async fn wait_exited(&self, id: &str, secs: u64) -> Result<pb::ContainerStatus> {
        cri::wait_exited(&mut self.rt.clone(), id, secs).await
    }

    /// ExecSync of `cmd` with `timeout` seconds (0: none), the gRPC status kept.
    pub async fn exec(
        &self,
        id: &str,
        cmd: &[&str],
        timeout: i64,
    ) -> std::result::Result<pb::ExecSyncResponse, tonic::Status> {
        cri::exec(&mut self.rt.clone(), id, cmd, timeout).await
    }

    /// ListContainers with `filter`.
    pub async fn list_containers(
        &self,
        filter: Option<pb::ContainerFilter>,
    ) -> Result<Vec<pb::Container>> {
        cri::list_containers(&mut self.rt.clone(), filter).await
    }

    /// ListPodSandbox with `filter`.
    pub async fn list_pods(
        &self,
        filter: Option<pb::PodSandboxFilter>,
    ) -> Result<Vec<pb::PodSandbox>> {
        cri::list_pods(&mut self.rt.clone(), filter).await
    }

    /// Restarts the daemon on the same root and state (SIGKILL first, as a crash would) and
    /// connects the client to the new one.
    pub async fn restart(&mut self) -> Result<()> {
        self.daemon.restart()?;
        self.reconnect().await
    }

    /// A new client, on the daemon as it is now (after a restart of its own making).
    pub async fn reconnect(&mut self) -> Result<()> {
        self.rt = cri::client(&self.daemon).await?;
        Ok(())
    }

    /// Stops and removes the pods still tracked, in the order they were run.
    async fn remove_pods(&self) -> Result<()> {
        let ids = std::mem::take(&mut *self.pods.lock().map_err(poisoned)?);
        for id in ids {
            cri::remove_pod(&mut self.rt.clone(), &id).await?;
        }
        Ok(())
    }
}

fn poisoned<T>(_: std::sync::PoisonError<T>) -> anyhow::Error {
    anyhow::anyhow!("a scenario's pod list was poisoned by a panic")
}
