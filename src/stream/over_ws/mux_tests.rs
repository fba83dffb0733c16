//! Tests of the channel multiplexer: routes get every byte and are flushed before the connection counts as over.

use std::sync::{Arc, Mutex};

use futures::SinkExt;
use tokio_tungstenite::tungstenite::protocol::Role;

use super::*;

/// A route like tokio's stdout: writes sit in a buffer until a flush; shutdown does not
/// flush. `out` is what really came out.
struct FlushOnly {
    pending: Vec<u8>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl AsyncWrite for FlushOnly {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let pending = std::mem::take(&mut self.pending);
        if let Ok(mut out) = self.out.lock() {
            out.extend_from_slice(&pending);
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn pair() -> (
    WebSocketStream<tokio::io::DuplexStream>,
    WebSocketStream<tokio::io::DuplexStream>,
) {
    let (a, b) = tokio::io::duplex(1 << 16);
    let client = WebSocketStream::from_raw_socket(a, Role::Client, None).await;
    let server = WebSocketStream::from_raw_socket(b, Role::Server, None).await;
    (client, server)
}

fn route() -> (Route, Arc<Mutex<Vec<u8>>>) {
    let out = Arc::new(Mutex::new(Vec::new()));
    let r = FlushOnly {
        pending: Vec::new(),
        out: out.clone(),
    };
    (Box::new(r), out)
}

fn taken(out: &Arc<Mutex<Vec<u8>>>) -> Vec<u8> {
    out.lock().map(|o| o.clone()).unwrap_or_default()
}

#[tokio::test]
async fn routes_are_flushed_when_the_peer_closes() {
    let (client, mut server) = pair().await;
    let (stdout, out) = route();
    let mux = Mux::start(client, HashMap::from([(1u8, stdout)]), false, false);
    server
        .send(frame::encode(1, b"all of it\n", false))
        .await
        .expect("send");
    server.close(None).await.expect("close");
    mux.gone().await;
    mux.finish().await;
    assert_eq!(taken(&out), b"all of it\n", "the route was flushed");
}

#[tokio::test]
async fn a_v5_channel_close_flushes_that_route() {
    let (client, mut server) = pair().await;
    let (stdout, out) = route();
    let (stderr, err) = route();
    let mux = Mux::start(
        client,
        HashMap::from([(1u8, stdout), (2u8, stderr)]),
        false,
        true,
    );
    server
        .send(frame::encode(1, b"out", false))
        .await
        .expect("send");
    server
        .send(frame::encode(2, b"err", false))
        .await
        .expect("send");
    server.send(frame::encode_close(1)).await.expect("send");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while taken(&out) != b"out" {
        assert!(
            tokio::time::Instant::now() < deadline,
            "closed channel not flushed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(taken(&err).is_empty(), "open channels wait for their end");
    server.close(None).await.expect("close");
    mux.finish().await;
    assert_eq!(taken(&err), b"err");
}
