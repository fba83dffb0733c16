//! The `/metrics` HTTP endpoint: binds the configured address, records where it bound, serves scrapes.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;

use super::Metrics;
use crate::error::{Error, Result, ResultExt};

/// The file under the state dir that holds the address `/metrics` is served on (one line,
/// `host:port`), written once bound: the way to find an ephemeral port (`127.0.0.1:0`).
pub const ADDRESS_FILE: &str = "metrics.address";

/// OpenMetrics text, as prometheus-client encodes it.
const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Binds `address`, writes the bound address to `<state>/metrics.address` and serves
/// `GET /metrics` until the returned task is aborted.
pub async fn serve(
    address: &str,
    state: &Path,
    metrics: Arc<Metrics>,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| Error::invalid(format!("metrics_address {address:?}: bind: {e}")))?;
    let bound = listener
        .local_addr()
        .map_err(|e| Error::internal(format!("metrics_address {address:?}: {e}")))?;
    let file = state.join(ADDRESS_FILE);
    crate::store::atomic::write_atomic(&file, format!("{bound}\n").as_bytes())
        .ctx(|| format!("write {}", file.display()))?;
    let task = tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    tracing::debug!("metrics: accept: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            };
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let metrics = metrics.clone();
                    async move { Ok::<_, std::convert::Infallible>(respond(&metrics, &req)) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service);
                if let Err(e) = conn.await {
                    tracing::debug!("metrics: connection: {e}");
                }
            });
        }
    });
    Ok((bound, task))
}

fn respond<B>(metrics: &Metrics, req: &http::Request<B>) -> http::Response<Full<Bytes>> {
    let (status, ctype, body) = match (req.method(), req.uri().path()) {
        (&http::Method::GET, "/metrics") => (http::StatusCode::OK, CONTENT_TYPE, metrics.encode()),
        (_, "/metrics") => (
            http::StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".to_string(),
        ),
        _ => (
            http::StatusCode::NOT_FOUND,
            "text/plain",
            "bosun serves /metrics only\n".to_string(),
        ),
    };
    let mut resp = http::Response::new(Full::new(Bytes::from(body)));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ctype),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let req = format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.expect("write");
        let mut out = String::new();
        s.read_to_string(&mut out).await.expect("read");
        out
    }

    #[tokio::test]
    async fn serves_metrics_on_an_ephemeral_port_and_records_it() {
        let dir = tempfile::tempdir().expect("tmp");
        let (bound, task) = serve("127.0.0.1:0", dir.path(), Metrics::new(None))
            .await
            .expect("serve");
        let recorded = std::fs::read_to_string(dir.path().join(ADDRESS_FILE)).expect("file");
        assert_eq!(recorded.trim(), bound.to_string());
        let ok = get(bound, "/metrics").await;
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(ok.contains("bosun_image_pull_bytes_total"), "{ok}");
        assert!(ok.trim_end().ends_with("# EOF"), "{ok}");
        assert!(get(bound, "/other").await.starts_with("HTTP/1.1 404"));
        task.abort();
    }

    #[tokio::test]
    async fn a_bad_address_names_the_key() {
        let dir = tempfile::tempdir().expect("tmp");
        let err = serve("not-an-address", dir.path(), Metrics::new(None))
            .await
            .expect_err("bad address");
        assert!(err.to_string().contains("metrics_address"), "{err}");
    }
}
