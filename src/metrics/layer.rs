//! A tower layer on the gRPC server that counts and times every call by service, method and status code.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use tower::{Layer, Service};

use super::{Call, Metrics};

/// Wraps a gRPC server's services with [`MetricsService`].
#[derive(Debug, Clone)]
pub struct MetricsLayer {
    metrics: Arc<Metrics>,
}

impl MetricsLayer {
    /// Records into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        MetricsLayer { metrics }
    }
}

impl<S> Layer<S> for MetricsLayer {
    type Service = MetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        MetricsService {
            inner,
            metrics: self.metrics.clone(),
        }
    }
}

/// Times a call from its arrival until its response body ends; the status code comes from the
/// response headers (errors are trailers-only) or, for streamed answers, from the trailers.
#[derive(Debug, Clone)]
pub struct MetricsService<S> {
    inner: S,
    metrics: Arc<Metrics>,
}

/// `/pkg.Service/Method` → (service, method); anything else is ("", path).
fn split_path(path: &str) -> (String, String) {
    match path.trim_start_matches('/').split_once('/') {
        Some((s, m)) if !s.is_empty() && !m.is_empty() => (s.to_string(), m.to_string()),
        _ => (String::new(), path.to_string()),
    }
}

/// The name grpc-go gives a status code (`OK`, `Canceled`, `NotFound`, …).
pub fn code_name(code: tonic::Code) -> String {
    match code {
        tonic::Code::Ok => "OK".to_string(),
        tonic::Code::Cancelled => "Canceled".to_string(),
        other => format!("{other:?}"),
    }
}

fn grpc_status(headers: &http::HeaderMap) -> Option<String> {
    let v = headers.get("grpc-status")?.to_str().ok()?;
    let n: i32 = v.trim().parse().ok()?;
    Some(code_name(tonic::Code::from_i32(n)))
}

/// A call in flight; recorded once, when its response ends or is dropped.
#[derive(Debug)]
struct Pending {
    metrics: Arc<Metrics>,
    call: Call,
    start: Instant,
}

impl Pending {
    fn finish(self) {
        self.metrics.record(self.call, self.start.elapsed());
    }
}

impl<S, B, RB> Service<http::Request<B>> for MetricsService<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: Body,
{
    type Response = http::Response<MetricsBody<RB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let (service, method) = split_path(req.uri().path());
        let start = Instant::now();
        let metrics = self.metrics.clone();
        let fut = self.inner.call(req);
        Box::pin(async move {
            let result = fut.await;
            let code = match &result {
                Ok(resp) => {
                    grpc_status(resp.headers()).unwrap_or_else(|| code_name(tonic::Code::Ok))
                }
                Err(_) => code_name(tonic::Code::Unknown),
            };
            let pending = Pending {
                metrics,
                call: Call {
                    service,
                    method,
                    code,
                },
                start,
            };
            match result {
                Ok(resp) => Ok(resp.map(|inner| MetricsBody {
                    inner,
                    pending: Some(pending),
                })),
                Err(e) => {
                    pending.finish();
                    Err(e)
                }
            }
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that records its call when it ends (or is dropped unfinished).
    pub struct MetricsBody<B> {
        #[pin]
        inner: B,
        pending: Option<Pending>,
    }

    impl<B> PinnedDrop for MetricsBody<B> {
        fn drop(this: Pin<&mut Self>) {
            if let Some(p) = this.project().pending.take() {
                p.finish();
            }
        }
    }
}

impl<B: Body> Body for MetricsBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        let polled = this.inner.poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let (Some(code), Some(p)) = (
                    frame.trailers_ref().and_then(grpc_status),
                    this.pending.as_mut(),
                ) {
                    p.call.code = code;
                }
            }
            Poll::Ready(None) => {
                if let Some(p) = this.pending.take() {
                    p.finish();
                }
            }
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_codes_are_named_as_grpc_go_does() {
        assert_eq!(
            split_path("/runtime.v1.RuntimeService/ListContainers"),
            ("runtime.v1.RuntimeService".into(), "ListContainers".into())
        );
        assert_eq!(split_path("/odd"), (String::new(), "/odd".into()));
        assert_eq!(code_name(tonic::Code::Ok), "OK");
        assert_eq!(code_name(tonic::Code::Cancelled), "Canceled");
        assert_eq!(code_name(tonic::Code::NotFound), "NotFound");
        let mut h = http::HeaderMap::new();
        h.insert("grpc-status", http::HeaderValue::from_static("5"));
        assert_eq!(grpc_status(&h).as_deref(), Some("NotFound"));
    }

    #[tokio::test]
    async fn a_call_is_recorded_with_the_code_of_its_trailers() {
        use http_body_util::BodyExt;
        let metrics = Metrics::new(None);
        let svc = tower::service_fn(|_req: http::Request<()>| async {
            let mut trailers = http::HeaderMap::new();
            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
            let body = http_body_util::Full::new(hyper::body::Bytes::from_static(b"x"))
                .with_trailers(async move { Some(Ok(trailers)) });
            Ok::<_, std::convert::Infallible>(http::Response::new(body))
        });
        let mut svc = MetricsLayer::new(metrics.clone()).layer(svc);
        let req = http::Request::builder()
            .uri("/runtime.v1.RuntimeService/Version")
            .body(())
            .expect("request");
        let resp = svc.call(req).await.expect("call");
        assert!(
            !metrics.encode().contains("method=\"Version\""),
            "recorded before the body ended"
        );
        let _ = resp.into_body().collect().await;
        let text = metrics.encode();
        assert!(
            text.contains(
                "bosun_cri_requests_total{service=\"runtime.v1.RuntimeService\",method=\"Version\",code=\"OK\"} 1"
            ),
            "{text}"
        );
    }
}
