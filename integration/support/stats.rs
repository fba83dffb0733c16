//! Stats tests' helpers: a daemon's answer checked against cgroup files read around it,
//! ContainerStats calls, and `/metrics` scraped and read.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::cri::Rt;
use super::Daemon;

/// Checks that `got` lies within the readings taken just before and after it, give or take
/// `slack`.
pub fn between(what: &str, got: u64, before: u64, after: u64, slack: u64) -> Result<()> {
    let (lo, hi) = (before.min(after), before.max(after));
    ensure!(
        got + slack >= lo && got <= hi + slack,
        "{what}: daemon says {got}, the files said {before} then {after} (slack {slack})"
    );
    Ok(())
}

/// The value of an optional UInt64Value.
pub fn v(x: &Option<pb::UInt64Value>) -> Option<u64> {
    x.as_ref().map(|v| v.value)
}

/// ContainerStats of `id`.
pub async fn container_stats(rt: &mut Rt, id: &str) -> Result<pb::ContainerStats> {
    rt.container_stats(pb::ContainerStatsRequest {
        container_id: id.into(),
    })
    .await
    .with_context(|| format!("ContainerStats {id}"))?
    .into_inner()
    .stats
    .context("ContainerStats without stats")
}

/// `GET /metrics` on the address the daemon recorded in its state dir.
pub fn scrape(d: &Daemon) -> Result<String> {
    use std::io::{Read, Write};
    let file = d.state().join("metrics.address");
    let addr =
        std::fs::read_to_string(&file).with_context(|| format!("read {}", file.display()))?;
    let mut s = std::net::TcpStream::connect(addr.trim())
        .with_context(|| format!("connect {}", addr.trim()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bosun\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    ensure!(out.starts_with("HTTP/1.1 200"), "GET /metrics: {out}");
    Ok(out)
}

/// The value of the sample line starting with `prefix` (labels included).
pub fn sample(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
}
