//! WebSocket client: remotecommand channels (v5/v4/v1, binary or base64), port-forward channel pairs and the SPDY tunnel.

use std::collections::HashMap;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::WebSocketStream;

use super::{split_url, ExecIo};
use crate::error::{Error, Result};
use crate::stream::over_ws::frame::{ERROR, RESIZE, STDERR, STDIN, STDOUT};
use crate::stream::over_ws::mux::{Mux, Route};
use crate::stream::status::{self, Outcome};
use crate::stream::{negotiate, resize};

/// How long a channel port-forward waits for the remote side after the local side ended.
const CHANNEL_GRACE: std::time::Duration = std::time::Duration::from_secs(1);

/// What client-go's WebSocket executor offers.
pub const EXEC_PROTOCOLS: [&str; 2] = ["v5.channel.k8s.io", "v4.channel.k8s.io"];

/// Connects and upgrades to WebSocket offering `protocols`; returns the stream and the
/// negotiated protocol. A refused upgrade is an error naming the HTTP status.
pub async fn connect(
    url: &str,
    protocols: &[&str],
) -> Result<(WebSocketStream<TcpStream>, String)> {
    let (authority, _) = split_url(url)?;
    let tcp = TcpStream::connect(authority)
        .await
        .map_err(|e| Error::unavailable(format!("connect {authority}: {e}")))?;
    let _ = tcp.set_nodelay(true);
    let ws_url = url.replacen("http://", "ws://", 1);
    let mut request = ws_url
        .into_client_request()
        .map_err(|e| Error::invalid(format!("streaming URL {url}: {e}")))?;
    if !protocols.is_empty() {
        let v = http::HeaderValue::from_str(&protocols.join(", "))
            .map_err(|e| Error::invalid(format!("websocket protocols: {e}")))?;
        request.headers_mut().insert("sec-websocket-protocol", v);
    }
    let mut config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
    config.max_message_size = Some(16 << 20);
    let (ws, resp) = tokio_tungstenite::client_async_with_config(request, tcp, Some(config))
        .await
        .map_err(|e| match e {
            tokio_tungstenite::tungstenite::Error::Http(r) => Error::unavailable(format!(
                "{url}: upgrade refused: {} {}",
                r.status(),
                String::from_utf8_lossy(r.body().as_deref().unwrap_or_default()).trim()
            )),
            e => Error::unavailable(format!("{url}: websocket: {e}")),
        })?;
    let proto = resp
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    Ok((ws, proto))
}

/// Exec or attach over WebSocket offering `protocols`.
pub async fn exec(url: &str, protocols: &[&str], io: ExecIo) -> Result<Outcome> {
    let (ws, proto) = connect(url, protocols).await?;
    let v5 = proto == negotiate::Version::V5.name();
    let json = v5 || proto.starts_with("v4.");
    let base64 = proto.contains("base64");
    let ExecIo {
        stdin,
        stdout,
        stderr,
        resize: resizes,
        ..
    } = io;
    let mut routes: HashMap<u8, Route> = HashMap::new();
    if let Some(w) = stdout {
        routes.insert(STDOUT, Box::new(w));
    }
    if let Some(w) = stderr {
        routes.insert(STDERR, Box::new(w));
    }
    let (mut err_r, err_w) = tokio::io::duplex(64 << 10);
    routes.insert(ERROR, Box::new(err_w));
    let mux = Mux::start(ws, routes, base64, false);
    let mut tasks = Vec::new();
    if let Some(mut stdin) = stdin {
        let mut w = mux.writer(STDIN, v5);
        tasks.push(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut stdin, &mut w).await;
            let _ = w.shutdown().await;
        }));
    }
    if let Some(mut rx) = resizes {
        let mut w = mux.writer(RESIZE, false);
        tasks.push(tokio::spawn(async move {
            while let Some(size) = rx.recv().await {
                // One message per size: the writer frames each write.
                if w.write_all(&resize::encode(size)).await.is_err() {
                    break;
                }
            }
        }));
    }
    let collect = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = err_r.read_to_end(&mut v).await;
        v
    });
    mux.gone().await;
    for t in tasks {
        t.abort();
    }
    mux.finish().await;
    let payload = collect
        .await
        .map_err(|e| Error::internal(format!("error stream: {e}")))?;
    Ok(status::parse(&payload, json))
}

/// Forwards one local connection to `port` over wsstream channel pairs (`?ports=`), the
/// kubelet's WebSocket port-forward. Ends when either side closes; an error when the server
/// reported one.
pub async fn port_forward_channels(url: &str, port: u16, local: TcpStream) -> Result<()> {
    let url = format!("{url}?ports={port}");
    let (ws, _) = connect(&url, &["v4.channel.k8s.io"]).await?;
    let (mut data_r, data_w) = tokio::io::duplex(64 << 10);
    let (mut err_r, err_w) = tokio::io::duplex(4096);
    let mut routes: HashMap<u8, Route> = HashMap::new();
    routes.insert(0, Box::new(data_w));
    routes.insert(1, Box::new(err_w));
    let mux = Mux::start(ws, routes, false, false);
    let (mut lr, mut lw) = local.into_split();
    let mut up_w = mux.writer(0, false);
    let up = async move {
        let _ = tokio::io::copy(&mut lr, &mut up_w).await;
    };
    let down = async {
        let mut prefix = [0u8; 2];
        data_r.read_exact(&mut prefix).await?;
        if u16::from_le_bytes(prefix) != port {
            return Err(Error::internal(format!(
                "port forward: data channel is for port {}, not {port}",
                u16::from_le_bytes(prefix)
            )));
        }
        tokio::io::copy(&mut data_r, &mut lw).await?;
        let _ = lw.shutdown().await;
        Ok(())
    };
    let errors = async {
        let mut v = Vec::new();
        let _ = err_r.read_to_end(&mut v).await;
        v
    };
    // Channels have no half-close: once the local side ended, the remote side gets a grace
    // period to finish its answer, then the connection is closed.
    let both = async {
        let (down, errors) = tokio::join!(down, errors);
        (down, errors)
    };
    tokio::pin!(both);
    let (down, errors) = tokio::select! {
        r = &mut both => r,
        _ = up => match tokio::time::timeout(CHANNEL_GRACE, &mut both).await {
            Ok(r) => r,
            Err(_) => (Ok(()), Vec::new()),
        },
    };
    mux.close().await;
    let msg = errors.get(2..).unwrap_or_default();
    if !msg.is_empty() {
        return Err(Error::unavailable(
            String::from_utf8_lossy(msg).into_owned(),
        ));
    }
    down
}

/// Port-forward as client-go ≥ 1.30 does over WebSocket: SPDY tunnelled in binary messages.
pub async fn port_forward_tunnel(url: &str) -> Result<super::spdy::PortForwarder> {
    let (ws, proto) = connect(url, &[negotiate::SPDY_TUNNEL_PORT_FORWARD]).await?;
    if proto != negotiate::SPDY_TUNNEL_PORT_FORWARD {
        return Err(Error::unavailable(format!(
            "{url}: server chose websocket protocol {proto:?}"
        )));
    }
    Ok(super::spdy::PortForwarder::over(
        crate::stream::over_ws::tunnel::Tunnel::new(ws),
    ))
}
