//! `[stream]`: the streaming server that serves exec, attach and port-forward URLs.

use serde::{Deserialize, Serialize};

/// Streaming server (exec/attach/port-forward URLs) settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StreamConfig {
    /// Address the streaming HTTP server binds; port 0 picks an ephemeral port (containerd's
    /// default). The URLs handed to clients name this address (loopback for a wildcard).
    pub address: std::net::SocketAddr,
}

impl Default for StreamConfig {
    fn default() -> Self {
        StreamConfig {
            address: std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        }
    }
}
