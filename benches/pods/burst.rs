//! Pods at scale: many started at once from as many clients, many running pods removed, and the daemon's memory after many pod lifecycles.

use std::time::Instant;

use crate::cri::{Cri, SLEEP};
use crate::daemons::Daemon;
use crate::measure::{ms, settle};
use crate::report::{Report, Unit, MIB};

/// `n` pods started at once (RunPodSandbox + CreateContainer + StartContainer of `sleep`, each
/// pod from its own client task): the wall time until all run and the throughput; then the `n`
/// running pods removed one after another (StopPodSandbox + RemovePodSandbox, as
/// `crictl rmp -fa` does).
pub async fn burst(
    d: &Daemon,
    cri: &mut Cri,
    n: usize,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    settle().await;
    let cfgs = (0..n)
        .map(|_| cri.pod_config("burst", host_net))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let cpu_before = machine_cpu_ms()?;
    let t = Instant::now();
    let tasks: Vec<_> = cfgs
        .into_iter()
        .map(|cfg| {
            let mut c = cri.fork();
            tokio::spawn(async move {
                let (pod, _) = c.run_pod(cfg).await?;
                let started = async {
                    let (id, _) = c.create(&pod, "sleep", &SLEEP).await?;
                    c.start(&id).await?;
                    anyhow::Ok(())
                }
                .await;
                anyhow::Ok((pod.id, started))
            })
        })
        .collect();
    let results = futures::future::join_all(tasks).await;
    let wall = t.elapsed();
    let cpu = machine_cpu_ms()? - cpu_before;
    let mut ids = Vec::with_capacity(n);
    let mut first_error = None;
    for r in results {
        match r {
            Ok(Ok((id, started))) => {
                cri.adopt(id.clone());
                ids.push(id);
                if let Err(e) = started {
                    first_error.get_or_insert(e);
                }
            }
            Ok(Err(e)) => {
                first_error.get_or_insert(e);
            }
            Err(e) => {
                first_error.get_or_insert(anyhow::anyhow!("task: {e}"));
            }
        }
    }
    if let Some(e) = first_error {
        return Err(e.context(format!("{n} pods at once")));
    }
    report.record(
        &format!("{n} pods started at once (runp+create+start, {n} clients): all running"),
        Unit::Ms,
        d.kind,
        ms(wall),
    );
    report.record(
        &format!("{n} pods started at once: pods per second"),
        Unit::N,
        d.kind,
        n as f64 / wall.as_secs_f64(),
    );
    report.record(
        &format!("{n} pods started at once: machine CPU time per pod"),
        Unit::Ms,
        d.kind,
        cpu / n as f64,
    );
    settle().await;
    let t = Instant::now();
    for id in &ids {
        cri.stop_pod(id).await?;
        cri.remove_pod(id).await?;
    }
    report.record(
        &format!("remove {n} running pods (stop+remove, one after another)"),
        Unit::Ms,
        d.kind,
        ms(t.elapsed()),
    );
    Ok(())
}

/// The daemon's RSS before and after `n` pod lifecycles (RunPodSandbox, Create+Start of
/// `sleep`, StopPodSandbox, RemovePodSandbox), both read after a pause.
pub async fn lifecycles(
    d: &Daemon,
    cri: &mut Cri,
    n: usize,
    host_net: bool,
    report: &mut Report,
) -> anyhow::Result<()> {
    settle().await;
    let before = d.mem()?;
    let t = Instant::now();
    for _ in 0..n {
        let cfg = cri.pod_config("cycle", host_net)?;
        let (pod, _) = cri.run_pod(cfg).await?;
        let (id, _) = cri.create(&pod, "sleep", &SLEEP).await?;
        cri.start(&id).await?;
        cri.stop_pod(&pod.id).await?;
        cri.remove_pod(&pod.id).await?;
    }
    let took = t.elapsed();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let after = d.mem()?;
    report.record(
        &format!("daemon RSS growth after {n} pod lifecycles"),
        Unit::MiB,
        d.kind,
        (after.rss - before.rss) / MIB,
    );
    report.record(
        &format!("{n} pod lifecycles (runp, create+start, stopp, rmp): per pod"),
        Unit::Ms,
        d.kind,
        ms(took) / n as f64,
    );
    Ok(())
}

/// CPU time the whole machine spent busy so far (every CPU, from /proc/stat), in ms: what a
/// burst costs, whoever spends it (daemon, shims, monitors, runc, the kernel, the clients).
fn machine_cpu_ms() -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let line = stat
        .lines()
        .next()
        .filter(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow::anyhow!("/proc/stat: no cpu line"))?;
    // user nice system idle iowait irq softirq steal: busy is all but idle and iowait.
    let ticks: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .take(8)
        .map(|v| v.parse::<f64>())
        .collect::<Result<_, _>>()?;
    let busy: f64 = ticks
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3 && *i != 4)
        .map(|(_, v)| v)
        .sum();
    // /proc/stat counts USER_HZ ticks: 100 a second on every architecture bosun builds for.
    Ok(busy * 10.0)
}
