//! Server side of port-forward over WebSocket channels (the kubelet's wsstream variant): per port a data channel 2i and an error channel 2i+1, each opened by the 2-byte little-endian port.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;

use super::mux::{Mux, Route};
use crate::stream::backend::Backend;
use crate::stream::negotiate::WsProtocol;

/// Forwards `ports` of sandbox `sandbox` over `ws` until the client leaves or every target
/// closed its side.
pub async fn serve<S>(
    ws: WebSocketStream<S>,
    proto: WsProtocol,
    ports: Vec<u16>,
    sandbox: String,
    backend: Arc<dyn Backend>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut routes: HashMap<u8, Route> = HashMap::new();
    let mut reads = Vec::new();
    let mut failures = Vec::new();
    for (i, &port) in ports.iter().enumerate() {
        let data = channel(i, 0);
        match backend.port_forward(sandbox.clone(), port).await {
            Ok(tcp) => {
                let (r, w) = tcp.into_split();
                routes.insert(data, Box::new(w));
                reads.push((data, r));
            }
            Err(e) => failures.push((
                channel(i, 1),
                format!("error forwarding port {port} to pod {sandbox}: {e}"),
            )),
        }
    }
    let mux = Mux::start(ws, routes, proto.base64, false);
    for (i, &port) in ports.iter().enumerate() {
        let _ = mux.send(channel(i, 0), &port.to_le_bytes()).await;
        let _ = mux.send(channel(i, 1), &port.to_le_bytes()).await;
    }
    for (ch, msg) in failures {
        let _ = mux.send(ch, msg.as_bytes()).await;
    }
    let copies = reads.into_iter().map(|(ch, mut r)| {
        let mut w = mux.writer(ch, false);
        async move {
            let _ = tokio::io::copy(&mut r, &mut w).await;
        }
    });
    let all = futures::future::join_all(copies);
    tokio::select! {
        _ = all => {}
        () = mux.gone() => {}
    }
    mux.close().await;
}

/// Channel `kind` (0 data, 1 error) of the `i`th port.
fn channel(i: usize, kind: u8) -> u8 {
    u8::try_from(i * 2).unwrap_or(u8::MAX - 1) + kind
}
