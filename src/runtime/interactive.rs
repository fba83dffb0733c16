//! Attach and port-forward endpoints of the runtime, for the streaming server (exec lives in
//! [`super::exec_session`]).

use std::sync::Arc;

use super::session::{Session, StreamRequest};
use super::Runtime;
use crate::error::{Error, Result};

impl Runtime {
    /// Attaches to the running container `id`'s stdio through its monitor.
    pub async fn attach(self: &Arc<Self>, id: &str, req: StreamRequest) -> Result<Session> {
        let _ = (id, req);
        Err(Error::unimplemented("attach: not built yet"))
    }

    /// A TCP connection to `port` on the loopback of sandbox `id`'s network namespace.
    pub async fn port_forward(
        self: &Arc<Self>,
        id: &str,
        port: u16,
    ) -> Result<tokio::net::TcpStream> {
        let _ = (id, port);
        Err(Error::unimplemented("port forward: not built yet"))
    }
}
