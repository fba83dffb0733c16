//! The real [`Network`]: the conf dir's CNI plugins run per the spec, with a per-sandbox record
//! on disk of what was attached, so DEL runs exactly until it succeeds; with no config in the
//! conf dir, the embedded network ([`Native`]).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use super::conf::{self, NetworkList};
use super::invoke::{self, Command};
use super::native::{Native, Owner, Plan, CLAIMS_DIR};
use super::orphans;
use super::{result, Attachment, Network, NetworkStatus, PodNetwork, POD_IFNAME, REASON_NOT_READY};
use crate::config::{cidr, NetworkConfig};
use crate::error::{Error, Result, ResultExt};

#[path = "cni_record.rs"]
mod record;
pub(super) use record::Record;
use record::{exec_refused, RecordStep};

/// One network attached on one interface.
#[derive(Debug, Clone)]
struct Step {
    list: NetworkList,
    ifname: String,
}

/// The networks pods are attached to, in order, and where they come from.
#[derive(Debug)]
struct Resolved {
    /// The pod network's name (the last step's).
    name: String,
    /// The config file, or a description of the embedded network.
    source: String,
    steps: Vec<Step>,
    /// The embedded network's plan, when the conf dir has no config (no steps then).
    native: Option<Arc<Plan>>,
}

/// What the conf dir looked like when it was last read: file names, mtimes, sizes, pod CIDR.
type Fingerprint = (Vec<(PathBuf, Option<SystemTime>, u64)>, Option<String>);

struct Loaded {
    key: Fingerprint,
    outcome: std::result::Result<Arc<Resolved>, Error>,
}

/// CNI plugins on the conf dir's network or the embedded default.
pub struct Cni {
    cfg: NetworkConfig,
    pub(super) cache_dir: PathBuf,
    timeout: Duration,
    loaded: Mutex<Option<Loaded>>,
    pod_cidr: Mutex<Option<String>>,
    pub(super) native: Native,
    /// The daemon the embedded network belongs to, and where it is registered.
    owner: Owner,
    claims_dir: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Cni {
    /// CNI with `cfg`; per-sandbox records and the pod CIDR are kept in `cache_dir`.
    pub fn new(cfg: NetworkConfig, cache_dir: PathBuf) -> Result<Cni> {
        std::fs::create_dir_all(&cache_dir).ctx(|| format!("create {}", cache_dir.display()))?;
        let pod_cidr = std::fs::read_to_string(cache_dir.join("pod-cidr"))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        let owner = Owner {
            pid: std::process::id(),
            root: cache_dir.parent().unwrap_or(&cache_dir).to_path_buf(),
            socket: PathBuf::new(),
        };
        let claims_dir = PathBuf::from(CLAIMS_DIR);
        Ok(Cni {
            timeout: Duration::from_secs(cfg.plugin_timeout_secs.max(1)),
            cfg,
            cache_dir,
            loaded: Mutex::new(None),
            pod_cidr: Mutex::new(pod_cidr),
            native: Native::new(owner.clone(), claims_dir.clone()),
            owner,
            claims_dir,
        })
    }

    /// Names the daemon's CRI socket to other daemons whose embedded network would clash
    /// with this one's.
    pub fn with_socket(mut self, socket: &std::path::Path) -> Cni {
        self.owner.socket = socket.to_path_buf();
        self.native = Native::new(self.owner.clone(), self.claims_dir.clone());
        self
    }

    /// Registers the embedded network in `dir` instead of the host's [`CLAIMS_DIR`] (tests).
    pub fn with_claims_dir(mut self, dir: PathBuf) -> Cni {
        self.claims_dir = dir;
        self.native = Native::new(self.owner.clone(), self.claims_dir.clone());
        self
    }

    /// At start: when the embedded network is the active one, registers it and opens its
    /// lease journal now, so a daemon whose embedded network would share a bridge, subnet,
    /// table or lease directory with a running daemon's refuses to start, naming that daemon
    /// and the keys to change (issue 28). A daemon whose pods use a CNI config claims nothing.
    pub fn claim_embedded(&self) -> Result<()> {
        match self.resolve() {
            Ok(r) => match &r.native {
                Some(plan) => self.native.open_now(plan),
                None => Ok(()),
            },
            Err(_) => Ok(()),
        }
    }

    /// Sets the per-plugin-call timeout (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> Cni {
        self.timeout = timeout;
        self
    }

    /// The mark of this daemon's plugin calls: its CNI state dir (one daemon per root).
    fn caller(&self) -> String {
        self.cache_dir.display().to_string()
    }

    pub(super) fn record_path(&self, id: &str) -> PathBuf {
        self.cache_dir.join(format!("{id}.json"))
    }

    /// The networks to attach, re-read when the conf dir's files or the pod CIDR changed.
    fn resolve(&self) -> Result<Arc<Resolved>> {
        let files = conf::config_files(&self.cfg.conf_dir)?;
        let key: Fingerprint = (
            files
                .iter()
                .map(|f| {
                    let m = std::fs::metadata(f).ok();
                    let mtime = m.as_ref().and_then(|m| m.modified().ok());
                    (f.clone(), mtime, m.map(|m| m.len()).unwrap_or(0))
                })
                .collect(),
            lock(&self.pod_cidr).clone(),
        );
        let mut loaded = lock(&self.loaded);
        if let Some(l) = loaded.as_ref().filter(|l| l.key == key) {
            return l.outcome.clone();
        }
        let outcome = self.load(&files, key.1.as_deref()).map(Arc::new);
        if let Err(e) = &outcome {
            tracing::warn!("CNI config: {e}");
        }
        *loaded = Some(Loaded {
            key,
            outcome: outcome.clone(),
        });
        outcome
    }

    fn load(&self, files: &[PathBuf], pod_cidr: Option<&str>) -> Result<Resolved> {
        let Some(first) = files.first() else {
            let plan = Plan::new(&self.cfg, pod_cidr, true)?;
            return Ok(Resolved {
                name: plan.name.clone(),
                source: plan.describe(),
                steps: Vec::new(),
                native: Some(Arc::new(plan)),
            });
        };
        let list = conf::load_file(first)?;
        Ok(Resolved {
            name: list.name.clone(),
            source: first.display().to_string(),
            steps: vec![Step {
                list,
                ifname: POD_IFNAME.into(),
            }],
            native: None,
        })
    }

    /// Every plugin (and IPAM plugin) of `r` exists in the bin dirs.
    fn check_binaries(&self, r: &Resolved) -> Result<()> {
        for step in &r.steps {
            for (i, p) in step.list.plugins.iter().enumerate() {
                let ipam = p
                    .get("ipam")
                    .and_then(|i| i.get("type"))
                    .and_then(Value::as_str);
                for t in std::iter::once(step.list.plugin_type(i)).chain(ipam) {
                    invoke::find_plugin(t, &self.cfg.bin_dirs).map_err(|e| {
                        e.context(format!("network {:?} ({})", step.list.name, r.source))
                    })?;
                }
            }
        }
        Ok(())
    }

    /// The embedded network's plan for tearing down and recovering (whether or not it is the
    /// active network); `None` when the config cannot make one.
    pub(super) fn native_plan(&self) -> Option<Arc<Plan>> {
        if let Ok(r) = self.resolve() {
            if let Some(p) = &r.native {
                return Some(p.clone());
            }
        }
        let pod_cidr = lock(&self.pod_cidr).clone();
        match Plan::new(&self.cfg, pod_cidr.as_deref(), false) {
            Ok(p) => Some(Arc::new(p)),
            Err(e) => {
                tracing::warn!("embedded network: {e}");
                None
            }
        }
    }

    /// The usable networks, or FailedPrecondition saying why not.
    fn ready(&self) -> Result<Arc<Resolved>> {
        let r = self.resolve().map_err(not_ready)?;
        self.check_binaries(&r).map_err(not_ready)?;
        Ok(r)
    }

    /// Runs `cmd` for the first `upto` plugins of `list` (DEL in reverse); ADD chains each
    /// result into the next plugin's prevResult and returns the last. `progress`: the record
    /// and step whose `invoked` count is written before each plugin is run (ADD).
    #[allow(clippy::too_many_arguments)]
    async fn run_list(
        &self,
        cmd: Command,
        list: &NetworkList,
        ifname: &str,
        pod: &PodNetwork,
        prev: Option<Value>,
        upto: usize,
        mut progress: Option<(&mut Record, usize)>,
    ) -> Result<Option<Value>> {
        let runtime = runtime_config(pod);
        let netns = if cmd == Command::Del && !pod.netns.exists() {
            PathBuf::new()
        } else {
            pod.netns.clone()
        };
        let mut env_base = invoke::env(cmd, pod, ifname, &netns, &self.cfg.bin_dirs);
        // Marks the call and what it runs, so the next daemon can find them (see orphans).
        env_base.push((orphans::CALLER_ENV, self.caller()));
        let upto = upto.min(list.plugins.len());
        let order: Vec<usize> = match cmd {
            Command::Del => (0..upto).rev().collect(),
            _ => (0..upto).collect(),
        };
        let mut prev = prev;
        for i in order {
            let t = list.plugin_type(i);
            // A plugin gone since the config was checked: not a NotFound of the sandbox.
            let bin = invoke::find_plugin(t, &self.cfg.bin_dirs)
                .map_err(|e| not_ready(e.context(format!("network {:?}", list.name))))?;
            if let Some((rec, s)) = progress.as_mut() {
                if let Some(step) = rec.steps.get_mut(*s) {
                    if step.invoked.unwrap_or(0) <= i {
                        step.invoked = Some(i + 1);
                        self.write_record(&pod.id, rec).await?;
                    }
                }
            }
            let stdin = list.plugin_stdin(i, prev.as_ref(), &runtime);
            let out = invoke::run(&bin, &env_base, stdin.to_string().as_bytes(), self.timeout)
                .await
                .map_err(|e| e.context(format!("network {:?}", list.name)))?;
            crate::failpoint_check!(format!("cni.{}.plugin-done", cmd.as_str().to_lowercase()))?;
            if cmd == Command::Add {
                let v: Value = serde_json::from_slice(&out).map_err(|e| {
                    Error::internal(format!(
                        "network {:?}: CNI plugin {t} ADD: bad result: {e}",
                        list.name
                    ))
                })?;
                prev = Some(v);
            }
        }
        Ok(prev)
    }

    /// DEL of every step of `rec` (`lists`: their network configs), last attached first; of
    /// each step the plugins ADD was started for.
    async fn del_steps(&self, rec: &Record, lists: &[NetworkList], pod: &PodNetwork) -> Result<()> {
        for (step, list) in rec.steps.iter().zip(lists).rev() {
            let upto = step.invoked.unwrap_or(list.plugins.len());
            if upto == 0 {
                continue;
            }
            let prev = step.result.clone();
            self.run_list(Command::Del, list, &step.ifname, pod, prev, upto, None)
                .await?;
        }
        Ok(())
    }
}
/// How long recovery waits for killed plugin calls of the previous daemon to go.
const ORPHAN_GRACE: Duration = Duration::from_secs(10);

fn not_ready(e: Error) -> Error {
    Error::precondition(format!("pod network not ready: {e}"))
}

/// The runtimeConfig values a pod offers; each plugin gets the ones it declares.
fn runtime_config(pod: &PodNetwork) -> Map<String, Value> {
    let mut m = Map::new();
    if !pod.port_mappings.is_empty() {
        m.insert(
            "portMappings".into(),
            serde_json::to_value(&pod.port_mappings).unwrap_or_default(),
        );
    }
    if let Some(dns) = &pod.dns {
        m.insert("dns".into(), serde_json::to_value(dns).unwrap_or_default());
    }
    if let Some(bw) = &pod.bandwidth {
        m.insert(
            "bandwidth".into(),
            serde_json::to_value(bw).unwrap_or_default(),
        );
    }
    if !pod.ips.is_empty() {
        m.insert(
            "ips".into(),
            serde_json::to_value(&pod.ips).unwrap_or_default(),
        );
    }
    m
}

#[tonic::async_trait]
impl Network for Cni {
    fn status(&self) -> NetworkStatus {
        match self.ready() {
            Ok(r) if r.native.is_some() => match &r.native {
                Some(plan) => self.native.status(plan),
                None => NetworkStatus::default(),
            },
            Ok(r) => NetworkStatus {
                ready: true,
                name: r.name.clone(),
                reason: String::new(),
                message: format!("network {:?} from {}", r.name, r.source),
            },
            Err(e) => NetworkStatus {
                ready: false,
                name: String::new(),
                reason: REASON_NOT_READY.into(),
                message: e.message().to_string(),
            },
        }
    }

    async fn attach(&self, pod: &PodNetwork) -> Result<Attachment> {
        let r = self.ready()?;
        if let Some(plan) = &r.native {
            return self.native.attach(pod, plan.clone()).await;
        }
        if let Some(why) = exec_refused(pod, &self.cfg.bin_dirs) {
            return Err(Error::invalid(format!(
                "sandbox {}: CNI ADD: {why}",
                pod.id
            )));
        }
        let mut rec = Record {
            network: r.name.clone(),
            steps: r
                .steps
                .iter()
                .enumerate()
                .map(|(i, s)| RecordStep {
                    ifname: s.ifname.clone(),
                    list: s.list.raw.clone(),
                    result: None,
                    // The first plugin's ADD is started next (every binary was found just now):
                    // this write records it, so one-plugin networks write no more than before.
                    invoked: Some(usize::from(i == 0 && !s.list.plugins.is_empty())),
                })
                .collect(),
            del_attempts: 0,
            deferred: None,
        };
        // Recorded before the first ADD: whatever happens next, DEL knows what to undo.
        self.write_record(&pod.id, &rec).await?;
        crate::failpoint_check!("cni.add.recorded")?;
        let mut final_result = None;
        for (i, step) in r.steps.iter().enumerate() {
            let n = step.list.plugins.len();
            let progress = Some((&mut rec, i));
            let res = self
                .run_list(
                    Command::Add,
                    &step.list,
                    &step.ifname,
                    pod,
                    None,
                    n,
                    progress,
                )
                .await?;
            if let Some(s) = rec.steps.get_mut(i) {
                s.result = res.clone();
            }
            if step.ifname == POD_IFNAME {
                final_result = res;
            }
        }
        crate::failpoint_check!("cni.add.done")?;
        self.write_record(&pod.id, &rec).await?;
        let ips = match &final_result {
            Some(v) => {
                result::pod_ips(v).map_err(|e| e.context(format!("network {:?}", r.name)))?
            }
            None => Vec::new(),
        };
        Ok(Attachment {
            network: r.name.clone(),
            ips,
        })
    }

    /// The embedded network's part (a no-op unless it leased the sandbox an address), then
    /// CNI DEL from the sandbox's record (see [`Cni::detach_cni`]); nothing when the DEL was
    /// handed over to a background retry ([`Network::defer_detach`]).
    async fn detach(&self, pod: &PodNetwork) -> Result<()> {
        if self.is_deferred(&pod.id) {
            return Ok(());
        }
        self.native.detach(&pod.id, self.native_plan()).await?;
        self.detach_cni(pod).await
    }

    async fn defer_detach(&self, pod: &PodNetwork) -> Result<PodNetwork> {
        self.defer(pod).await
    }

    fn deferred(&self) -> Vec<PodNetwork> {
        self.deferred_pods()
    }

    async fn retry_detach(&self, pod: &PodNetwork) -> Result<()> {
        self.native.detach(&pod.id, self.native_plan()).await?;
        self.detach_cni(pod).await?;
        self.unpin(&pod.id)
    }

    async fn recover(&self) {
        let (dir, caller) = (self.cache_dir.clone(), self.caller());
        let done = tokio::task::spawn_blocking(move || {
            // Interrupted atomic writes of records (issue 16): nothing reads them.
            let temps = crate::store::atomic::remove_temps(&dir);
            (temps, orphans::reap(&caller, ORPHAN_GRACE))
        })
        .await;
        for id in self.sweep_pins() {
            tracing::info!(sandbox = %id, "released the netns pin of a finished deferred DEL");
        }
        match done {
            Ok(((removed, failed), r)) => {
                if removed > 0 {
                    tracing::info!(removed, dir = %self.cache_dir.display(), "removed interrupted record writes");
                }
                for f in failed {
                    tracing::warn!("{f}");
                }
                for (pid, cmd) in &r.killed {
                    tracing::warn!(pid, cmd = %cmd, "killed a CNI plugin call left by the previous daemon");
                }
                if !r.survivors.is_empty() {
                    tracing::warn!(
                        pids = ?r.survivors,
                        "CNI plugin calls of the previous daemon survive SIGKILL (stuck in the kernel); recovery goes on"
                    );
                }
            }
            Err(e) => tracing::warn!("CNI recovery task: {e}"),
        }
    }

    async fn check(&self, pod: &PodNetwork) -> Result<()> {
        let Some(rec) = self.read_record(&pod.id)? else {
            return match self.native_plan() {
                Some(plan) => self.native.check(&pod.id, plan).await,
                None => Err(Error::not_found(format!(
                    "sandbox {}: not attached",
                    pod.id
                ))),
            };
        };
        for step in &rec.steps {
            let list = NetworkList::from_raw(&step.list)?;
            if list.supports_check() {
                let (prev, n) = (step.result.clone(), list.plugins.len());
                self.run_list(Command::Check, &list, &step.ifname, pod, prev, n, None)
                    .await?;
            }
        }
        Ok(())
    }

    fn set_pod_cidr(&self, value: &str) -> Result<()> {
        let value = value.trim();
        if !value.is_empty() {
            cidr::parse_list(value).map_err(|e| e.context("pod CIDR"))?;
        }
        let path = self.cache_dir.join("pod-cidr");
        crate::store::atomic::write_atomic(&path, value.as_bytes())?;
        *lock(&self.pod_cidr) = (!value.is_empty()).then(|| value.to_string());
        tracing::info!(pod_cidr = value, "pod CIDR recorded");
        Ok(())
    }

    async fn reconcile(&self, attached: &[PodNetwork]) -> Result<()> {
        self.native.reconcile(attached, self.native_plan()).await
    }
}
