//! Probe workers of one container instance: startup gating liveness and readiness, periods, thresholds, one tokio task.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Probe};
use tokio::sync::mpsc::UnboundedSender;
use tokio::time::Instant;

use super::exec::Exec;
use super::handler;
use super::probe::{self, Outcome};
use super::probe_result::{ProbeKind, Result, Thresholds, Tracker};

/// The kubelet's defaults.
const DEFAULT_PERIOD: u64 = 10;
const DEFAULT_TIMEOUT: u64 = 1;

/// Where a container's probes and hooks go.
#[derive(Debug, Clone)]
pub struct Target {
    /// The CRI container id (exec probes and hooks).
    pub container_id: String,
    /// The container's spec (probes, named ports).
    pub container: Container,
    /// The pod IP, or 127.0.0.1 for host-network pods.
    pub host: IpAddr,
}

/// A probe attempt the supervisor must hear of: one that changed the thresholded result or
/// failed. Unchanged successes are only recorded in the `Probes` handle ([`Probes::last`]),
/// so steady healthy probes cost the supervisor nothing.
#[derive(Debug, Clone)]
pub struct Update {
    /// Container name.
    pub container: String,
    /// The instance probed.
    pub container_id: String,
    /// Which probe.
    pub kind: ProbeKind,
    /// The thresholded result after this attempt.
    pub result: Result,
    /// The thresholded result changed with this attempt.
    pub changed: bool,
    /// This attempt's failure reason (empty on success).
    pub message: String,
    /// Wall-clock ns when the attempt finished.
    pub at_ns: i64,
}

/// The state of one probe kind: its thresholded result and its last attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub result: Result,
    /// Wall-clock ns when the last attempt finished (0: none yet).
    pub at_ns: i64,
    /// The last attempt succeeded.
    pub ok: bool,
}

type Results = Arc<Mutex<[Option<Slot>; 3]>>;

/// Every probe of one container instance; dropping it stops them.
pub struct Probes {
    task: tokio::task::JoinHandle<()>,
    results: Results,
}

impl Drop for Probes {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn index(kind: ProbeKind) -> usize {
    match kind {
        ProbeKind::Startup => 0,
        ProbeKind::Liveness => 1,
        ProbeKind::Readiness => 2,
    }
}

impl Probes {
    /// Starts the container's probes: the startupProbe first (if any); liveness and readiness
    /// once it succeeded. A liveness or startup failure ends that probe (the container is
    /// killed; its next instance gets new probes); readiness keeps running.
    /// The probe task runs on `rt` (the daemon's probe runtime, see `probe_runtime`).
    pub fn start(
        rt: &tokio::runtime::Handle,
        target: Target,
        exec: Arc<dyn Exec>,
        http: reqwest::Client,
        tx: UnboundedSender<Update>,
    ) -> Probes {
        let c = &target.container;
        let initial = |p: &Option<Probe>, k: ProbeKind| {
            p.as_ref().map(|p| Slot {
                result: Tracker::new(k, thresholds(p)).result(),
                at_ns: 0,
                ok: false,
            })
        };
        let results: Results = Arc::new(Mutex::new([
            initial(&c.startup_probe, ProbeKind::Startup),
            initial(&c.liveness_probe, ProbeKind::Liveness),
            initial(&c.readiness_probe, ProbeKind::Readiness),
        ]));
        let worker = Worker {
            target: Arc::new(target),
            exec,
            http,
            tx,
            results: results.clone(),
        };
        let task = rt.spawn(async move { worker.run().await });
        Probes { task, results }
    }

    /// The current (startup, liveness, readiness) results; `None` for a probe not configured.
    pub fn results(&self) -> (Option<Result>, Option<Result>, Option<Result>) {
        let r = self.slots().map(|s| s.map(|s| s.result));
        (r[0], r[1], r[2])
    }

    /// The state of one probe kind (`None`: not configured).
    pub fn last(&self, kind: ProbeKind) -> Option<Slot> {
        self.slots()[index(kind)]
    }

    fn slots(&self) -> [Option<Slot>; 3] {
        match self.results.lock() {
            Ok(g) => *g,
            Err(p) => *p.into_inner(),
        }
    }
}

fn thresholds(p: &Probe) -> Thresholds {
    Thresholds {
        success: p.success_threshold.unwrap_or(1).max(1) as u32,
        failure: p.failure_threshold.unwrap_or(3).max(1) as u32,
    }
}

struct Worker {
    target: Arc<Target>,
    exec: Arc<dyn Exec>,
    http: reqwest::Client,
    tx: UnboundedSender<Update>,
    results: Results,
}

impl Worker {
    async fn run(self) {
        let c = &self.target.container;
        if let Some(p) = &c.startup_probe {
            if self.probe(ProbeKind::Startup, p).await != Result::Success {
                return;
            }
        }
        let live = async {
            if let Some(p) = &c.liveness_probe {
                self.probe(ProbeKind::Liveness, p).await;
            }
        };
        let ready = async {
            if let Some(p) = &c.readiness_probe {
                self.probe(ProbeKind::Readiness, p).await;
            }
        };
        tokio::join!(live, ready);
    }

    /// Runs one probe until it is over: startup until it succeeds or fails, liveness until
    /// it fails, readiness for ever. Returns the final result.
    async fn probe(&self, kind: ProbeKind, p: &Probe) -> Result {
        let delay = Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        let period =
            Duration::from_secs(p.period_seconds.map_or(DEFAULT_PERIOD, |s| s.max(1) as u64));
        let timeout = Duration::from_secs(
            p.timeout_seconds
                .map_or(DEFAULT_TIMEOUT, |s| s.max(1) as u64),
        );
        let mut tracker = Tracker::new(kind, thresholds(p));
        tokio::time::sleep(delay).await;
        let mut next = Instant::now();
        loop {
            let outcome = self.attempt(p, timeout).await;
            let (ok, message) = match outcome {
                Outcome::Success => (true, String::new()),
                Outcome::Failure(m) | Outcome::Unknown(m) => (false, m),
            };
            let changed = tracker.record(ok);
            let result = tracker.result();
            let at_ns = crate::runtime::status::now_ns();
            if let Ok(mut r) = self.results.lock() {
                r[index(kind)] = Some(Slot { result, at_ns, ok });
            }
            if changed.is_some() || !ok {
                let _ = self.tx.send(Update {
                    container: self.target.container.name.clone(),
                    container_id: self.target.container_id.clone(),
                    kind,
                    result,
                    changed: changed.is_some(),
                    message,
                    at_ns,
                });
            }
            match (kind, changed) {
                (ProbeKind::Startup, Some(r)) => return r,
                (ProbeKind::Liveness, Some(Result::Failure)) => return Result::Failure,
                _ => {}
            }
            // Periods are counted from the previous start, so they do not drift; an attempt
            // longer than a period makes the next start at once, never a burst.
            next += period;
            let now = Instant::now();
            if next < now {
                next = now;
            }
            tokio::time::sleep_until(next).await;
        }
    }

    async fn attempt(&self, p: &Probe, timeout: Duration) -> Outcome {
        let t = &*self.target;
        if let Some(e) = &p.exec {
            let cmd = e.command.clone().unwrap_or_default();
            if cmd.is_empty() {
                return Outcome::Unknown("exec probe has no command".into());
            }
            return handler::exec(self.exec.as_ref(), &t.container_id, &cmd, timeout).await;
        }
        if let Some(g) = &p.http_get {
            return match handler::http_request(g, &t.container, t.host) {
                Ok((url, headers)) => probe::http(&self.http, &url, &headers, timeout).await,
                Err(m) => Outcome::Unknown(m),
            };
        }
        if let Some(s) = &p.tcp_socket {
            return handler::tcp(&s.port, s.host.as_deref(), &t.container, t.host, timeout).await;
        }
        if let Some(g) = &p.grpc {
            let port = match u16::try_from(g.port).ok().filter(|p| *p > 0) {
                Some(p) => p,
                None => return Outcome::Unknown(format!("invalid grpc port {}", g.port)),
            };
            let service = g.service.clone().unwrap_or_default();
            return probe::grpc(SocketAddr::new(t.host, port), &service, timeout).await;
        }
        Outcome::Unknown("the probe has no handler".into())
    }
}
