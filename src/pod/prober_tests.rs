//! Tests of probe workers (startup gating, thresholds, periods, Drop) and of lifecycle hooks, with a fake Exec and loopback servers.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

use super::exec::Exec;
use super::handler;
use super::hooks;
use super::probe_result::{ProbeKind, Result as R};
use super::prober::{Probes, Target, Update};
use crate::error::{Error, Result};
use crate::oci::runc::ExecOutput;

/// Answers exec calls from a script: each command's first word picks the exit code; `hang`
/// sleeps past the timeout; every call is recorded.
#[derive(Default)]
struct FakeExec {
    calls: Mutex<Vec<Vec<String>>>,
    /// Exit code of `check` (changeable while probes run).
    check: Mutex<i32>,
}

#[async_trait::async_trait]
impl Exec for FakeExec {
    async fn exec(&self, _id: &str, cmd: Vec<String>, timeout: Duration) -> Result<ExecOutput> {
        if let Ok(mut c) = self.calls.lock() {
            c.push(cmd.clone());
        }
        let code = match cmd.first().map(String::as_str) {
            Some("ok") => 0,
            Some("fail") => 1,
            Some("check") => *self.check.lock().expect("lock"),
            Some("hang") => {
                tokio::time::sleep(timeout).await;
                return Err(Error::new(
                    crate::error::ErrorKind::DeadlineExceeded,
                    "timed out",
                ));
            }
            _ => return Err(Error::internal("no such command")),
        };
        Ok(ExecOutput {
            exit_code: code,
            stdout: b"out".to_vec(),
            stderr: Vec::new(),
            timed_out: false,
        })
    }
}

fn container(yaml: &str) -> Container {
    serde_yaml_ng::from_str(yaml).expect("container yaml")
}

fn target(c: Container) -> Target {
    Target {
        container_id: "cid".into(),
        container: c,
        host: std::net::IpAddr::from([127, 0, 0, 1]),
    }
}

fn rt() -> tokio::runtime::Handle {
    tokio::runtime::Handle::current()
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Update>) -> Update {
    tokio::time::timeout(Duration::from_secs(60), rx.recv())
        .await
        .expect("an update in time")
        .expect("channel open")
}

#[tokio::test(start_paused = true)]
async fn startup_gates_liveness_and_readiness() {
    let exec = Arc::new(FakeExec::default());
    *exec.check.lock().expect("lock") = 1;
    let c = container(
        "name: a
startupProbe: {exec: {command: [check]}, periodSeconds: 1, failureThreshold: 10}
livenessProbe: {exec: {command: [ok, live]}, periodSeconds: 1}
readinessProbe: {exec: {command: [ok, ready]}, periodSeconds: 1, successThreshold: 2}",
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let http = super::probe::http_client().expect("client");
    let probes = Probes::start(&rt(), target(c), exec.clone(), http, tx);
    assert_eq!(
        probes.results(),
        (Some(R::Unknown), Some(R::Success), Some(R::Failure)),
        "initial results per kind"
    );
    for _ in 0..3 {
        let u = next(&mut rx).await;
        assert_eq!(u.kind, ProbeKind::Startup, "only startup runs first");
        assert!(!u.message.is_empty());
    }
    *exec.check.lock().expect("lock") = 0;
    let u = next(&mut rx).await;
    assert_eq!(
        (u.kind, u.result, u.changed),
        (ProbeKind::Startup, R::Success, true)
    );
    // Liveness starts Success and stays so: it tells nobody. Readiness needs two successes
    // and reports only the change.
    let u = next(&mut rx).await;
    assert_eq!(
        (u.kind, u.result, u.changed, u.message.as_str()),
        (ProbeKind::Readiness, R::Success, true, "")
    );
    let before = probes.last(ProbeKind::Liveness).expect("configured");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(rx.try_recv().is_err(), "unchanged successes are not sent");
    let calls = exec.calls.lock().expect("lock").clone();
    let live = calls.iter().filter(|c| c[..] == ["ok", "live"]).count();
    assert!(live >= 6, "liveness kept probing: {calls:?}");
    for kind in [ProbeKind::Liveness, ProbeKind::Readiness] {
        let last = probes.last(kind).expect("configured");
        assert!(last.ok && last.result == R::Success, "{kind:?}: {last:?}");
    }
    let after = probes.last(ProbeKind::Liveness).expect("configured");
    assert!(
        after.at_ns > before.at_ns,
        "each attempt is recorded: {before:?} then {after:?}"
    );
    assert_eq!(probes.results().2, Some(R::Success));
}

#[tokio::test(start_paused = true)]
async fn liveness_failure_ends_the_probe_readiness_keeps_going() {
    let exec = Arc::new(FakeExec::default());
    let c = container(
        "name: a
livenessProbe: {exec: {command: [fail]}, periodSeconds: 2, failureThreshold: 3, initialDelaySeconds: 5}
readinessProbe: {exec: {command: [fail]}, periodSeconds: 1}",
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let http = super::probe::http_client().expect("client");
    let started = tokio::time::Instant::now();
    let _probes = Probes::start(&rt(), target(c), exec.clone(), http, tx);
    let mut live = Vec::new();
    let mut ready = 0;
    while ready < 20 {
        let u = next(&mut rx).await;
        match u.kind {
            ProbeKind::Liveness => live.push((started.elapsed(), u.result, u.changed)),
            _ => ready += 1,
        }
    }
    assert_eq!(
        live.len(),
        3,
        "liveness stops after reporting its failure: {live:?}"
    );
    assert!(
        live[0].0 >= Duration::from_secs(5),
        "initial delay: {live:?}"
    );
    assert_eq!(live[1].0 - live[0].0, Duration::from_secs(2), "period");
    assert_eq!(live[2].0 - live[1].0, Duration::from_secs(2), "no drift");
    assert_eq!((live[2].1, live[2].2), (R::Failure, true));
    assert!(
        !live[0].2 && !live[1].2,
        "below the threshold nothing changes"
    );
}

#[tokio::test(start_paused = true)]
async fn exec_timeouts_fail_and_drop_stops_the_task() {
    let exec = Arc::new(FakeExec::default());
    let c = container(
        "name: a
readinessProbe: {exec: {command: [hang]}, periodSeconds: 3, timeoutSeconds: 2}",
    );
    let (tx, mut rx) = mpsc::unbounded_channel();
    let http = super::probe::http_client().expect("client");
    let probes = Probes::start(&rt(), target(c), exec.clone(), http, tx);
    let u = next(&mut rx).await;
    assert_eq!(u.result, R::Failure);
    assert!(u.message.contains("timed out"), "{}", u.message);
    drop(probes);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let calls = exec.calls.lock().expect("lock").len();
    assert!(calls <= 2, "probes kept running after drop: {calls} calls");
}

/// A one-route HTTP server: 200 for `/ok` when the X-Probe header is set, 404 otherwise.
async fn http_server() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = l.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_lowercase();
                let ok = req.starts_with("get /ok ") && req.contains("x-probe: yes");
                let resp = if ok {
                    "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"
                } else {
                    "HTTP/1.1 404 Not Found\r\ncontent-length: 4\r\nconnection: close\r\n\r\nnope"
                };
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

#[tokio::test]
async fn http_and_tcp_probes_with_named_ports() {
    let port = http_server().await;
    let c = container(&format!(
        "name: a
ports: [{{name: web, containerPort: {port}}}]
readinessProbe: {{httpGet: {{path: /ok, port: web, httpHeaders: [{{name: X-Probe, value: 'yes'}}]}}, periodSeconds: 1}}
livenessProbe: {{tcpSocket: {{port: web}}, periodSeconds: 1}}"
    ));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let http = super::probe::http_client().expect("client");
    let exec: Arc<dyn Exec> = Arc::new(FakeExec::default());
    let probes = Probes::start(&rt(), target(c), exec, http, tx);
    // Readiness starts Failure: its first success is a change, sent. Liveness starts Success:
    // its successes are only recorded.
    let u = next(&mut rx).await;
    assert_eq!(
        (u.kind, u.result),
        (ProbeKind::Readiness, R::Success),
        "{u:?}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !probes
        .last(ProbeKind::Liveness)
        .is_some_and(|s| s.ok && s.at_ns > 0)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no tcp probe success"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        probes.last(ProbeKind::Startup).is_none(),
        "no startup probe"
    );
    drop(probes);
    let bad = container(&format!(
        "name: a\nreadinessProbe: {{httpGet: {{path: /other, port: {port}}}, periodSeconds: 1}}"
    ));
    let (tx, mut rx) = mpsc::unbounded_channel();
    let exec: Arc<dyn Exec> = Arc::new(FakeExec::default());
    let _p = Probes::start(
        &rt(),
        target(bad),
        exec,
        super::probe::http_client().expect("client"),
        tx,
    );
    let u = next(&mut rx).await;
    assert!(u.message.contains("404"), "{}", u.message);
    let c = container("name: a\nports: [{name: web, containerPort: 80}]");
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
    assert_eq!(
        handler::port(&IntOrString::String("web".into()), &c),
        Ok(80)
    );
    assert_eq!(
        handler::port(&IntOrString::String("8080".into()), &c),
        Ok(8080)
    );
    assert!(handler::port(&IntOrString::String("nope".into()), &c).is_err());
    assert!(handler::port(&IntOrString::Int(0), &c).is_err());
}

fn handler_of(yaml: &str) -> LifecycleHandler {
    serde_yaml_ng::from_str(yaml).expect("handler yaml")
}

#[tokio::test]
async fn hooks_exec_http_sleep_tcp_and_timeouts() {
    let exec = FakeExec::default();
    let http = super::probe::http_client().expect("client");
    let port = http_server().await;
    let t = target(container("name: a"));
    let run = |h: LifecycleHandler, timeout: Duration| {
        let (t, http, exec) = (&t, &http, &exec);
        async move { hooks::run(&h, t, exec, http, timeout).await }
    };
    let s = Duration::from_secs(5);
    assert_eq!(run(handler_of("exec: {command: [ok]}"), s).await, Ok(()));
    let e = run(handler_of("exec: {command: [fail, x]}"), s)
        .await
        .expect_err("exit 1");
    assert!(e.contains("exited with 1") && e.contains("out"), "{e}");
    assert_eq!(
        run(
            handler_of(&format!(
                "httpGet: {{path: /ok, port: {port}, httpHeaders: [{{name: X-Probe, value: 'yes'}}]}}"
            )),
            s
        )
        .await,
        Ok(())
    );
    let e = run(
        handler_of(&format!("httpGet: {{path: /x, port: {port}}}")),
        s,
    )
    .await
    .expect_err("404");
    assert!(e.contains("404"), "{e}");
    let t0 = std::time::Instant::now();
    assert_eq!(run(handler_of("sleep: {seconds: 1}"), s).await, Ok(()));
    assert!(t0.elapsed() >= Duration::from_millis(950));
    let t0 = std::time::Instant::now();
    assert_eq!(
        run(
            handler_of("sleep: {seconds: 30}"),
            Duration::from_millis(300)
        )
        .await,
        Ok(()),
        "sleep is cut to the timeout"
    );
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert_eq!(
        run(handler_of("tcpSocket: {port: 1}"), s).await,
        Ok(()),
        "a no-op"
    );
    let e = run(
        handler_of("exec: {command: [hang]}"),
        Duration::from_millis(300),
    )
    .await
    .expect_err("timeout");
    assert!(e.contains("timed out"), "{e}");
}
