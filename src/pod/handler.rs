//! One probe or hook action against a container: exec, httpGet, tcpSocket, grpc, with ports resolved by name.

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, HTTPGetAction};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::exec::Exec;
use super::probe::{self, Outcome};
use crate::error::ErrorKind;

/// Most bytes of a command's output kept in a failure message.
const OUTPUT_LIMIT: usize = 1024;

/// A port by number or by the container's port name.
pub fn port(p: &IntOrString, c: &Container) -> Result<u16, String> {
    let n = match p {
        IntOrString::Int(n) => *n,
        IntOrString::String(s) => match s.parse::<i32>() {
            Ok(n) => n,
            Err(_) => c
                .ports
                .iter()
                .flatten()
                .find(|cp| cp.name.as_deref() == Some(s.as_str()))
                .map(|cp| cp.container_port)
                .ok_or_else(|| format!("no port named {s:?} in container {}", c.name))?,
        },
    };
    u16::try_from(n)
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("invalid port {n}"))
}

/// The URL and headers of an httpGet action against `host` (unless the action names a host).
pub fn http_request(
    a: &HTTPGetAction,
    c: &Container,
    host: IpAddr,
) -> Result<(String, Vec<(String, String)>), String> {
    let port = port(&a.port, c)?;
    let scheme = a.scheme.as_deref().unwrap_or("HTTP").to_ascii_lowercase();
    let host = match a.host.as_deref().filter(|h| !h.is_empty()) {
        Some(h) => h.to_string(),
        None => match host {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        },
    };
    let path = a.path.clone().unwrap_or_default();
    let path = if path.starts_with('/') {
        path
    } else {
        format!("/{path}")
    };
    let headers = a
        .http_headers
        .iter()
        .flatten()
        .map(|h| (h.name.clone(), h.value.clone()))
        .collect();
    Ok((format!("{scheme}://{host}:{port}{path}"), headers))
}

/// An exec action: exit 0 is success; a timeout or a non-zero exit is a failure with the
/// command's output; a runtime error is Unknown.
pub async fn exec(
    exec: &dyn Exec,
    container_id: &str,
    cmd: &[String],
    timeout: Duration,
) -> Outcome {
    match exec.exec(container_id, cmd.to_vec(), timeout).await {
        Ok(out) if out.timed_out => {
            Outcome::Failure(format!("command {cmd:?} timed out after {timeout:?}"))
        }
        Ok(out) if out.exit_code == 0 => Outcome::Success,
        Ok(out) => {
            let mut text = out.stdout;
            text.extend_from_slice(&out.stderr);
            Outcome::Failure(format!(
                "command {cmd:?} exited with {}: {}",
                out.exit_code,
                trimmed(&text)
            ))
        }
        Err(e) if e.kind() == ErrorKind::DeadlineExceeded => {
            Outcome::Failure(format!("command {cmd:?} timed out after {timeout:?}"))
        }
        Err(e) => Outcome::Unknown(format!("exec {cmd:?}: {e}")),
    }
}

/// Output for a message: lossy UTF-8, trimmed, at most 1 KiB.
fn trimmed(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(&b[..b.len().min(OUTPUT_LIMIT)]);
    s.trim().to_string()
}

/// A tcpSocket action against `host` (unless the action names a host).
pub async fn tcp(
    port_ref: &IntOrString,
    action_host: Option<&str>,
    c: &Container,
    host: IpAddr,
    timeout: Duration,
) -> Outcome {
    let port = match port(port_ref, c) {
        Ok(p) => p,
        Err(m) => return Outcome::Unknown(m),
    };
    let ip = match action_host.filter(|h| !h.is_empty()) {
        None => host,
        Some(h) => match h.parse::<IpAddr>() {
            Ok(ip) => ip,
            Err(_) => match tokio::net::lookup_host((h, port)).await {
                Ok(mut it) => match it.next() {
                    Some(a) => a.ip(),
                    None => return Outcome::Failure(format!("host {h:?}: no address")),
                },
                Err(e) => return Outcome::Failure(format!("host {h:?}: {e}")),
            },
        },
    };
    probe::tcp(SocketAddr::new(ip, port), timeout).await
}
