//! The streaming HTTP server: registers requests behind tokens, accepts HTTP/1.1 upgrades on their URLs and hands each connection to its protocol.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::WebSocketStream;

use super::backend::Backend;
use super::cache::{Cache, Pending};
use super::negotiate::{self, Refusal, WsPortForward};
use super::over_ws;
use crate::error::{Error, Result};
use crate::runtime::{Session, StreamRequest};

/// Most ports one port-forward connection may carry (two channels each in a byte).
pub const MAX_PORTS: usize = 127;

/// A running streaming server.
pub struct Server {
    addr: SocketAddr,
    base: String,
    cache: Cache,
    backend: Arc<dyn Backend>,
    accept: tokio::task::AbortHandle,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server").field("addr", &self.addr).finish()
    }
}

impl Server {
    /// Binds `addr` (port 0: an ephemeral port) and serves until dropped.
    pub async fn start(addr: SocketAddr, backend: Arc<dyn Backend>) -> Result<Arc<Server>> {
        Self::start_with(addr, backend, Cache::default()).await
    }

    /// As [`Server::start`] with a chosen token cache (tests shorten its lifetime).
    pub async fn start_with(
        addr: SocketAddr,
        backend: Arc<dyn Backend>,
        cache: Cache,
    ) -> Result<Arc<Server>> {
        let listener = TcpListener::bind(addr)
            .await
            .map_err(|e| Error::internal(format!("streaming server: bind {addr}: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::internal(format!("streaming server: local address: {e}")))?;
        // A wildcard bind is reached through loopback by the node-local callers.
        let url_ip = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        let base = format!("http://{}", SocketAddr::new(url_ip, addr.port()));
        let server = Arc::new_cyclic(|weak: &std::sync::Weak<Server>| {
            let weak = weak.clone();
            let accept = tokio::spawn(async move {
                loop {
                    let (tcp, _) = match listener.accept().await {
                        Ok(c) => c,
                        Err(e) => {
                            tracing::warn!(error = %e, "streaming server: accept");
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let Some(server) = weak.upgrade() else { return };
                    let _ = tcp.set_nodelay(true);
                    tokio::spawn(serve_connection(server, tcp));
                }
            })
            .abort_handle();
            Server {
                addr,
                base,
                cache,
                backend,
                accept,
            }
        });
        Ok(server)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn url(&self, req: Pending) -> Result<String> {
        let kind = req.kind();
        let token = self.cache.insert(req)?;
        Ok(format!("{}/{kind}/{token}", self.base))
    }

    /// Registers an exec of `cmd` in running container `id`; returns its URL.
    pub fn exec_url(&self, id: &str, cmd: Vec<String>, req: StreamRequest) -> Result<String> {
        let container_id = self
            .backend
            .running_container(id)
            .map_err(|e| e.context("exec"))?;
        self.url(Pending::Exec {
            container_id,
            cmd,
            req,
        })
    }

    /// Registers an attach to running container `id`; returns its URL.
    pub fn attach_url(&self, id: &str, req: StreamRequest) -> Result<String> {
        let container_id = self
            .backend
            .running_container(id)
            .map_err(|e| e.context("attach"))?;
        self.url(Pending::Attach { container_id, req })
    }

    /// Registers a port-forward into ready sandbox `id`; returns its URL.
    pub fn port_forward_url(&self, id: &str) -> Result<String> {
        let sandbox_id = self
            .backend
            .ready_sandbox(id)
            .map_err(|e| e.context("port forward"))?;
        self.url(Pending::PortForward { sandbox_id })
    }

    /// Requests registered and not yet used or swept.
    pub fn pending(&self) -> usize {
        self.cache.len()
    }
}

async fn serve_connection(server: Arc<Server>, tcp: tokio::net::TcpStream) {
    let svc = hyper::service::service_fn(move |req| {
        let server = server.clone();
        async move { Ok::<_, std::convert::Infallible>(route(&server, req)) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .serve_connection(TokioIo::new(tcp), svc)
        .with_upgrades();
    if let Err(e) = conn.await {
        tracing::debug!(error = %e, "streaming connection");
    }
}

type Reply = Response<Full<Bytes>>;

fn plain(status: u16, msg: impl Into<String>) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from(msg.into() + "\n")));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST);
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn refuse(r: Refusal) -> Reply {
    plain(r.status, r.message)
}

/// The answer to one request; upgrades continue in a spawned task.
fn route(server: &Arc<Server>, req: Request<Incoming>) -> Reply {
    let path = req.uri().path().trim_start_matches('/');
    let Some((kind, token)) = path.split_once('/') else {
        return plain(404, "not found");
    };
    let Some(pending) = server.cache.consume(token) else {
        return plain(404, format!("{kind}: unknown or expired token"));
    };
    if pending.kind() != kind {
        return plain(404, format!("{kind}: unknown or expired token"));
    }
    let headers = req.headers();
    if negotiate::is_websocket(headers) {
        websocket(server, req, pending)
    } else if negotiate::is_spdy(headers) {
        spdy(server, req, pending)
    } else {
        plain(
            400,
            format!("{kind}: expected an upgrade to SPDY/3.1 or websocket"),
        )
    }
}

/// The `ports` query parameter of a port-forward.
fn query_ports(req: &Request<Incoming>) -> std::result::Result<Vec<u16>, Refusal> {
    let bad = |m: String| Refusal {
        status: 400,
        message: m,
    };
    let mut ports = Vec::new();
    for pair in req.uri().query().unwrap_or("").split('&') {
        let Some(("ports", v)) = pair.split_once('=') else {
            continue;
        };
        for p in v.split([',', ' ']).filter(|p| !p.is_empty()) {
            match p.parse::<u16>() {
                Ok(n) if n > 0 => ports.push(n),
                _ => return Err(bad(format!("invalid port {p:?}"))),
            }
        }
    }
    if ports.is_empty() {
        return Err(bad("at least one port must be specified".into()));
    }
    if ports.len() > MAX_PORTS {
        return Err(bad(format!("at most {MAX_PORTS} ports per connection")));
    }
    Ok(ports)
}

/// How an exec or attach session starts, and its stream request.
fn session_start(
    backend: &Arc<dyn Backend>,
    pending: Pending,
) -> Option<(StreamRequest, BoxFuture<'static, Result<Session>>, bool)> {
    match pending {
        Pending::Exec {
            container_id,
            cmd,
            req,
        } => Some((req.clone(), backend.exec(container_id, cmd, req), true)),
        Pending::Attach { container_id, req } => {
            Some((req.clone(), backend.attach(container_id, req), false))
        }
        Pending::PortForward { .. } => None,
    }
}

fn switching(headers: &[(&'static str, String)]) -> Reply {
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    for (k, v) in headers {
        if let Ok(v) = http::HeaderValue::from_str(v) {
            r.headers_mut().append(*k, v);
        }
    }
    r
}

fn websocket(server: &Arc<Server>, mut req: Request<Incoming>, pending: Pending) -> Reply {
    let accept = match negotiate::ws_accept(req.headers()) {
        Ok(a) => a,
        Err(r) => return refuse(r),
    };
    let backend = server.backend.clone();
    let (name, run): (&str, Handler) = match pending {
        Pending::PortForward { sandbox_id } => match negotiate::ws_port_forward(req.headers()) {
            Err(r) => return refuse(r),
            Ok(WsPortForward::SpdyTunnel) => (
                negotiate::SPDY_TUNNEL_PORT_FORWARD,
                Box::new(move |io| {
                    Box::pin(async move {
                        let ws = ws_server(io).await;
                        let tunnel = over_ws::tunnel::Tunnel::new(ws);
                        super::over_spdy::portforward::serve(tunnel, sandbox_id, backend).await
                    })
                }),
            ),
            Ok(WsPortForward::Channels(proto)) => {
                let ports = match query_ports(&req) {
                    Ok(p) => p,
                    Err(r) => return refuse(r),
                };
                (
                    proto.name,
                    Box::new(move |io| {
                        Box::pin(async move {
                            let ws = ws_server(io).await;
                            over_ws::portforward::serve(ws, proto, ports, sandbox_id, backend).await
                        })
                    }),
                )
            }
        },
        pending => {
            let proto = match negotiate::ws_exec(req.headers()) {
                Ok(p) => p,
                Err(r) => return refuse(r),
            };
            let Some((sreq, start, exec)) = session_start(&backend, pending) else {
                return plain(500, "unreachable");
            };
            (
                proto.name,
                Box::new(move |io| {
                    Box::pin(async move {
                        let ws = ws_server(io).await;
                        over_ws::exec::serve(ws, proto, sreq, start, exec).await
                    })
                }),
            )
        }
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(io) => run(TokioIo::new(io)).await,
            Err(e) => tracing::debug!(error = %e, "websocket upgrade"),
        }
    });
    let mut h = vec![
        ("upgrade", "websocket".to_string()),
        ("connection", "Upgrade".to_string()),
        ("sec-websocket-accept", accept),
    ];
    if !name.is_empty() {
        h.push(("sec-websocket-protocol", name.to_string()));
    }
    switching(&h)
}

/// What runs on an upgraded connection.
type Handler = Box<dyn FnOnce(Upgraded) -> BoxFuture<'static, ()> + Send>;

/// The upgraded connection.
pub type Upgraded = TokioIo<hyper::upgrade::Upgraded>;

async fn ws_server(io: Upgraded) -> WebSocketStream<Upgraded> {
    let mut config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default();
    config.max_message_size = Some(16 << 20);
    WebSocketStream::from_raw_socket(io, Role::Server, Some(config)).await
}

fn spdy(server: &Arc<Server>, mut req: Request<Incoming>, pending: Pending) -> Reply {
    let backend = server.backend.clone();
    let (name, run): (&str, Handler) = match pending {
        Pending::PortForward { sandbox_id } => match negotiate::spdy_port_forward(req.headers()) {
            Err(r) => return refuse(r),
            Ok(name) => (
                name,
                Box::new(move |io| {
                    Box::pin(super::over_spdy::portforward::serve(
                        io, sandbox_id, backend,
                    ))
                }),
            ),
        },
        pending => {
            let version = match negotiate::spdy_exec(req.headers()) {
                Ok(v) => v,
                Err(r) => {
                    let mut reply = plain(r.status, r.message);
                    for v in negotiate::SPDY_EXEC {
                        reply.headers_mut().append(
                            negotiate::ACCEPTED_HEADER,
                            http::HeaderValue::from_static(v.name()),
                        );
                    }
                    return reply;
                }
            };
            let Some((sreq, start, exec)) = session_start(&backend, pending) else {
                return plain(500, "unreachable");
            };
            (
                version.name(),
                Box::new(move |io| {
                    Box::pin(super::over_spdy::exec::serve(
                        io, version, sreq, start, exec,
                    ))
                }),
            )
        }
    };
    let upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        match upgrade.await {
            Ok(io) => run(TokioIo::new(io)).await,
            Err(e) => tracing::debug!(error = %e, "spdy upgrade"),
        }
    });
    switching(&[
        ("connection", "Upgrade".to_string()),
        ("upgrade", negotiate::SPDY_UPGRADE.to_string()),
        (negotiate::PROTOCOL_HEADER, name.to_string()),
    ])
}
