//! Pod termination (delete) and finishing (all apps done): apps in parallel, then sidecars in
//! reverse order, then the sandbox; a delete also removes everything the pod had.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

use super::record::Deletion;
use super::start::stop_one;
use super::state::Inst;
use super::worker::{Msg, Worker};
use super::Shared;
use crate::pod::api::WatchKind;
use crate::pod::grace;
use crate::pod::prober::Target;
use crate::pod::translate::ContainerKind;
use crate::pod::volumes;
use crate::runtime::Filter;
use k8s_openapi::api::core::v1::Container;

/// A termination (or finish) in progress.
pub struct Termination {
    /// The KILL deadline of the whole pod; only ever moves earlier.
    pub deadline: watch::Sender<Instant>,
    /// A delete (remove everything at the end), not just a finish.
    pub delete: bool,
}

/// One instance to stop.
struct Victim {
    spec: Container,
    target: Target,
    object: String,
}

/// What the termination task needs.
struct Plan {
    key: String,
    uid: String,
    sandbox_id: Option<String>,
    apps: Vec<Victim>,
    /// Sidecars, last defined first.
    sidecars: Vec<Victim>,
    pod_dir: std::path::PathBuf,
    delete: bool,
}

impl Worker {
    /// Starts termination with `grace` seconds (`None`: the pod's), or shortens a running
    /// one. `restarted`: the daemon restarted mid-termination: full grace again.
    pub fn begin_termination(&mut self, grace_secs: Option<i64>, force: bool, restarted: bool) {
        let requested = grace_secs.map(|g| Duration::from_secs(g.max(0) as u64));
        let now = Instant::now();
        if let Some(t) = self.termination.as_ref().filter(|t| t.delete) {
            // A later delete only shortens.
            if let Some(r) = requested {
                let candidate = now + r.max(grace::POD_MINIMUM);
                if candidate < *t.deadline.borrow() {
                    t.deadline.send_replace(candidate);
                    if let Some(d) = self.rec.deletion.as_mut() {
                        d.grace_secs = r.max(grace::POD_MINIMUM).as_secs();
                    }
                    self.persist_deletion();
                }
            }
            if force {
                self.leave_api();
            }
            return;
        }
        let spec = self
            .rec
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .map(|s| Duration::from_secs(s.max(0) as u64));
        let (g, _) = grace::pod_grace(spec, None, requested);
        if !restarted || self.rec.deletion.is_none() {
            self.rec.deletion = Some(Deletion {
                at_ns: crate::runtime::status::now_ns(),
                grace_secs: g.as_secs(),
                force,
            });
        }
        self.persist_deletion();
        if let Some(old) = self.termination.take() {
            // A finish in progress becomes a delete: same deadline or shorter.
            let d = (*old.deadline.borrow()).min(now + g);
            old.deadline.send_replace(d);
        }
        self.start_stopping(now + g, true);
        if force {
            self.leave_api();
        }
    }

    /// Every app container is done for good: stop the sidecars and the sandbox.
    pub fn begin_finish(&mut self) {
        let deadline = Instant::now() + self.pod_grace();
        self.start_stopping(deadline, false);
    }

    fn persist_deletion(&mut self) {
        let meta = &mut self.rec.pod.metadata;
        if let Some(d) = self.rec.deletion {
            meta.deletion_timestamp = super::status::time(d.at_ns);
            meta.deletion_grace_period_seconds = Some(d.grace_secs as i64);
        }
        if let Err(e) = self.rec.save(&self.sh.pods_dir) {
            tracing::warn!(pod = %self.key(), error = %e, "record deletion");
        }
    }

    /// A forced delete: the pod leaves the API now; its containers still get stopped.
    fn leave_api(&mut self) {
        if self.gone {
            return;
        }
        self.sh
            .forget(self.rec.namespace(), self.rec.name(), self.rec.uid());
        let view = self.view();
        let _ = self.sh.watch.send(crate::pod::api::WatchEvent {
            kind: WatchKind::Deleted,
            view,
        });
        self.gone = true;
    }

    pub fn start_stopping(&mut self, deadline: Instant, delete: bool) {
        let (tx, rx) = watch::channel(deadline);
        for c in &mut self.cs {
            c.probes = None;
        }
        let mut apps = Vec::new();
        let mut sidecars = Vec::new();
        for i in 0..self.cs.len() {
            let Some(inst) = self.cs[i].current.clone().filter(Inst::running) else {
                continue;
            };
            let object = self.cs[i].object();
            let victim = Victim {
                spec: self.cs[i].spec.clone(),
                target: self.target(i, &inst.id),
                object: object.clone(),
            };
            if delete || self.cs[i].kind == ContainerKind::Sidecar {
                self.events.normal(
                    "Killing",
                    &object,
                    format!("Stopping container {}", self.cs[i].name()),
                );
            }
            match self.cs[i].kind {
                ContainerKind::Sidecar => sidecars.push(victim),
                _ => apps.push(victim),
            }
        }
        sidecars.reverse();
        let plan = Plan {
            key: self.key(),
            uid: self.rec.uid().to_string(),
            sandbox_id: self.sandbox.as_ref().map(|s| s.id.clone()),
            apps,
            sidecars,
            pod_dir: self.rec.dir(&self.sh.pods_dir),
            delete,
        };
        let (sh, wtx) = (self.sh.clone(), self.tx.clone());
        tokio::spawn(run(sh, wtx, plan, rx));
        self.termination = Some(Termination {
            deadline: tx,
            delete,
        });
    }
}

/// The termination task.
async fn run(
    sh: Arc<Shared>,
    tx: mpsc::UnboundedSender<Msg>,
    plan: Plan,
    deadline: watch::Receiver<Instant>,
) {
    let apps = plan
        .apps
        .iter()
        .map(|v| stop_one(&sh, &tx, &v.spec, &v.target, &v.object, deadline.clone()));
    futures::future::join_all(apps).await;
    for v in &plan.sidecars {
        stop_one(&sh, &tx, &v.spec, &v.target, &v.object, deadline.clone()).await;
    }
    if let Some(id) = &plan.sandbox_id {
        if let Err(e) = sh.runtime.stop_sandbox(id).await {
            tracing::warn!(pod = %plan.key, error = %e, "stop sandbox");
        }
    }
    let _ = tx.send(Msg::Wake);
    if !plan.delete {
        let _ = tx.send(Msg::Finished);
        return;
    }
    remove_all(&sh, &plan.key, &plan.uid, &plan.pod_dir).await;
    sh.forget_uid(&plan.uid);
    let _ = tx.send(Msg::Terminated);
}

/// Removes every container and sandbox of pod `uid`, its volumes and its record.
async fn remove_all(sh: &Arc<Shared>, key: &str, uid: &str, pod_dir: &std::path::Path) {
    let cf: Filter<crate::runtime::ContainerState> = Filter {
        labels: super::owned_by(Some(uid)),
        ..Default::default()
    };
    for c in sh.runtime.list_containers(&cf) {
        if let Err(e) = sh.runtime.remove_container(c.id()).await {
            tracing::warn!(pod = %key, container = %c.id(), error = %e, "remove container");
        }
    }
    let sf: Filter<crate::runtime::SandboxState> = Filter {
        labels: cf.labels.clone(),
        ..Default::default()
    };
    for s in sh.runtime.list_sandboxes(&sf) {
        if let Err(e) = sh.runtime.remove_sandbox(s.id()).await {
            tracing::warn!(pod = %key, sandbox = %s.id(), error = %e, "remove sandbox");
        }
    }
    if let Err(e) = volumes::teardown(pod_dir) {
        tracing::warn!(pod = %key, error = %e, "tear down volumes");
    }
    if let Err(e) = std::fs::remove_dir_all(pod_dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(pod = %key, error = %e, "remove pod directory");
        }
    }
}
