//! Attach endpoint of the runtime, for the streaming server (exec lives in
//! [`super::exec_session`], port-forward in [`super::port_forward`]).

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
}
