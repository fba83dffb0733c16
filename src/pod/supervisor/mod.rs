//! The standalone pod supervisor: one worker task per pod, the kubelet's lifecycle over the runtime.

mod admit;
mod apply;
mod describe;
mod events;
mod pressure;
mod record;
mod service;
mod start;
mod state;
mod static_pods;
mod status;
mod sync;
mod terminate;
mod worker;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::{broadcast, mpsc, oneshot, watch};

use self::record::Record;
use self::worker::{Msg, Worker};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::image::service::Images;
use crate::pod::api::{PodView, WatchEvent};
use crate::pod::env::Sources;
use crate::pod::exec::Exec;
use crate::pod::labels;
use crate::runtime::{Filter, Runtime};

/// Watch events kept for a slow watcher.
const WATCH_BACKLOG: usize = 1024;

/// A live pod's handle.
struct Handle {
    uid: String,
    tx: mpsc::UnboundedSender<Msg>,
    view: watch::Receiver<Arc<PodView>>,
    done: watch::Receiver<bool>,
    /// The applied spec, labels and annotations: an identical apply changes nothing.
    fingerprint: String,
}

/// A worker's mailbox and its latest view.
type WorkerRef = (mpsc::UnboundedSender<Msg>, watch::Receiver<Arc<PodView>>);

/// What every worker shares.
pub struct Shared {
    pub runtime: Arc<Runtime>,
    pub images: Arc<Images>,
    pub config: Arc<Config>,
    pub exec: Arc<dyn Exec>,
    pub http: reqwest::Client,
    /// The single-threaded runtime probe tasks run on.
    pub probe_rt: tokio::runtime::Handle,
    /// `<root>/pods`: one directory per pod uid (record, volumes).
    pub pods_dir: PathBuf,
    pub watch: broadcast::Sender<WatchEvent>,
    pub node_name: String,
    pub host_ip: String,
    /// Live pods by (namespace, name).
    live: Mutex<BTreeMap<(String, String), Handle>>,
    /// Every worker (live or terminating) by pod uid, for runtime events.
    workers: Mutex<HashMap<String, WorkerRef>>,
    /// User namespace ranges picked for sandboxes being created.
    userns_picks: crate::pod::userns::Picks,
    /// Node resources: admission, pod cgroups, eviction.
    pub node: Arc<crate::pod::node::Node>,
}

/// The labels that select what the supervisor made: everything (`None`) or one pod's.
fn owned_by(uid: Option<&str>) -> HashMap<String, String> {
    let mut m = HashMap::from([(
        labels::SUPERVISED.to_string(),
        labels::SUPERVISED_VALUE.to_string(),
    )]);
    if let Some(uid) = uid {
        m.insert(labels::POD_UID.to_string(), uid.to_string());
    }
    m
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Shared {
    /// Picks a user namespace range no sandbox holds (CRI-made ones included) and no other
    /// creation has picked; keep it until the sandbox that takes it is recorded.
    pub fn pick_userns(&self) -> Result<crate::pod::userns::Picked<'_>> {
        let sandboxes = self.runtime.list_sandboxes(&Default::default());
        let held = sandboxes.iter().filter_map(|s| {
            let ns = s.meta().request.userns.as_ref()?;
            crate::pod::userns::first_host_id(ns)
        });
        self.userns_picks.pick(held)
    }

    pub fn sources(&self) -> Sources {
        Sources {
            configmap_dir: self.config.pod.configmap_dir.clone(),
            secret_dir: self.config.pod.secret_dir.clone(),
        }
    }

    /// The pod leaves the API (its worker may still be stopping it).
    pub fn forget(&self, namespace: &str, name: &str, uid: &str) {
        let mut live = lock(&self.live);
        let key = (namespace.to_string(), name.to_string());
        if live.get(&key).is_some_and(|h| h.uid == uid) {
            live.remove(&key);
        }
    }

    /// Sends `msg` to the worker of pod `uid` (live or terminating), if there is one.
    pub fn tell(&self, uid: &str, msg: Msg) {
        if let Some((tx, _)) = lock(&self.workers).get(uid) {
            let _ = tx.send(msg);
        }
    }

    /// The latest view of pod `uid`'s worker.
    pub fn worker_view(&self, uid: &str) -> Option<Arc<PodView>> {
        lock(&self.workers)
            .get(uid)
            .map(|(_, v)| v.borrow().clone())
    }

    /// The current container instances of pods that may still run them (not Failed or
    /// Succeeded): what disk reclaim keeps.
    pub fn current_instances(&self) -> std::collections::HashSet<String> {
        let views: Vec<Arc<PodView>> = lock(&self.workers)
            .values()
            .map(|(_, v)| v.borrow().clone())
            .collect();
        let mut out = std::collections::HashSet::new();
        for v in views {
            let Some(st) = v.pod.status.as_ref() else {
                continue;
            };
            if matches!(st.phase.as_deref(), Some("Failed") | Some("Succeeded")) {
                continue;
            }
            for c in st
                .container_statuses
                .iter()
                .flatten()
                .chain(st.init_container_statuses.iter().flatten())
            {
                if let Some(id) = c
                    .container_id
                    .as_deref()
                    .and_then(|i| i.strip_prefix("bosun://"))
                {
                    out.insert(id.to_string());
                }
            }
        }
        out
    }

    /// The pod is gone entirely.
    pub fn forget_uid(&self, uid: &str) {
        lock(&self.workers).remove(uid);
        lock(&self.live).retain(|_, h| h.uid != uid);
    }
}

/// The supervisor.
pub struct Supervisor {
    sh: Arc<Shared>,
}

fn fingerprint(pod: &Pod) -> String {
    let v = serde_json::json!({
        "labels": pod.metadata.labels,
        "annotations": pod.metadata.annotations,
        "spec": pod.spec,
    });
    v.to_string()
}

fn new_uid() -> String {
    let b: [u8; 16] = rand::random();
    let h = hex::encode(b);
    format!(
        "{}-{}-4{}-a{}-{}",
        &h[0..8],
        &h[8..12],
        &h[13..16],
        &h[17..20],
        &h[20..32]
    )
}

/// The node's name (its hostname) and an address of it (the hostname's first non-loopback
/// IPv4, else 127.0.0.1).
fn node_facts() -> (String, String) {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let ip = std::net::ToSocketAddrs::to_socket_addrs(&(name.as_str(), 0))
        .ok()
        .into_iter()
        .flatten()
        .map(|a| a.ip())
        .find(|ip| ip.is_ipv4() && !ip.is_loopback())
        .map_or_else(|| "127.0.0.1".to_string(), |ip| ip.to_string());
    (name.to_lowercase(), ip)
}

impl Supervisor {
    /// Opens the supervisor: picks up every recorded pod (running ones keep running,
    /// terminations restart with full grace), removes supervised sandboxes nobody records,
    /// and starts the static pod watcher.
    pub async fn open(
        runtime: Arc<Runtime>,
        images: Arc<Images>,
        config: Arc<Config>,
    ) -> Result<Arc<Supervisor>> {
        let pods_dir = config.root.join("pods");
        std::fs::create_dir_all(&pods_dir)
            .map_err(|e| Error::internal(format!("create {}: {e}", pods_dir.display())))?;
        let http = crate::pod::probe::http_client()
            .map_err(|e| Error::internal(format!("probe http client: {e}")))?;
        let probe_rt = crate::pod::probe_runtime::start()
            .map_err(|e| Error::internal(format!("probe runtime: {e}")))?;
        let (node_name, host_ip) = node_facts();
        let node = Arc::new(pressure::open_node(&config, &images));
        let sh = Arc::new(Shared {
            probe_rt,
            exec: Arc::new(runtime.clone()),
            runtime,
            images,
            config,
            http,
            pods_dir,
            watch: broadcast::channel(WATCH_BACKLOG).0,
            node_name,
            host_ip,
            live: Mutex::new(BTreeMap::new()),
            workers: Mutex::new(HashMap::new()),
            userns_picks: Default::default(),
            node,
        });
        let sup = Arc::new(Supervisor { sh: sh.clone() });
        sup.recover().await;
        spawn_event_router(sh.clone());
        pressure::spawn(sh.clone());
        if !sh.config.pod.manifest_dir.as_os_str().is_empty() {
            static_pods::spawn(sup.clone());
        }
        Ok(sup)
    }

    async fn recover(&self) {
        let records = record::load_all(&self.sh.pods_dir);
        let uids: std::collections::HashSet<String> =
            records.iter().map(|r| r.uid().to_string()).collect();
        self.remove_orphans(&uids).await;
        // The newest record of a name is the live one; older ones were being replaced.
        let mut newest: HashMap<String, String> = HashMap::new();
        for r in &records {
            if r.deletion.is_none() {
                newest.insert(r.key(), r.uid().to_string());
            }
        }
        for mut r in records {
            let live = newest.get(&r.key()).map(String::as_str) == Some(r.uid());
            if !live && r.deletion.is_none() {
                r.deletion = Some(record::Deletion {
                    at_ns: crate::runtime::status::now_ns(),
                    grace_secs: 30,
                    force: false,
                });
            }
            let in_api = r.deletion.is_none_or(|d| !d.force);
            let fp = fingerprint(&r.pod);
            self.spawn(r, None, fp, in_api);
        }
        tracing::info!(
            pods = lock(&self.sh.live).len(),
            "supervised pods recovered"
        );
    }

    /// Supervised sandboxes with no record (a crash between removal steps) are removed.
    async fn remove_orphans(&self, uids: &std::collections::HashSet<String>) {
        let f: Filter<crate::runtime::SandboxState> = Filter {
            labels: owned_by(None),
            ..Default::default()
        };
        for s in self.sh.runtime.list_sandboxes(&f) {
            let uid = s.meta().request.pod.uid.clone();
            if uids.contains(&uid) {
                continue;
            }
            tracing::warn!(sandbox = %s.id(), uid = %uid, "supervised sandbox without a pod record: removing");
            let _ = self.sh.runtime.stop_sandbox(s.id()).await;
            let _ = self.sh.runtime.remove_sandbox(s.id()).await;
        }
    }

    /// Starts a worker for `rec`; `in_api`: the pod is visible (not force-deleted).
    fn spawn(
        &self,
        rec: Record,
        predecessor: Option<watch::Receiver<bool>>,
        fingerprint: String,
        in_api: bool,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let (ptx, prx) = mpsc::unbounded_channel();
        let (done_tx, done_rx) = watch::channel(false);
        let initial = Arc::new(PodView {
            pod: rec.pod.clone(),
            events: Vec::new(),
            probes: Vec::new(),
            source: rec.source.clone(),
            sandbox_id: String::new(),
            logs: Vec::new(),
            user_namespace: String::new(),
        });
        let (view_tx, view_rx) = watch::channel(initial);
        let uid = rec.uid().to_string();
        let key = (rec.namespace().to_string(), rec.name().to_string());
        lock(&self.sh.workers).insert(uid.clone(), (tx.clone(), view_rx.clone()));
        if in_api {
            lock(&self.sh.live).insert(
                key,
                Handle {
                    uid: uid.clone(),
                    tx: tx.clone(),
                    view: view_rx,
                    done: done_rx,
                    fingerprint,
                },
            );
        }
        let mut w = Worker::new(self.sh.clone(), rec, tx, ptx, view_tx);
        w.gone = !in_api;
        let sh = self.sh.clone();
        tokio::spawn(async move {
            w.run(rx, prx, predecessor).await;
            sh.forget_uid(&uid);
            let _ = done_tx.send(true);
        });
    }

    fn handle(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<(mpsc::UnboundedSender<Msg>, Arc<PodView>)> {
        let live = lock(&self.sh.live);
        let found = live
            .get(&(namespace.to_string(), name.to_string()))
            .map(|h| (h.tx.clone(), h.view.borrow().clone()));
        found.ok_or_else(|| Error::not_found(format!("pod {namespace}/{name}: not found")))
    }

    async fn ask(
        &self,
        namespace: &str,
        name: &str,
        msg: impl FnOnce(oneshot::Sender<Result<Arc<PodView>>>) -> Msg,
    ) -> Result<PodView> {
        let (tx, _) = self.handle(namespace, name)?;
        let (rtx, rrx) = oneshot::channel();
        tx.send(msg(rtx))
            .map_err(|_| Error::not_found(format!("pod {namespace}/{name}: not found")))?;
        let view = rrx
            .await
            .map_err(|_| Error::not_found(format!("pod {namespace}/{name}: gone")))??;
        Ok((*view).clone())
    }
}

/// Routes runtime events (container exits...) to the worker of the pod they belong to.
fn spawn_event_router(sh: Arc<Shared>) {
    let mut rx = sh.runtime.subscribe_events();
    tokio::spawn(async move {
        loop {
            match rx.recv().await {
                Ok(ev) => {
                    let uid = ev
                        .sandbox
                        .as_ref()
                        .map(|(s, _)| &s.meta().request.labels)
                        .filter(|l| {
                            l.get(labels::SUPERVISED).map(String::as_str)
                                == Some(labels::SUPERVISED_VALUE)
                        })
                        .and_then(|l| l.get(labels::POD_UID).cloned());
                    if let Some(uid) = uid {
                        if let Some((tx, _)) = lock(&sh.workers).get(&uid) {
                            let _ = tx.send(Msg::Wake);
                        }
                    }
                }
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    for (tx, _) in lock(&sh.workers).values() {
                        let _ = tx.send(Msg::Wake);
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
    });
}
