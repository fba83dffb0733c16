//! What the streaming server needs from the runtime, as a trait so the server is testable with a fake.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::net::TcpStream;

use crate::error::{Error, Result};
use crate::runtime::{ContainerState, Runtime, Session, StreamRequest};

/// The runtime as the streaming server sees it.
pub trait Backend: Send + Sync + 'static {
    /// The full id of running container `id` (or unique prefix); NotFound or FailedPrecondition.
    fn running_container(&self, id: &str) -> Result<String>;
    /// The full id of ready sandbox `id` (or unique prefix); NotFound or FailedPrecondition.
    fn ready_sandbox(&self, id: &str) -> Result<String>;
    /// Starts `cmd` in container `id` with the streams `req` asks for.
    fn exec(
        &self,
        id: String,
        cmd: Vec<String>,
        req: StreamRequest,
    ) -> BoxFuture<'static, Result<Session>>;
    /// Attaches to container `id`'s stdio.
    fn attach(&self, id: String, req: StreamRequest) -> BoxFuture<'static, Result<Session>>;
    /// A TCP connection to `port` inside sandbox `id`'s network namespace.
    fn port_forward(&self, id: String, port: u16) -> BoxFuture<'static, Result<TcpStream>>;
}

/// The real runtime.
pub struct RuntimeBackend(pub Arc<Runtime>);

impl Backend for RuntimeBackend {
    fn running_container(&self, id: &str) -> Result<String> {
        let c = self.0.container(id)?;
        match c.status().state() {
            ContainerState::Running => Ok(c.id().to_string()),
            state => Err(Error::precondition(format!(
                "container {}: not running (state {state:?})",
                c.id()
            ))),
        }
    }

    fn ready_sandbox(&self, id: &str) -> Result<String> {
        let s = self.0.sandbox(id)?;
        let state = s.status().state();
        if state.is_ready() {
            Ok(s.id().to_string())
        } else {
            Err(Error::precondition(format!(
                "sandbox {}: not ready (state {state:?})",
                s.id()
            )))
        }
    }

    fn exec(
        &self,
        id: String,
        cmd: Vec<String>,
        req: StreamRequest,
    ) -> BoxFuture<'static, Result<Session>> {
        let rt = self.0.clone();
        Box::pin(async move { rt.exec(&id, cmd, req).await })
    }

    fn attach(&self, id: String, req: StreamRequest) -> BoxFuture<'static, Result<Session>> {
        let rt = self.0.clone();
        Box::pin(async move { rt.attach(&id, req).await })
    }

    fn port_forward(&self, id: String, port: u16) -> BoxFuture<'static, Result<TcpStream>> {
        let rt = self.0.clone();
        Box::pin(async move { rt.port_forward(&id, port).await })
    }
}
