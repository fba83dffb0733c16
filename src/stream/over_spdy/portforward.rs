//! Server side of portforward.k8s.io over SPDY: per forwarded connection the client opens a data and an error stream sharing a `requestID`, with the target `port`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::{STREAM_CREATION_TIMEOUT, STREAM_TYPE};
use crate::stream::backend::Backend;
use crate::stream::spdy::{Connection, Stream};

/// Half of a pair, waiting for its other half.
#[derive(Default)]
struct Pair {
    data: Option<Stream>,
    error: Option<Stream>,
    since: Option<Instant>,
}

/// Serves port-forward streams on `io` until the client closes the connection.
pub async fn serve<T>(io: T, sandbox: String, backend: Arc<dyn Backend>)
where
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    let (conn, mut incoming) = Connection::server(io);
    let mut pairs: HashMap<String, Pair> = HashMap::new();
    while let Some(stream) = incoming.accept().await {
        // Halves whose partner never came are given up.
        pairs.retain(|_, p| {
            p.since
                .is_some_and(|t| t.elapsed() < STREAM_CREATION_TIMEOUT)
        });
        let Some(id) = stream.header("requestID").map(str::to_string) else {
            tracing::debug!("port forward: stream without requestID");
            stream.reset();
            continue;
        };
        let pair = pairs.entry(id.clone()).or_insert_with(|| Pair {
            since: Some(Instant::now()),
            ..Default::default()
        });
        match stream.header(STREAM_TYPE) {
            Some("data") => pair.data = Some(stream),
            Some("error") => pair.error = Some(stream),
            other => {
                tracing::debug!(stream_type = ?other, "port forward: unexpected stream");
                stream.reset();
                continue;
            }
        }
        if pair.data.is_some() && pair.error.is_some() {
            if let Some(Pair {
                data: Some(data),
                error: Some(error),
                ..
            }) = pairs.remove(&id)
            {
                tokio::spawn(forward(data, error, sandbox.clone(), backend.clone()));
            }
        }
    }
    conn.goaway().await;
}

/// One forwarded connection: dial the port, copy both ways, report failures on `error`.
async fn forward(data: Stream, mut error: Stream, sandbox: String, backend: Arc<dyn Backend>) {
    let port = data.header("port").and_then(|p| p.parse::<u16>().ok());
    let result = match port {
        None | Some(0) => Err(format!(
            "invalid port header {:?}",
            data.header("port").unwrap_or("")
        )),
        Some(port) => match backend.port_forward(sandbox.clone(), port).await {
            Err(e) => Err(format!(
                "error forwarding port {port} to pod {sandbox}: {e}"
            )),
            Ok(tcp) => {
                let (mut tr, mut tw) = tcp.into_split();
                let (mut dr, mut dw) = tokio::io::split(data);
                let up = async {
                    let r = tokio::io::copy(&mut dr, &mut tw).await;
                    let _ = tw.shutdown().await;
                    r
                };
                let down = async {
                    let r = tokio::io::copy(&mut tr, &mut dw).await;
                    let _ = dw.shutdown().await;
                    r
                };
                let (u, d) = tokio::join!(up, down);
                match u.and(d) {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!(
                        "error forwarding port {port} to pod {sandbox}: {e}"
                    )),
                }
            }
        },
    };
    if let Err(msg) = result {
        tracing::debug!(%msg, "port forward");
        let _ = error.write_all(msg.as_bytes()).await;
    }
    let _ = error.shutdown().await;
}
