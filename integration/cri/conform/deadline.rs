//! critest "public image should timeout if requested" (issue 12): a call whose client deadline passed is answered DEADLINE_EXCEEDED, over a bare HTTP/2 connection.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::cri::{target, unique_secs};
use crate::support::daemon::Daemon;
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::conform::a_passed_client_deadline_is_deadline_exceeded",
        NEEDS,
        client_deadline,
    )]
}

/// critest "public image should timeout if requested": a call whose client deadline
/// (`grpc-timeout`) passes is answered DEADLINE_EXCEEDED, as grpc-go servers do; tonic's own
/// enforcement answered CANCELLED and won the race with critest's timer in 12 of 40 runs.
/// The call goes over a bare HTTP/2 connection: a tonic client would time out by itself.
fn client_deadline() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let (pod, _, id) = target(
            d,
            &mut rt,
            &busybox,
            "deadline",
            false,
            "echo ready; exec tail -f /dev/null",
        )
        .await?;
        let sleep = pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["sleep".into(), unique_secs(600_000)],
            timeout: 0,
        };
        let t = Instant::now();
        let (status, message) = raw_exec_sync(d, &sleep, "300m").await?;
        let took = t.elapsed();
        eprintln!(
            "ExecSync with a 300 ms deadline: grpc-status {status} {message:?} after {took:?}"
        );
        ensure!(
            status == tonic::Code::DeadlineExceeded as i32,
            "a passed deadline answered grpc-status {status} ({message:?}), want 4 (DeadlineExceeded)"
        );
        ensure!(took < Duration::from_secs(3), "answered after {took:?}");
        // A call that ends before its deadline is answered as usual.
        let echo = pb::ExecSyncRequest {
            container_id: id.clone(),
            cmd: vec!["true".into()],
            timeout: 0,
        };
        let (status, message) = raw_exec_sync(d, &echo, "20S").await?;
        ensure!(
            status == 0,
            "in-time ExecSync: grpc-status {status} {message:?}"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// ExecSync over a bare HTTP/2 connection with `grpc-timeout: timeout`; the grpc-status and
/// grpc-message the daemon answered (from the headers of a trailers-only answer, else the
/// trailers).
async fn raw_exec_sync(
    d: &Daemon,
    req: &pb::ExecSyncRequest,
    timeout: &str,
) -> Result<(i32, String)> {
    use http_body_util::BodyExt;
    use prost::Message;
    let io = tokio::net::UnixStream::connect(d.socket()).await?;
    let (mut send, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await?;
    let conn = tokio::spawn(conn);
    let msg = req.encode_to_vec();
    let mut body = vec![0u8];
    body.extend_from_slice(&u32::try_from(msg.len())?.to_be_bytes());
    body.extend_from_slice(&msg);
    let request = http::Request::post("http://localhost/runtime.v1.RuntimeService/ExecSync")
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("grpc-timeout", timeout)
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))?;
    let resp = send.send_request(request).await?;
    let field =
        |h: &http::HeaderMap, k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_string);
    let (parts, body) = resp.into_parts();
    let (status, message) = match field(&parts.headers, "grpc-status") {
        Some(s) => (s, field(&parts.headers, "grpc-message")),
        None => {
            let collected = body.collect().await?;
            let trailers = collected.trailers().cloned().unwrap_or_default();
            (
                field(&trailers, "grpc-status").context("no grpc-status")?,
                field(&trailers, "grpc-message"),
            )
        }
    };
    conn.abort();
    Ok((status.parse()?, message.unwrap_or_default()))
}
