//! bosun only: the standalone supervisor running N pods, each probed (httpGet readiness, tcpSocket liveness) every second: daemon CPU and memory, probe period accuracy, KILL deadline accuracy.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio_stream::StreamExt;

use crate::cri::BUSYBOX;
use crate::daemons::{Daemon, Kind, BOSUN};
use crate::measure::percentile;
use crate::report::{Report, Unit, MIB};
use bosun::proto::runtime::v1 as pb;

/// How long the CPU and probe timing window lasts.
const WINDOW: Duration = Duration::from_secs(30);
/// The grace of the TERM-ignoring pod whose KILL deadline is measured.
const KILL_GRACE: u64 = 3;

/// Arrival times of probe attempts per target port: (http GETs, tcp connects).
type Arrivals = Arc<Mutex<HashMap<u16, (Vec<Instant>, Vec<Instant>)>>>;

/// One listener per pod on 127.0.0.1, standing in for the pod's server: it answers GETs with
/// 200 and records when each HTTP and TCP probe arrives.
async fn listeners(n: usize, arrivals: &Arrivals) -> anyhow::Result<Vec<u16>> {
    let mut ports = Vec::new();
    for _ in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await?;
        let port = l.local_addr()?.port();
        ports.push(port);
        let arrivals = arrivals.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let arrivals = arrivals.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 1024];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let now = Instant::now();
                    let http = buf[..n].starts_with(b"GET ");
                    if let Ok(mut a) = arrivals.lock() {
                        let e = a.entry(port).or_default();
                        if http {
                            e.0.push(now);
                        } else {
                            e.1.push(now);
                        }
                    }
                    if http {
                        let _ = s
                            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
                            .await;
                    }
                });
            }
        });
    }
    Ok(ports)
}

fn manifest(ports: &[u16]) -> String {
    let mut text = String::new();
    for (i, port) in ports.iter().enumerate() {
        text.push_str(&format!(
            "---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: probed-{i}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: 1\n  containers:\n  - name: app\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    command: [sleep, \"3600\"]\n    readinessProbe:\n      httpGet: {{path: /healthz, port: {port}}}\n      periodSeconds: 1\n    livenessProbe:\n      tcpSocket: {{port: {port}}}\n      periodSeconds: 1\n"
        ));
    }
    text
}

fn cli(d: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    let out = std::process::Command::new(BOSUN)
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .output()
        .with_context(|| format!("bosun {args:?}"))?;
    if !out.status.success() {
        bail!(
            "bosun {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// (pods listed, pods Ready).
fn ready_count(d: &Daemon) -> anyhow::Result<(usize, usize)> {
    let text = cli(d, &["pod", "get", "-A", "-o", "json"])?;
    let v: serde_json::Value = serde_json::from_str(&text).context("pod get -o json")?;
    let items = v["items"].as_array().cloned().unwrap_or_default();
    let ready = items
        .iter()
        .filter(|p| {
            p["status"]["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            })
        })
        .count();
    Ok((items.len(), ready))
}

/// utime + stime of `pid`, in seconds.
fn cpu_secs(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let rest = stat.rsplit_once(')').map(|(_, r)| r).context("stat")?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 =
        f.get(11).context("utime")?.parse::<f64>()? + f.get(12).context("stime")?.parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// Intervals (ms) between consecutive arrivals inside the window.
fn intervals(times: &[Instant], from: Instant, to: Instant) -> Vec<f64> {
    let inside: Vec<_> = times.iter().filter(|t| **t >= from && **t <= to).collect();
    inside
        .windows(2)
        .map(|w| w[1].duration_since(*w[0]).as_secs_f64() * 1000.0)
        .collect()
}

/// The whole phase; removes its pods before returning.
pub async fn run(
    d: &Daemon,
    n: usize,
    dir: &std::path::Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let k = Kind::Bosun;
    let arrivals: Arrivals = Arc::default();
    let ports = listeners(n, &arrivals).await?;
    let before = d.mem()?;
    let file = dir.join("probed.yaml");
    std::fs::write(&file, manifest(&ports))?;
    let applied = Instant::now();
    cli(d, &["pod", "apply", "-f", &file.display().to_string()])?;
    let result = measure(d, n, &ports, &arrivals, applied, before, dir, report).await;
    // Delete everything whatever happened.
    for i in 0..n {
        let _ = cli(
            d,
            &["pod", "delete", &format!("probed-{i}"), "--wait=false"],
        );
    }
    let _ = cli(d, &["pod", "delete", "kill-deadline", "--wait=false"]);
    let gone = crate::daemons::wait_until(Duration::from_secs(120), || {
        ready_count(d).is_ok_and(|(listed, _)| listed == 0)
    });
    if !gone {
        eprintln!("pods bench: supervised pods still listed after 120 s");
    }
    let _ = k;
    result
}

#[allow(clippy::too_many_arguments)]
async fn measure(
    d: &Daemon,
    n: usize,
    ports: &[u16],
    arrivals: &Arrivals,
    applied: Instant,
    before: crate::measure::Mem,
    dir: &std::path::Path,
    report: &mut Report,
) -> anyhow::Result<()> {
    let k = Kind::Bosun;
    let deadline = applied + Duration::from_secs(300);
    loop {
        let (listed, ready) = ready_count(d)?;
        if listed == n && ready == n {
            break;
        }
        if Instant::now() > deadline {
            bail!("{ready}/{n} supervised pods ready after 300 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    report.record(
        &format!("supervisor: apply → all {n} pods Ready"),
        Unit::Ms,
        k,
        applied.elapsed().as_secs_f64() * 1000.0,
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (cpu0, t0) = (cpu_secs(d.pid())?, Instant::now());
    tokio::time::sleep(WINDOW).await;
    let (cpu1, t1) = (cpu_secs(d.pid())?, Instant::now());
    let mem = d.mem()?;
    let pct = (cpu1 - cpu0) / t1.duration_since(t0).as_secs_f64() * 100.0;
    report.record(
        &format!("supervisor: daemon CPU with {n} pods probed every 1 s (% of one core)"),
        Unit::N,
        k,
        pct,
    );
    report.record(
        &format!("supervisor: daemon RSS growth per pod ({n} pods)"),
        Unit::MiB,
        k,
        (mem.rss - before.rss) / n as f64 / MIB,
    );
    report.record(
        &format!("supervisor: daemon RSS with {n} pods"),
        Unit::MiB,
        k,
        mem.rss / MIB,
    );
    let (mut http, mut tcp) = (Vec::new(), Vec::new());
    if let Ok(a) = arrivals.lock() {
        for p in ports {
            if let Some((h, t)) = a.get(p) {
                http.extend(intervals(h, t0, t1));
                tcp.extend(intervals(t, t0, t1));
            }
        }
    }
    for (name, v) in [("httpGet readiness", &http), ("tcpSocket liveness", &tcp)] {
        if v.is_empty() {
            bail!("no {name} probe arrived in the window");
        }
        let dev: Vec<f64> = v.iter().map(|ms| (ms - 1000.0).abs()).collect();
        report.record(
            &format!("supervisor: {name} period 1 s, |interval − 1 s| p50"),
            Unit::Ms,
            k,
            percentile(&dev, 0.5),
        );
        report.record(
            &format!("supervisor: {name} period 1 s, |interval − 1 s| p99"),
            Unit::Ms,
            k,
            percentile(&dev, 0.99),
        );
    }
    let late = kill_deadline(d, dir).await?;
    report.record(
        &format!("supervisor: KILL after a {KILL_GRACE} s grace under load, late by"),
        Unit::Ms,
        k,
        late,
    );
    Ok(())
}

/// Deletes a TERM-ignoring pod with a 3 s grace and returns how late (ms) its container's
/// STOPPED event came after delete + grace.
async fn kill_deadline(d: &Daemon, dir: &std::path::Path) -> anyhow::Result<f64> {
    let file = dir.join("kill.yaml");
    std::fs::write(
        &file,
        format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: kill-deadline}}\nspec:\n  hostNetwork: true\n  terminationGracePeriodSeconds: {KILL_GRACE}\n  containers:\n  - name: stubborn\n    image: {BUSYBOX}\n    imagePullPolicy: Never\n    command: [sh, -c, \"trap '' TERM; while true; do sleep 1; done\"]\n"),
    )?;
    cli(d, &["pod", "apply", "-f", &file.display().to_string()])?;
    let id = {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = cli(d, &["pod", "get", "kill-deadline", "-o", "json"])?;
            let v: serde_json::Value = serde_json::from_str(&text)?;
            let st = &v["status"]["containerStatuses"][0];
            if st["state"]["running"].is_object() {
                break st["containerID"]
                    .as_str()
                    .unwrap_or_default()
                    .trim_start_matches("bosun://")
                    .to_string();
            }
            if Instant::now() > deadline {
                bail!("kill-deadline pod not running after 60 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    let mut events = d
        .runtime()
        .get_container_events(pb::GetEventsRequest {})
        .await?
        .into_inner();
    let asked = Instant::now();
    cli(d, &["pod", "delete", "kill-deadline", "--wait=false"])?;
    let stopped = tokio::time::timeout(Duration::from_secs(KILL_GRACE + 30), async {
        while let Some(ev) = events.next().await {
            let ev = ev?;
            if ev.container_id == id
                && ev.container_event_type == pb::ContainerEventType::ContainerStoppedEvent as i32
            {
                return Ok::<_, anyhow::Error>(Instant::now());
            }
        }
        bail!("event stream ended")
    })
    .await
    .context("no STOPPED event for the TERM-ignoring container")??;
    let late = stopped.duration_since(asked).as_secs_f64() * 1000.0 - KILL_GRACE as f64 * 1000.0;
    Ok(late)
}
