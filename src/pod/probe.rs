//! Network probe actions of the kubelet: httpGet, tcpSocket and grpc, each one attempt with a timeout.
//!
//! One attempt is a Success, a Failure (the target answered badly or not at all) or an
//! Unknown (bosun could not even try). Exec probes go through the runtime's ExecSync.

use std::net::SocketAddr;
use std::time::Duration;

/// Body bytes kept for a failure's message, as the kubelet does.
const BODY_LIMIT: usize = 10 * 1024;
/// Redirects followed (to the same host only).
const MAX_REDIRECTS: usize = 10;

/// The result of one probe attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Success,
    Failure(String),
    Unknown(String),
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        *self == Outcome::Success
    }
}

/// tcpSocket: success when a connection is accepted within `timeout`.
pub async fn tcp(addr: SocketAddr, timeout: Duration) -> Outcome {
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr)).await {
        Ok(Ok(_)) => Outcome::Success,
        Ok(Err(e)) => Outcome::Failure(format!("dial tcp {addr}: {e}")),
        Err(_) => Outcome::Failure(format!("dial tcp {addr}: i/o timeout after {timeout:?}")),
    }
}

/// The HTTP client probes share: no connection reuse (each probe is a fresh connection, as
/// the kubelet's), TLS certificates not verified (the kubelet does not either), redirects
/// followed only to the same host.
pub fn http_client() -> reqwest::Result<reqwest::Client> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same_host = attempt
            .previous()
            .first()
            .is_some_and(|first| first.host_str() == attempt.url().host_str());
        if attempt.previous().len() > MAX_REDIRECTS || !same_host {
            attempt.stop()
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .redirect(policy)
        .pool_max_idle_per_host(0)
        // Probes go straight to the pod, never through a proxy from the environment.
        .no_proxy()
        .danger_accept_invalid_certs(true)
        .user_agent(concat!("kube-probe/bosun-", env!("CARGO_PKG_VERSION")))
        .build()
}

/// httpGet: success for a final status 200–399 within `timeout`. `headers` may override the
/// defaults (User-Agent, Accept, and Host for virtual hosts).
pub async fn http(
    client: &reqwest::Client,
    url: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Outcome {
    let url = match reqwest::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return Outcome::Unknown(format!("bad probe URL {url:?}: {e}")),
    };
    let mut req = client
        .get(url.clone())
        .timeout(timeout)
        .header("Accept", "*/*");
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = match req.send().await {
        Ok(r) => r,
        Err(e) if e.is_timeout() => {
            return Outcome::Failure(format!("Get {url}: timeout after {timeout:?}"))
        }
        Err(e) => return Outcome::Failure(format!("Get {url}: {}", error_chain(&e))),
    };
    let status = resp.status();
    if (200..400).contains(&status.as_u16()) {
        return Outcome::Success;
    }
    let mut body = Vec::new();
    let mut resp = resp;
    while body.len() < BODY_LIMIT {
        match tokio::time::timeout(timeout, resp.chunk()).await {
            Ok(Ok(Some(c))) => body.extend_from_slice(&c),
            _ => break,
        }
    }
    body.truncate(BODY_LIMIT);
    Outcome::Failure(format!(
        "HTTP probe failed with statuscode: {}{}",
        status.as_u16(),
        if body.is_empty() {
            String::new()
        } else {
            format!(": {}", String::from_utf8_lossy(&body).trim())
        }
    ))
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// grpc: grpc.health.v1.Health/Check of `service` ("" = the server) answers SERVING within
/// `timeout` (plaintext, as the kubelet's).
pub async fn grpc(addr: SocketAddr, service: &str, timeout: Duration) -> Outcome {
    use tonic_health::pb::health_check_response::ServingStatus;
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let attempt = async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| Outcome::Unknown(format!("grpc endpoint {addr}: {e}")))?
            .connect_timeout(timeout)
            .timeout(timeout);
        let channel = endpoint.connect().await.map_err(|e| {
            Outcome::Failure(format!(
                "timeout: failed to connect service {addr:?} within {timeout:?}: {}",
                error_chain(&e)
            ))
        })?;
        let resp = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .map_err(|s| match s.code() {
                tonic::Code::Unimplemented => Outcome::Failure(format!(
                    "this server does not implement the grpc health protocol (grpc.health.v1.Health): {}",
                    s.message()
                )),
                tonic::Code::DeadlineExceeded => Outcome::Failure(format!(
                    "timeout: health rpc did not complete within {timeout:?}"
                )),
                c => Outcome::Failure(format!("health rpc probe failed: {c:?}: {}", s.message())),
            })?;
        let status = resp.into_inner().status;
        if status == ServingStatus::Serving as i32 {
            Ok(Outcome::Success)
        } else {
            let name = ServingStatus::try_from(status)
                .map(|s| s.as_str_name().to_string())
                .unwrap_or_else(|_| status.to_string());
            Err(Outcome::Failure(format!(
                "service unhealthy (responded with {name:?})"
            )))
        }
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(o) | Err(o)) => o,
        Err(_) => Outcome::Failure(format!(
            "timeout: health rpc did not complete within {timeout:?}"
        )),
    }
}
