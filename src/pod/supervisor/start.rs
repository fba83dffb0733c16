//! Starting and killing one container instance: image, env, mounts, create, start, hooks, probes.

use std::sync::Arc;
use std::time::Duration;

use super::state::{Inst, PostStart};
use super::worker::{Msg, Worker};
use super::Shared;
use crate::pod::api::ProbeReport;
use crate::pod::env::{self, EnvFacts};
use crate::pod::grace::{self, KillReason};
use crate::pod::probe_result::{ProbeKind, Result as ProbeResult};
use crate::pod::prober::{Probes, Target, Update};
use crate::pod::translate::{self};
use crate::pod::{hooks, volumes};
use k8s_openapi::api::core::v1::Container;

impl Worker {
    /// Creates and starts a new instance of container `i`; failures leave it Waiting with the
    /// kubelet's reason and an event, and back off.
    pub async fn start(&mut self, i: usize) {
        let restart_count = self.cs[i].current.as_ref().map_or(0, |c| c.attempt + 1);
        let name = self.cs[i].name().to_string();
        let object = self.cs[i].object();
        if let Err((reason, e)) = self.ensure_image(i).await {
            self.cs[i].waiting = Some((reason.into(), e.to_string()));
            self.events.warning("Failed", &object, e.to_string());
            self.start_failed(i);
            return;
        }
        // The kubelet keeps one dead instance per container: the one before goes now.
        if let Some(prev) = self.cs[i].previous.take() {
            if let Err(e) = self.sh.runtime.remove_container(&prev.id).await {
                tracing::warn!(pod = %self.key(), container = %name, error = %e, "remove old instance");
            }
        }
        let created = match self.create(i, restart_count).await {
            Ok(id) => id,
            Err((reason, e)) => {
                self.cs[i].waiting = Some((reason.into(), e.to_string()));
                self.events
                    .warning("Failed", &object, format!("Error: {e}"));
                self.start_failed(i);
                return;
            }
        };
        self.events
            .normal("Created", &object, format!("Created container {name}"));
        if let Err(e) = self.sh.runtime.start_container(&created).await {
            self.cs[i].waiting = Some(("RunContainerError".into(), e.to_string()));
            self.events
                .warning("Failed", &object, format!("Error: {e}"));
            self.refresh();
            return;
        }
        self.events
            .normal("Started", &object, format!("Started container {name}"));
        self.cs[i].waiting = None;
        self.refresh();
        if let Some(hook) = self.cs[i]
            .spec
            .lifecycle
            .as_ref()
            .and_then(|l| l.post_start.clone())
        {
            self.cs[i].post_start = PostStart::Running;
            let target = self.target(i, &created);
            let (sh, tx, id) = (self.sh.clone(), self.tx.clone(), created.clone());
            tokio::spawn(async move {
                // postStart has no timeout of its own; the container's kill ends it.
                let result = hooks::run(
                    &hook,
                    &target,
                    sh.exec.as_ref(),
                    &sh.http,
                    Duration::from_secs(u32::MAX as u64),
                )
                .await;
                let _ = tx.send(Msg::PostStartDone { name, id, result });
            });
        }
    }

    /// A failed start backs off like a crash.
    fn start_failed(&mut self, i: usize) {
        let now = std::time::Instant::now();
        let name = self.cs[i].name().to_string();
        let delay = self.backoff.next(&name, now);
        let until = now + delay;
        self.wake_at = Some(self.wake_at.map_or(until, |w| w.min(until)));
    }

    async fn create(
        &mut self,
        i: usize,
        restart_count: u32,
    ) -> std::result::Result<String, (&'static str, crate::error::Error)> {
        let pod_dir = self.rec.dir(&self.sh.pods_dir);
        let sources = self.sh.sources();
        if self.volumes.is_none() {
            let v = volumes::prepare(&self.ctx(), &pod_dir, &sources)
                .map_err(|e| ("CreateContainerConfigError", e))?;
            self.volumes = Some(v);
        }
        let spec = self.cs[i].spec.clone();
        let ip = self.sandbox.as_ref().and_then(|s| s.ip.clone());
        let facts = EnvFacts {
            pod_ip: ip.as_deref(),
            host_ip: &self.sh.host_ip,
            node_name: &self.sh.node_name,
        };
        let ctx = self.ctx();
        let envs = env::resolve(&ctx, &spec, &facts, &sources)
            .map_err(|e| ("CreateContainerConfigError", e))?;
        let node = volumes::MountFacts {
            recursive_read_only: self.sh.runtime.host().recursive_read_only,
            userns: self.sandbox.as_ref().and_then(|s| s.userns.as_ref()),
        };
        let mounts = match &self.volumes {
            Some(v) => v
                .mounts(&spec, restart_count, &node)
                .map_err(|e| ("CreateContainerConfigError", e))?,
            None => Vec::new(),
        };
        let mut mounts = mounts;
        mounts.retain(|m| !m.container_path.is_empty());
        let image_user = spec
            .image
            .as_deref()
            .and_then(|image| self.sh.images.lookup(image))
            .and_then(|img| img.config.config.user.clone());
        let new = translate::container_request(
            &ctx,
            self.cs[i].kind,
            &spec,
            restart_count,
            mounts,
            envs,
            image_user.as_deref(),
        )
        .map_err(|e| ("CreateContainerConfigError", e))?;
        let sandbox_id = self
            .sandbox
            .as_ref()
            .map(|s| s.id.clone())
            .unwrap_or_default();
        self.sh
            .runtime
            .create_container(&sandbox_id, new)
            .await
            .map_err(|e| ("CreateContainerError", e))
    }

    /// Pulls the container's image per its imagePullPolicy.
    async fn ensure_image(
        &mut self,
        i: usize,
    ) -> std::result::Result<(), (&'static str, crate::error::Error)> {
        let spec = &self.cs[i].spec;
        let image = spec.image.clone().unwrap_or_default();
        let object = self.cs[i].object();
        let tag_latest = !image.contains('@')
            && image
                .rsplit('/')
                .next()
                .is_some_and(|last| !last.contains(':'));
        let policy = spec.image_pull_policy.clone().unwrap_or_else(|| {
            if tag_latest || image.ends_with(":latest") {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let present = self.sh.images.lookup(&image).is_some();
        match policy.as_str() {
            "Never" if !present => Err((
                "ErrImageNeverPull",
                crate::error::Error::precondition(format!(
                    "container image {image:?} is not present with pull policy of Never"
                )),
            )),
            "Never" => Ok(()),
            "IfNotPresent" if present => Ok(()),
            // Always: a local image (imported, no registry) still runs when the pull fails.
            _ => {
                self.events
                    .normal("Pulling", &object, format!("Pulling image {image:?}"));
                let started = std::time::Instant::now();
                match self.sh.images.pull(&image, Default::default(), None).await {
                    Ok(_) => {
                        self.events.normal(
                            "Pulled",
                            &object,
                            format!(
                                "Successfully pulled image {image:?} in {:.3}s",
                                started.elapsed().as_secs_f64()
                            ),
                        );
                        Ok(())
                    }
                    Err(e) if present => {
                        self.events.warning(
                            "Failed",
                            &object,
                            format!("Failed to pull image {image:?} (using the local copy): {e}"),
                        );
                        Ok(())
                    }
                    Err(e) => Err(("ErrImagePull", e)),
                }
            }
        }
    }

    /// Where probes and hooks of instance `id` of container `i` go.
    pub fn target(&self, i: usize, id: &str) -> Target {
        let host_network = self.rec.host_network();
        let ip = self
            .sandbox
            .as_ref()
            .and_then(|s| s.ip.as_deref())
            .and_then(|ip| ip.parse().ok())
            .filter(|_| !host_network)
            .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
        Target {
            container_id: id.to_string(),
            container: self.cs[i].spec.clone(),
            host: ip,
        }
    }

    /// Starts probes for running instances that have none; no probe means started and ready.
    pub fn ensure_probes(&mut self) {
        for i in 0..self.cs.len() {
            let c = &self.cs[i];
            let Some(inst) = c.current.as_ref().filter(|i| i.running()) else {
                self.cs[i].probes = None;
                continue;
            };
            if c.post_start != PostStart::Done || c.killing.is_some() {
                continue;
            }
            let id = inst.id.clone();
            if c.probes.as_ref().is_some_and(|(pid, _)| *pid == id) {
                continue;
            }
            let has_startup = c.spec.startup_probe.is_some();
            let has_readiness = c.spec.readiness_probe.is_some();
            let any = has_startup || has_readiness || c.spec.liveness_probe.is_some();
            let probes = any.then(|| {
                Probes::start(
                    &self.sh.probe_rt,
                    self.target(i, &id),
                    self.sh.exec.clone(),
                    self.sh.http.clone(),
                    self.probe_tx.clone(),
                )
            });
            let c = &mut self.cs[i];
            c.started = !has_startup;
            // Regular init containers are never "ready"; the rest are without a readiness probe.
            c.ready = c.started && !has_readiness && c.kind != translate::ContainerKind::Init;
            c.probes = Some((id, probes));
        }
    }

    /// Probes of instances that are gone stop.
    pub fn stop_probes_of_exited(&mut self) {
        for c in &mut self.cs {
            if !c.current.as_ref().is_some_and(Inst::running) {
                c.probes = None;
                c.ready = false;
            }
        }
    }

    /// A probe attempt finished; true when the pod needs a sync.
    pub fn on_probe(&mut self, u: Update) -> bool {
        let Some(i) = self.cs.iter().position(|c| c.name() == u.container) else {
            return false;
        };
        if self.cs[i].current.as_ref().map(|c| c.id.as_str()) != Some(u.container_id.as_str()) {
            return false;
        }
        let kind = u.kind.as_str();
        self.probe_reports.insert(
            (u.container.clone(), kind.to_string()),
            ProbeReport::new(&u.container, u.kind, u.result, u.message.clone(), u.at_ns),
        );
        let object = self.cs[i].object();
        if !u.message.is_empty() {
            let title = format!("{}{}", kind[..1].to_uppercase(), &kind[1..]);
            self.events.warning(
                "Unhealthy",
                &object,
                format!("{title} probe failed: {}", u.message),
            );
        }
        if !u.changed {
            return false;
        }
        match (u.kind, u.result) {
            (ProbeKind::Startup, ProbeResult::Success) => {
                self.cs[i].started = true;
                if self.cs[i].spec.readiness_probe.is_none()
                    && self.cs[i].kind != translate::ContainerKind::Init
                {
                    self.cs[i].ready = true;
                }
            }
            (ProbeKind::Startup, ProbeResult::Failure) => self.kill(i, KillReason::Startup),
            (ProbeKind::Liveness, ProbeResult::Failure) => self.kill(i, KillReason::Liveness),
            (ProbeKind::Readiness, r) => {
                self.cs[i].ready = r == ProbeResult::Success && self.cs[i].started;
            }
            _ => {}
        }
        true
    }

    /// A postStart hook ended.
    pub fn on_post_start(&mut self, name: &str, id: &str, result: std::result::Result<(), String>) {
        let Some(i) = self.cs.iter().position(|c| c.name() == name) else {
            return;
        };
        if self.cs[i].current.as_ref().map(|c| c.id.as_str()) != Some(id) {
            return;
        }
        match result {
            Ok(()) => self.cs[i].post_start = PostStart::Done,
            Err(msg) => {
                let object = self.cs[i].object();
                self.events.warning(
                    "FailedPostStartHook",
                    &object,
                    format!("PostStartHook failed: {msg}"),
                );
                self.cs[i].post_start = PostStart::Failed(msg);
                self.kill(i, KillReason::PostStartFailed);
            }
        }
    }

    /// Kills the current instance of container `i` (preStop first), in the background.
    pub fn kill(&mut self, i: usize, reason: KillReason) {
        let Some(inst) = self.cs[i].current.clone().filter(Inst::running) else {
            return;
        };
        if self.cs[i].killing.as_deref() == Some(inst.id.as_str()) {
            return;
        }
        self.cs[i].killing = Some(inst.id.clone());
        self.cs[i].probes = None;
        self.cs[i].ready = false;
        let spec = &self.cs[i].spec;
        let probe_grace = match reason {
            KillReason::Liveness => spec.liveness_probe.as_ref(),
            KillReason::Startup => spec.startup_probe.as_ref(),
            _ => None,
        }
        .and_then(|p| p.termination_grace_period_seconds)
        .map(|s| Duration::from_secs(s.max(1) as u64));
        let grace = grace::container_grace(self.pod_grace(), reason, probe_grace);
        let (name, object) = (self.cs[i].name().to_string(), self.cs[i].object());
        let why = match reason {
            KillReason::Liveness => {
                format!("Container {name} failed liveness probe, will be restarted")
            }
            KillReason::Startup => {
                format!("Container {name} failed startup probe, will be restarted")
            }
            KillReason::PostStartFailed => {
                format!("FailedPostStartHook: stopping container {name}")
            }
            KillReason::PodDeleted => format!("Stopping container {name}"),
        };
        self.events.normal("Killing", &object, why);
        let target = self.target(i, &inst.id);
        let spec = self.cs[i].spec.clone();
        let (sh, tx) = (self.sh.clone(), self.tx.clone());
        let deadline = tokio::sync::watch::channel(std::time::Instant::now() + grace).1;
        tokio::spawn(async move {
            stop_one(&sh, &tx, &spec, &target, &object, deadline).await;
            let _ = tx.send(Msg::KillDone { name, id: inst.id });
        });
    }

    /// The pod's terminationGracePeriodSeconds (default 30 s).
    pub fn pod_grace(&self) -> Duration {
        self.rec
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .map_or(grace::DEFAULT_GRACE, |s| {
                Duration::from_secs(s.max(0) as u64)
            })
    }
}

/// Stops one instance the Kubernetes way: preStop (while the deadline allows), then the stop
/// signal with what is left of the grace (at least 2 s after a preStop), SIGKILL at the end.
/// A deadline moved earlier (a second delete) re-issues the stop with the shorter time.
pub async fn stop_one(
    sh: &Arc<Shared>,
    tx: &tokio::sync::mpsc::UnboundedSender<Msg>,
    spec: &Container,
    target: &Target,
    object: &str,
    mut deadline: tokio::sync::watch::Receiver<std::time::Instant>,
) {
    let id = target.container_id.clone();
    let remaining = |d: std::time::Instant| d.saturating_duration_since(std::time::Instant::now());
    let pre_stop = spec.lifecycle.as_ref().and_then(|l| l.pre_stop.clone());
    let running = sh
        .runtime
        .container(&id)
        .is_ok_and(|e| e.status().state() == crate::runtime::ContainerState::Running);
    let mut ran_hook = false;
    if let Some(hook) = pre_stop.filter(|_| running) {
        let first = remaining(*deadline.borrow());
        if grace::runs_pre_stop(first) {
            ran_hook = true;
            let run = hooks::run(&hook, target, sh.exec.as_ref(), &sh.http, first);
            tokio::pin!(run);
            let mut open = true;
            loop {
                let d = tokio::time::Instant::from_std(*deadline.borrow());
                tokio::select! {
                    r = &mut run => {
                        if let Err(msg) = r {
                            let _ = tx.send(Msg::Event {
                                warning: true,
                                reason: "FailedPreStopHook".into(),
                                object: object.to_string(),
                                message: format!("PreStopHook failed: {msg}"),
                            });
                        }
                        break;
                    }
                    _ = tokio::time::sleep_until(d) => break,
                    changed = deadline.changed(), if open => open = changed.is_ok(),
                }
            }
        }
    }
    let floor = if ran_hook {
        grace::CONTAINER_MINIMUM
    } else {
        Duration::ZERO
    };
    let secs = |d: Duration| d.as_secs() as i64 + i64::from(d.subsec_nanos() > 0);
    let left = remaining(*deadline.borrow()).max(floor);
    let stop = sh.runtime.stop_container(&id, secs(left));
    tokio::pin!(stop);
    let mut open = true;
    loop {
        tokio::select! {
            r = &mut stop => {
                if let Err(e) = r {
                    tracing::warn!(container = %id, error = %e, "stop container");
                }
                break;
            }
            changed = deadline.changed(), if open => {
                if changed.is_err() {
                    // No shorter deadline can come any more.
                    open = false;
                    continue;
                }
                let left = remaining(*deadline.borrow());
                let (rt, id) = (sh.runtime.clone(), id.clone());
                tokio::spawn(async move { rt.stop_container(&id, secs(left)).await });
            }
        }
    }
}
