//! Giving memory back while the daemon is idle: once serving, and after each quiet spell.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::metrics::Metrics;

/// How long without a finished call (after some calls) before the daemon gives back what the
/// calls made it touch.
pub const QUIET: Duration = Duration::from_secs(10);

/// Returns freed heap and unmaps the clean file pages touched so far ([`crate::sys::trim`]) at
/// once — startup's (config, recovery, server set-up) are not needed again — then after every
/// [`QUIET`] period without a call that followed some calls. Under a kubelet, which polls
/// every second, it never runs again: only an idle node (crictl users, a CI runner between
/// jobs) gets the memory back, and the next call faults the code it needs back in from the
/// page cache.
pub fn spawn(metrics: Arc<Metrics>) {
    tokio::spawn(async move {
        shed().await;
        let mut shed_at = metrics.served();
        let mut seen = shed_at;
        let mut tick = tokio::time::interval(QUIET);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let now = metrics.served();
            if now == seen && now != shed_at {
                shed().await;
                shed_at = now;
            }
            seen = now;
        }
    });
}

async fn shed() {
    let started = Instant::now();
    match tokio::task::spawn_blocking(crate::sys::trim::shed_measured).await {
        Ok(shed) => tracing::debug!(
            took_us = started.elapsed().as_micros() as u64,
            rss_file_kib_before = shed.file_kib_before,
            rss_file_kib_after = shed.file_kib_after,
            "idle: freed heap and clean file pages given back"
        ),
        Err(e) => tracing::warn!("idle: giving memory back failed: {e}"),
    }
}
