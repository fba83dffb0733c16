//! The pod's reconcile step (the kubelet's syncPod): sandbox, init order, sidecars, apps, restarts.

use std::time::{Duration, Instant};

use super::state::{Inst, PostStart};
use super::worker::{Sandbox, Worker};
use crate::pod::phase::RestartPolicy;
use crate::pod::translate::{self, ContainerKind, PodContext};
use crate::pod::volumes;
use crate::runtime::{Filter, SandboxState};

/// Longest wait between sandbox creation retries.
const SANDBOX_RETRY_MAX: Duration = Duration::from_secs(60);

impl Worker {
    /// The pod's restartPolicy (apps; sidecars always restart).
    pub fn policy(&self) -> RestartPolicy {
        match self
            .rec
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.as_deref())
        {
            Some("OnFailure") => RestartPolicy::OnFailure,
            Some("Never") => RestartPolicy::Never,
            _ => RestartPolicy::Always,
        }
    }

    pub fn ctx(&self) -> PodContext<'_> {
        PodContext {
            pod: &self.rec.pod,
            uid: self.rec.uid(),
            attempt: self.sandbox.as_ref().map_or(0, |s| s.attempt),
            log_dir: &self.sh.config.pod.log_dir,
            source: &self.rec.source,
        }
    }

    /// Picks up what exists already (after a daemon restart): the sandbox and each container's
    /// instances. Running instances are taken as past their postStart hook.
    pub fn recover(&mut self) {
        self.refresh();
        for c in &mut self.cs {
            if c.kind == ContainerKind::Init && c.current.as_ref().and_then(Inst::exited) == Some(0)
            {
                c.completed = true;
            }
        }
        let apps_seen = self
            .cs
            .iter()
            .any(|c| c.kind == ContainerKind::App && c.current.is_some());
        let inits_done = self
            .cs
            .iter()
            .filter(|c| c.kind == ContainerKind::Init)
            .all(|c| c.completed);
        self.initialized =
            apps_seen || (inits_done && self.sandbox.is_some() && !self.has_sidecars());
    }

    fn has_sidecars(&self) -> bool {
        self.cs.iter().any(|c| c.kind == ContainerKind::Sidecar)
    }

    /// Reads the sandbox and every container instance of the pod from the runtime.
    pub fn refresh(&mut self) {
        let uid = self.rec.uid().to_string();
        let filter: Filter<SandboxState> = Filter {
            labels: super::owned_by(Some(&uid)),
            ..Default::default()
        };
        let newest = self
            .sh
            .runtime
            .list_sandboxes(&filter)
            .into_iter()
            .max_by_key(|e| e.meta().request.pod.attempt);
        let last_ip = self.sandbox.as_ref().and_then(|s| s.ip.clone());
        self.sandbox = newest.map(|e| {
            let st = e.status();
            Sandbox {
                id: e.id().to_string(),
                ip: st.ips.first().cloned().or(last_ip),
                ready: st.state() == SandboxState::Ready,
                attempt: e.meta().request.pod.attempt,
                userns: e.meta().request.userns.clone(),
            }
        });
        let all = super::state::instances(&self.sh.runtime, &uid);
        for c in &mut self.cs {
            let mut insts = all
                .iter()
                .find(|(n, _)| n == c.name())
                .map(|(_, v)| v.clone())
                .unwrap_or_default();
            let current = insts.pop();
            let previous = insts.pop();
            if current.as_ref().map(|i| &i.id) != c.current.as_ref().map(|i| &i.id) {
                // A new instance (or none): its own hook and probe state.
                c.started = false;
                c.ready = false;
                c.post_start = PostStart::Done;
            }
            c.current = current;
            c.previous = previous;
        }
    }

    /// One reconcile pass.
    pub async fn sync(&mut self) {
        self.refresh();
        if self.termination.is_some() || self.rec.finished {
            self.stop_probes_of_exited();
            return;
        }
        if !self.ensure_sandbox().await {
            return;
        }
        self.start_leftovers().await;
        self.ensure_probes();
        if !self.initialized {
            if !self.run_inits().await {
                self.finish_if_done();
                return;
            }
            self.initialized = true;
        }
        for i in 0..self.cs.len() {
            match self.cs[i].kind {
                ContainerKind::Sidecar => {
                    self.ensure_running(i).await;
                }
                ContainerKind::App => {
                    let exited = self.cs[i].current.as_ref().map(Inst::exited);
                    match exited {
                        None => self.start(i).await,
                        Some(Some(code)) if self.policy().restarts(code) => {
                            self.restart(i).await;
                        }
                        _ => {}
                    }
                }
                ContainerKind::Init => {}
            }
        }
        self.ensure_probes();
        self.finish_if_done();
    }

    /// Instances created but never started (the daemon died in between) are started now,
    /// or removed when that fails (the next pass creates a new one).
    async fn start_leftovers(&mut self) {
        let created: Vec<String> = self
            .cs
            .iter()
            .filter_map(|c| c.current.as_ref())
            .filter(|i| i.state() == crate::runtime::ContainerState::Created)
            .map(|i| i.id.clone())
            .collect();
        if created.is_empty() {
            return;
        }
        for id in created {
            if let Err(e) = self.sh.runtime.start_container(&id).await {
                tracing::warn!(pod = %self.key(), container = %id, error = %e, "start left-over instance; removing it");
                let _ = self.sh.runtime.remove_container(&id).await;
            }
        }
        self.refresh();
    }

    /// Init containers in order; true when every one is done (sidecars: started).
    async fn run_inits(&mut self) -> bool {
        for i in 0..self.cs.len() {
            match self.cs[i].kind {
                ContainerKind::App => continue,
                ContainerKind::Sidecar => {
                    if !self.ensure_running(i).await || !self.cs[i].is_started() {
                        return false;
                    }
                }
                ContainerKind::Init => {
                    if self.cs[i].completed {
                        continue;
                    }
                    let exited = self.cs[i].current.as_ref().map(Inst::exited);
                    match exited {
                        None => {
                            self.start(i).await;
                            return false;
                        }
                        Some(None) => return false,
                        Some(Some(0)) => {
                            self.cs[i].completed = true;
                            self.cs[i].waiting = None;
                        }
                        Some(Some(_)) if self.policy() == RestartPolicy::Never => return false,
                        Some(Some(_)) => {
                            self.restart(i).await;
                            return false;
                        }
                    }
                }
            }
        }
        true
    }

    /// A sidecar runs, restarted (with back-off) whenever it exits; true when it is running.
    async fn ensure_running(&mut self, i: usize) -> bool {
        let exited = self.cs[i].current.as_ref().map(Inst::exited);
        match exited {
            None => {
                self.start(i).await;
                self.cs[i].current.as_ref().is_some_and(Inst::running)
            }
            Some(None) => true,
            Some(Some(_)) => {
                self.restart(i).await;
                self.cs[i].current.as_ref().is_some_and(Inst::running)
            }
        }
    }

    /// Restarts an exited container once its back-off allows.
    async fn restart(&mut self, i: usize) {
        let Some(inst) = self.cs[i].current.clone() else {
            return;
        };
        if self.cs[i].killing.is_some() {
            return;
        }
        let now = Instant::now();
        let until = match &self.cs[i].backoff {
            Some((id, until)) if *id == inst.id => *until,
            _ => {
                let name = self.cs[i].name().to_string();
                let delay = self.backoff.next(&name, now);
                let until = now + delay;
                self.cs[i].backoff = Some((inst.id.clone(), until));
                let msg = format!(
                    "back-off {}s restarting failed container={} pod={}",
                    delay.as_secs(),
                    name,
                    self.rec.name()
                );
                self.cs[i].waiting = Some(("CrashLoopBackOff".into(), msg));
                let object = self.cs[i].object();
                self.events.warning(
                    "BackOff",
                    &object,
                    format!(
                        "Back-off restarting failed container {name} in pod {}",
                        self.rec.name()
                    ),
                );
                until
            }
        };
        if now < until {
            self.wake_at = Some(self.wake_at.map_or(until, |w| w.min(until)));
            return;
        }
        self.cs[i].waiting = None;
        self.start(i).await;
    }

    /// Creates the sandbox (and the volumes) when there is none or it died; true when ready.
    async fn ensure_sandbox(&mut self) -> bool {
        if self.sandbox.as_ref().is_some_and(|s| s.ready) {
            return true;
        }
        if let Some(wake) = self.wake_at {
            if self.sandbox_failures > 0 && Instant::now() < wake {
                return false;
            }
        }
        let attempt = match &self.sandbox {
            Some(dead) => {
                // The sandbox died under the pod: like the kubelet, kill everything and start
                // over in a new one (init containers run again).
                self.events.normal(
                    "SandboxChanged",
                    "",
                    "Pod sandbox changed, it will be killed and re-created.".into(),
                );
                for c in &self.cs {
                    if let Some(inst) = c.current.as_ref().filter(|i| i.running()) {
                        let _ = self.sh.runtime.stop_container(&inst.id, 0).await;
                    }
                }
                let _ = self.sh.runtime.stop_sandbox(&dead.id.clone()).await;
                for c in &mut self.cs {
                    c.completed = false;
                }
                self.initialized = false;
                dead.attempt + 1
            }
            None => 0,
        };
        let pod_dir = self.rec.dir(&self.sh.pods_dir);
        let own_users = self.rec.pod.spec.as_ref().and_then(|s| s.host_users) == Some(false);
        let previous = self.sandbox.as_ref().and_then(|s| s.userns.clone());
        let result = async {
            // The handler first, named as the pod names it (the kubelet: `RuntimeClass "x"
            // not found`), before anything is made for the sandbox.
            let class = self
                .rec
                .pod
                .spec
                .as_ref()
                .and_then(|s| s.runtime_class_name.as_deref());
            if let Some(name) = class.filter(|n| !n.is_empty()) {
                let handlers = self.sh.runtime.handlers();
                handlers.select(name).map_err(|e| {
                    e.context(format!("runtimeClassName {:?}", crate::error::echo(name)))
                })?;
            }
            let sources = self.sh.sources();
            let ctx = PodContext {
                attempt,
                ..self.ctx()
            };
            let vols = volumes::prepare(&ctx, &pod_dir, &sources)?;
            let mut req = translate::sandbox_request(&ctx)?;
            req.cgroup_parent = self.pod_cgroup_parent()?;
            // hostUsers: false: the range this pod had, else a free one (kept from other
            // picks until the sandbox records it).
            let picked = match (own_users, &previous) {
                (true, None) => Some(self.sh.pick_userns()?),
                _ => None,
            };
            if own_users {
                req.userns = previous.or_else(|| picked.as_ref().map(|p| p.ns.clone()));
            }
            let id = self.sh.runtime.run_sandbox(req).await?;
            drop(picked);
            Ok::<_, crate::error::Error>((vols, id))
        }
        .await;
        match result {
            Ok((vols, _id)) => {
                self.volumes = Some(vols);
                self.sandbox_failures = 0;
                self.refresh();
                self.sandbox.as_ref().is_some_and(|s| s.ready)
            }
            Err(e) => {
                self.sandbox_failures += 1;
                let delay =
                    Duration::from_secs(1 << self.sandbox_failures.min(6)).min(SANDBOX_RETRY_MAX);
                self.wake_at = Some(Instant::now() + delay);
                self.events.warning(
                    "FailedCreatePodSandBox",
                    "",
                    format!("Failed to create pod sandbox: {e}"),
                );
                false
            }
        }
    }

    /// Once every app container is done for good (phase Succeeded or Failed), the sidecars are
    /// stopped (reverse order) and the sandbox too, like the kubelet does for a finished pod.
    fn finish_if_done(&mut self) {
        if self.termination.is_some() || self.rec.finished {
            return;
        }
        if self.apps_done() {
            self.begin_finish();
        }
    }

    /// Every app container exited and will not restart, or an init container failed under
    /// restartPolicy Never: nothing will run again.
    pub fn apps_done(&self) -> bool {
        let policy = self.policy();
        let init_failed = policy == RestartPolicy::Never
            && self.cs.iter().any(|c| {
                c.kind == ContainerKind::Init
                    && c.current
                        .as_ref()
                        .and_then(Inst::exited)
                        .is_some_and(|code| code != 0)
            });
        let apps_finished = self
            .cs
            .iter()
            .filter(|c| c.kind == ContainerKind::App)
            .all(|c| {
                c.current
                    .as_ref()
                    .and_then(Inst::exited)
                    .is_some_and(|code| !policy.restarts(code))
            });
        init_failed || (self.initialized && apps_finished)
    }
}
