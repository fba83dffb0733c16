//! Tests of the SPDY exec client against a server that behaves like containerd 1.6's.

use std::sync::{Arc, Mutex};

use tokio::io::AsyncWriteExt;

use super::*;
use crate::stream::client::ExecIo;

/// Collects what the client writes to its stdout.
#[derive(Clone, Default)]
struct Sink(Arc<Mutex<Vec<u8>>>);

impl AsyncWrite for Sink {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if let Ok(mut v) = self.0.lock() {
            v.extend_from_slice(buf);
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// The server writes stdout and the exit status, then resets every stream (apimachinery's
/// `connection.Close`, what containerd 1.6 does) instead of half-closing them.
#[tokio::test]
async fn streams_reset_after_the_status_still_give_output_and_exit_code() {
    let (a, b) = tokio::io::duplex(64 << 10);
    let server = tokio::spawn(async move {
        let (_conn, mut incoming) = Connection::server(b);
        let mut streams = Vec::new();
        while streams.len() < 3 {
            let s = incoming.accept().await.expect("three streams");
            streams.push(s);
        }
        for s in &mut streams {
            let payload = match s.header(STREAM_TYPE) {
                Some("stdout") => b"all of the output\n".to_vec(),
                Some("error") => status::v4_payload(&Outcome::ExitCode(3)),
                _ => continue,
            };
            s.write_all(&payload).await.expect("write");
        }
        for s in &streams {
            s.reset();
        }
        // Keep the streams (dropping one is a reset too) until the client is done.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    });
    let out = Sink::default();
    let io = ExecIo {
        stdout: Some(Box::pin(out.clone())),
        stderr: Some(Box::pin(Sink::default())),
        ..Default::default()
    };
    let outcome = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        exec_on(a, Version::V4, io),
    )
    .await
    .expect("in time")
    .expect("the session ends well");
    assert_eq!(outcome, Outcome::ExitCode(3));
    assert_eq!(
        out.0.lock().map(|v| v.clone()).unwrap_or_default(),
        b"all of the output\n"
    );
    server.abort();
}
