//! Tests of the network probes against servers on loopback.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::probe::{grpc, http, http_client, tcp, Outcome};

const T: Duration = Duration::from_secs(2);

/// A tiny HTTP/1.1 server answering by path.
async fn http_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let path = req.split_whitespace().nth(1).unwrap_or("/").to_string();
                let reply = match path.as_str() {
                    "/ok" => "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n".to_string(),
                    "/moved" => "HTTP/1.1 302 Found\r\nLocation: /broken\r\nContent-Length: 0\r\n\r\n".into(),
                    "/away" => "HTTP/1.1 302 Found\r\nLocation: http://elsewhere.invalid/x\r\nContent-Length: 0\r\n\r\n".into(),
                    "/broken" => "HTTP/1.1 500 Oops\r\nContent-Length: 9\r\n\r\nit broke\n".into(),
                    "/headers" if req.contains("x-probe: yes") && req.contains("user-agent: kube-probe/") => {
                        "HTTP/1.1 204 No Content\r\n\r\n".into()
                    }
                    "/headers" => format!("HTTP/1.1 400 Bad\r\nContent-Length: {}\r\n\r\n{}", req.len(), req),
                    "/slow" => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        String::new()
                    }
                    _ => "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n".into(),
                };
                let _ = s.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn http_status_ranges_redirects_headers_and_timeouts() {
    let addr = http_server().await;
    let c = http_client().expect("client");
    let url = |p: &str| format!("http://{addr}{p}");
    assert_eq!(http(&c, &url("/ok"), &[], T).await, Outcome::Success);
    // A same-host redirect is followed: its target decides.
    let o = http(&c, &url("/moved"), &[], T).await;
    assert_eq!(
        o,
        Outcome::Failure("HTTP probe failed with statuscode: 500: it broke".into())
    );
    // A redirect to another host is not followed and counts as success (3xx).
    assert_eq!(http(&c, &url("/away"), &[], T).await, Outcome::Success);
    assert!(
        matches!(http(&c, &url("/nope"), &[], T).await, Outcome::Failure(m) if m.contains("404"))
    );
    let h = [("X-Probe".to_string(), "yes".to_string())];
    assert_eq!(http(&c, &url("/headers"), &h, T).await, Outcome::Success);
    let t = std::time::Instant::now();
    let o = http(&c, &url("/slow"), &[], Duration::from_millis(300)).await;
    assert!(
        matches!(&o, Outcome::Failure(m) if m.contains("timeout")),
        "{o:?}"
    );
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
    assert!(matches!(
        http(&c, "not a url", &[], T).await,
        Outcome::Unknown(_)
    ));
}

#[tokio::test]
async fn tcp_accepts_and_refusals() {
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    assert_eq!(tcp(addr, T).await, Outcome::Success);
    drop(l);
    let o = tcp(addr, T).await;
    assert!(
        matches!(&o, Outcome::Failure(m) if m.contains("refused")),
        "{o:?}"
    );
}

#[tokio::test]
async fn grpc_health_serving_not_serving_and_no_server() {
    use tonic_health::ServingStatus;
    let (reporter, service) = tonic_health::server::health_reporter();
    reporter
        .set_service_status("", ServingStatus::Serving)
        .await;
    reporter
        .set_service_status("db", ServingStatus::NotServing)
        .await;
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = l.local_addr().expect("addr");
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(service)
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(l)),
    );
    assert_eq!(grpc(addr, "", T).await, Outcome::Success);
    let o = grpc(addr, "db", T).await;
    assert_eq!(
        o,
        Outcome::Failure("service unhealthy (responded with \"NOT_SERVING\")".into())
    );
    let o = grpc(addr, "unknown-svc", T).await;
    assert!(
        matches!(&o, Outcome::Failure(m) if m.contains("NotFound")),
        "{o:?}"
    );
    server.abort();
    let _ = server.await;
    let o = grpc(addr, "", Duration::from_millis(500)).await;
    assert!(matches!(&o, Outcome::Failure(_)), "{o:?}");
}
