//! Port-forward: a TCP connection to the loopback of a pod's network namespace.
//!
//! Like containerd, the connection goes to `localhost:<port>` inside the pod's netns: IPv4
//! first, then IPv6. The connect runs on a short-lived thread of its own that enters the
//! pinned namespace (a thread's network namespace decides where its new sockets live; the
//! socket keeps that namespace after the thread is gone), and the connected socket is handed
//! to tokio. hostNetwork pods are reached on the host's loopback.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, ErrorKind, Result};
use crate::oci::NamespaceMode;
use crate::runtime::service::{require_id, Runtime};
use crate::runtime::state::paths;
use crate::runtime::state::status::SandboxState;

/// How long a connect to the pod's port may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

impl Runtime {
    /// A TCP connection to `port` on the loopback of sandbox `id`'s network namespace (the
    /// host's for a hostNetwork pod). The sandbox must be ready.
    pub async fn port_forward(
        self: &Arc<Self>,
        id: &str,
        port: u16,
    ) -> Result<tokio::net::TcpStream> {
        require_id("sandbox", id)?;
        if port == 0 {
            return Err(Error::invalid("port forward: port must be 1-65535"));
        }
        let sandbox = self.sandbox(id)?;
        let id = sandbox.id().to_string();
        let st = sandbox.status().state();
        if st != SandboxState::Ready {
            return Err(Error::precondition(format!(
                "sandbox {id}: port forward: sandbox is {st:?}"
            )));
        }
        let meta = sandbox.meta();
        let netns = (meta.request.network != NamespaceMode::Node)
            .then(|| paths::ns_dir(&meta.state_dir).join("net"));
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("port-forward".into())
            .spawn(move || {
                let _ = tx.send(connect_in(netns, port));
            })
            .map_err(|e| Error::internal(format!("sandbox {id}: port forward: thread: {e}")))?;
        let stream = rx
            .await
            .map_err(|_| Error::internal(format!("sandbox {id}: port forward: thread lost")))?
            .map_err(|e| e.context(format!("sandbox {id}: port forward to port {port}")))?;
        tokio::net::TcpStream::from_std(stream)
            .map_err(|e| Error::internal(format!("sandbox {id}: port forward: register: {e}")))
    }
}

/// On the calling (dedicated) thread: enters `netns` (if any) and connects to
/// `localhost:port`, v4 then v6; the stream comes back non-blocking.
fn connect_in(netns: Option<PathBuf>, port: u16) -> Result<TcpStream> {
    if let Some(path) = netns {
        let ns = std::fs::File::open(&path).map_err(|e| {
            Error::precondition(format!("network namespace {}: {e}", path.display()))
        })?;
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(&ns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| Error::internal(format!("enter {}: {e}", path.display())))?;
    }
    let v4 = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let v6 = SocketAddr::from((Ipv6Addr::LOCALHOST, port));
    let stream = TcpStream::connect_timeout(&v4, CONNECT_TIMEOUT)
        .or_else(|e4| TcpStream::connect_timeout(&v6, CONNECT_TIMEOUT).map_err(|e6| (e4, e6)))
        .map_err(|(e4, e6)| {
            Error::new(
                ErrorKind::Unavailable,
                format!("connect {v4}: {e4}; connect {v6}: {e6}"),
            )
        })?;
    stream
        .set_nonblocking(true)
        .map_err(|e| Error::internal(format!("set non-blocking: {e}")))?;
    Ok(stream)
}
