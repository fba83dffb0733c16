//! The streaming server: exec, attach and port-forward over SPDY/3.1 and WebSocket, behind single-use URLs.
//!
//! The CRI Exec/Attach/PortForward RPCs register a request here and hand back its URL
//! (`http://<addr>/exec/<token>` …); a client (kubelet, crictl, `bosun exec`) then upgrades an
//! HTTP/1.1 connection on that URL to SPDY/3.1 or WebSocket and speaks the Kubernetes
//! remotecommand or portforward protocol over it. The runtime is reached through [`Backend`].

pub mod backend;
pub mod cache;
pub mod client;
pub mod negotiate;
pub mod over_spdy;
pub mod over_ws;
pub mod pump;
pub mod resize;
pub mod server;
pub mod spdy;
pub mod status;

#[cfg(test)]
mod fake;
#[cfg(test)]
mod server_tests;

pub use backend::{Backend, RuntimeBackend};
pub use cache::{Pending, TOKEN_TTL};
pub use server::Server;
