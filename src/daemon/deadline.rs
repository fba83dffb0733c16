//! A tower layer that answers a call whose client deadline (`grpc-timeout`) passed with DEADLINE_EXCEEDED.
//!
//! tonic's server enforces `grpc-timeout` itself but answers CANCELLED ("Timeout expired").
//! The client's own timer races that answer: critest's "public image should timeout if
//! requested" (PullImage with a 1 ms deadline) wants DEADLINE_EXCEEDED and got CANCELLED in
//! 12 of 40 runs on a loaded machine. grpc-go servers (containerd, CRI-O) answer
//! DEADLINE_EXCEEDED, as the gRPC status codes say. This layer sits inside tonic's timeout
//! and arms its timer first, so it answers first.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tower::{Layer, Service};

/// Wraps a gRPC server's services with [`DeadlineService`].
#[derive(Debug, Clone, Default)]
pub struct DeadlineLayer;

impl<S> Layer<S> for DeadlineLayer {
    type Service = DeadlineService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        DeadlineService { inner }
    }
}

/// Answers DEADLINE_EXCEEDED once the request's `grpc-timeout` has passed without a response.
#[derive(Debug, Clone)]
pub struct DeadlineService<S> {
    inner: S,
}

/// The duration a `grpc-timeout` header gives: 1 to 8 digits and a unit (H M S m u n), per
/// gRPC over HTTP/2. Anything else is no deadline (tonic ignores it too).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    let unit = value.chars().last()?;
    let digits = &value[..value.len() - unit.len_utf8()];
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        'H' => Duration::from_secs(n * 3600),
        'M' => Duration::from_secs(n * 60),
        'S' => Duration::from_secs(n),
        'm' => Duration::from_millis(n),
        'u' => Duration::from_micros(n),
        'n' => Duration::from_nanos(n),
        _ => return None,
    })
}

impl<S, B, RB> Service<http::Request<B>> for DeadlineService<S>
where
    S: Service<http::Request<B>, Response = http::Response<RB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    RB: http_body::Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: http::Request<B>) -> Self::Future {
        let deadline = req
            .headers()
            .get("grpc-timeout")
            .and_then(|v| v.to_str().ok())
            .and_then(parse_grpc_timeout);
        let fut = self.inner.call(req);
        let answer = |r: http::Response<RB>| r.map(tonic::body::Body::new);
        let Some(after) = deadline else {
            return Box::pin(async move { fut.await.map(answer) });
        };
        // Armed now, before tonic arms its own timer for the same header.
        let sleep = tokio::time::sleep(after);
        Box::pin(async move {
            tokio::select! {
                biased;
                r = fut => r.map(answer),
                () = sleep => Ok(tonic::Status::deadline_exceeded(format!(
                    "the client's deadline ({after:?}) passed before the call completed"
                ))
                .into_http()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeout_values_follow_the_spec() {
        assert_eq!(parse_grpc_timeout("1m"), Some(Duration::from_millis(1)));
        assert_eq!(parse_grpc_timeout("999u"), Some(Duration::from_micros(999)));
        assert_eq!(parse_grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_grpc_timeout("3M"), Some(Duration::from_secs(180)));
        assert_eq!(parse_grpc_timeout("4S"), Some(Duration::from_secs(4)));
        assert_eq!(parse_grpc_timeout("5n"), Some(Duration::from_nanos(5)));
        assert_eq!(
            parse_grpc_timeout("99999999S"),
            Some(Duration::from_secs(99_999_999))
        );
        for bad in ["", "m", "123456789S", "1x", "-1S", "1.5S", "1é", "é"] {
            assert_eq!(parse_grpc_timeout(bad), None, "{bad:?}");
        }
    }
}
