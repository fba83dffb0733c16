//! Timing and memory readings: process memory from /proc, settling, medians and percentiles.

use std::time::Duration;

use anyhow::Context;

/// Pause between "socket answers" and a timed call, so start-up work does not overlap it.
const SETTLE: Duration = Duration::from_millis(500);

/// Memory of a process, in bytes.
#[derive(Debug, Clone, Copy)]
pub struct Mem {
    pub rss: f64,
    pub pss: f64,
    pub hwm: f64,
}

/// A `Key:   1234 kB` field of a /proc file, in bytes.
pub fn proc_kb(text: &str, key: &str) -> anyhow::Result<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key}"))?;
    let kb: f64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kb * 1024.0)
}

pub fn mem_of(pid: u32) -> anyhow::Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    Ok(Mem {
        rss: proc_kb(&status, "VmRSS:")?,
        hwm: proc_kb(&status, "VmHWM:")?,
        pss: proc_kb(&rollup, "Pss:")?,
    })
}

/// Flushes dirty pages (earlier daemons' writes and removals) and pauses, before a timed call.
pub async fn settle() {
    rustix::fs::sync();
    tokio::time::sleep(SETTLE).await;
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The middle value of `v`, or the mean of the two middle ones.
pub fn median(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        return percentile(v, 0.5);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.get(n / 2) {
        Some(hi) => (s[n / 2 - 1] + hi) / 2.0,
        None => f64::NAN,
    }
}

/// Nearest-rank percentile of `v` (0 < p ≤ 1).
pub fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
    s.get(rank - 1).copied().unwrap_or(f64::NAN)
}
