//! postStart and preStop hooks: exec, httpGet, sleep (and the deprecated tcpSocket), bounded by a timeout.

use std::time::Duration;

use k8s_openapi::api::core::v1::LifecycleHandler;

use super::exec::Exec;
use super::handler;
use super::probe::{self, Outcome};
use super::prober::Target;

/// Runs `h` against the container of `target`; `Err` carries the kubelet-style reason.
/// Ends at `timeout` with an error (the caller decides what a timeout means).
pub async fn run(
    h: &LifecycleHandler,
    target: &Target,
    exec: &dyn Exec,
    http: &reqwest::Client,
    timeout: Duration,
) -> Result<(), String> {
    let started = tokio::time::Instant::now();
    let action = async {
        if let Some(e) = &h.exec {
            let cmd = e.command.clone().unwrap_or_default();
            if cmd.is_empty() {
                return Err("exec hook has no command".to_string());
            }
            return outcome(handler::exec(exec, &target.container_id, &cmd, timeout).await);
        }
        if let Some(g) = &h.http_get {
            let (url, headers) = handler::http_request(g, &target.container, target.host)?;
            return outcome(probe::http(http, &url, &headers, timeout).await);
        }
        if let Some(s) = &h.sleep {
            let secs = Duration::from_secs(s.seconds.max(0) as u64);
            tokio::time::sleep(secs.min(timeout)).await;
            return Ok(());
        }
        if h.tcp_socket.is_some() {
            // Deprecated and never implemented by the kubelet: it logs and does nothing.
            tracing::warn!(
                container = %target.container.name,
                "tcpSocket lifecycle hooks are deprecated and do nothing (as in the kubelet)"
            );
            return Ok(());
        }
        Err("the hook has no handler".to_string())
    };
    match tokio::time::timeout(timeout, action).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "hook timed out after {}s",
            started.elapsed().as_secs()
        )),
    }
}

fn outcome(o: Outcome) -> Result<(), String> {
    match o {
        Outcome::Success => Ok(()),
        Outcome::Failure(m) | Outcome::Unknown(m) => Err(m),
    }
}
