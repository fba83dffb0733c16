//! Exec (ExecSync and streaming, the same client for both runtimes), stdout throughput, and stats listings over 100 running containers.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bosun::proto::runtime::v1 as pb;

use crate::cri::Cri;
use crate::daemons::{Daemon, BOSUN};
use crate::measure::{ms, settle};
use crate::phases::p50_p95;
use crate::report::{Report, Unit};

/// Pods × containers of the phase (100 running `sleep`s).
const PODS: usize = 10;
const PER_POD: usize = 10;
/// Timed calls per series.
const CALLS: usize = 20;
/// Bytes streamed for the throughput rows.
const STREAM_BYTES: u64 = 256 << 20;

/// `bosun --socket <daemon> exec [--transport t] id -- argv`: the runtime's Exec RPC for the
/// URL, then bosun's SPDY or WebSocket client against that runtime's streaming server.
fn cli_exec(d: &Daemon, transport: &str, id: &str, argv: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(BOSUN);
    cmd.arg("--socket")
        .arg(d.socket())
        .args(["exec", "--transport", transport, id, "--"])
        .args(argv)
        .stdin(Stdio::null());
    cmd
}

/// The phase; a streaming client the runtime refuses is recorded as a note, not a failure.
pub async fn run(
    d: &Daemon,
    cri: &mut Cri,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    let k = d.kind;
    let mut ids = Vec::new();
    for _ in 0..PODS {
        let cfg = cri.pod_config("streams", host_net)?;
        let (pod, _) = cri.run_pod(cfg).await?;
        for c in 0..PER_POD {
            let (id, _) = cri
                .create(&pod, &format!("s{c}"), &["sleep", "3600"])
                .await?;
            cri.start(&id).await?;
            ids.push(id);
        }
    }
    let first = ids[0].clone();
    settle().await;

    let mut sync = Vec::new();
    for _ in 0..CALLS {
        let t = Instant::now();
        let code = cri.exec_sync(&first, &["true"]).await?;
        sync.push(ms(t.elapsed()));
        ensure!(code == 0, "ExecSync true exited {code}");
    }
    p50_p95(report, d, "ExecSync `true`", &sync);

    for transport in ["spdy", "websocket"] {
        let mut times = Vec::new();
        let mut failed = None;
        for _ in 0..CALLS {
            let t = Instant::now();
            let out = cli_exec(d, transport, &first, &["true"]).output()?;
            if !out.status.success() {
                failed = Some(String::from_utf8_lossy(&out.stderr).trim().to_string());
                break;
            }
            times.push(ms(t.elapsed()));
        }
        match failed {
            None => p50_p95(
                report,
                d,
                &format!("streaming exec `true` ({transport}, bosun CLI)"),
                &times,
            ),
            Some(e) => report.note(format!(
                "{}: streaming exec over {transport} with bosun's client failed: {e}",
                k.name()
            )),
        }
        let t = Instant::now();
        let out = cli_exec(
            d,
            transport,
            &first,
            &["head", "-c", &STREAM_BYTES.to_string(), "/dev/zero"],
        )
        .stdout(Stdio::piped())
        .output()?;
        let took = t.elapsed();
        if out.status.success() && out.stdout.len() as u64 == STREAM_BYTES {
            let mib_s = STREAM_BYTES as f64 / (1 << 20) as f64 / took.as_secs_f64();
            report.record(
                &format!("exec stdout throughput ({transport}), MiB/s"),
                Unit::N,
                k,
                mib_s.round(),
            );
        } else {
            report.note(format!(
                "{}: 256 MiB stdout over {transport}: {:?}, {} bytes: {}",
                k.name(),
                out.status,
                out.stdout.len(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
    }

    settle().await;
    let mut client = cri.client();
    let mut list = Vec::new();
    let mut listed = 0;
    for _ in 0..CALLS * 2 {
        let t = Instant::now();
        let r = client
            .list_container_stats(pb::ListContainerStatsRequest { filter: None })
            .await
            .context("ListContainerStats")?;
        list.push(ms(t.elapsed()));
        listed = r.into_inner().stats.len();
    }
    ensure!(
        listed >= ids.len(),
        "ListContainerStats listed {listed} of {}",
        ids.len()
    );
    p50_p95(
        report,
        d,
        "ListContainerStats, 100 running containers",
        &list,
    );
    let mut pods = Vec::new();
    for _ in 0..CALLS * 2 {
        let t = Instant::now();
        client
            .list_pod_sandbox_stats(pb::ListPodSandboxStatsRequest { filter: None })
            .await
            .context("ListPodSandboxStats")?;
        pods.push(ms(t.elapsed()));
    }
    p50_p95(report, d, "ListPodSandboxStats, 10 pods", &pods);
    tokio::time::sleep(Duration::from_millis(10)).await;
    cri.remove_all().await?;
    Ok(())
}
