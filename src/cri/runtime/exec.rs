//! RuntimeService's exec and streaming RPCs: ExecSync runs here; Exec, Attach and PortForward
//! answer a URL of the streaming server.

use super::CriRuntime;
use crate::cri::convert::{exec, stream};
use crate::proto::runtime::v1 as pb;
use crate::Result;

/// The streaming server, or Unavailable when the daemon runs without one.
fn streaming<'a>(cri: &'a CriRuntime, rpc: &str) -> Result<&'a crate::stream::Server> {
    cri.streaming
        .as_deref()
        .ok_or_else(|| crate::Error::unavailable(format!("{rpc}: no streaming server")))
}

/// ExecSync: runs the command to its end (or its timeout) and answers its output.
pub(super) async fn exec_sync(
    cri: &CriRuntime,
    req: pb::ExecSyncRequest,
) -> Result<pb::ExecSyncResponse> {
    let (cmd, timeout) = exec::exec_args(req.cmd, req.timeout)?;
    let out = cri
        .runtime
        .exec_sync(&req.container_id, cmd, timeout)
        .await?;
    Ok(exec::exec_response(out))
}

/// Exec.
pub(super) async fn exec(cri: &CriRuntime, req: pb::ExecRequest) -> Result<pb::ExecResponse> {
    let (id, cmd, s) = stream::exec_request(req)?;
    let url = streaming(cri, "exec")?.exec_url(&id, cmd, s)?;
    Ok(stream::exec_response(url))
}

/// Attach.
pub(super) async fn attach(cri: &CriRuntime, req: pb::AttachRequest) -> Result<pb::AttachResponse> {
    let (id, s) = stream::attach_request(req)?;
    let url = streaming(cri, "attach")?.attach_url(&id, s)?;
    Ok(pb::AttachResponse { url })
}

/// PortForward.
pub(super) async fn port_forward(
    cri: &CriRuntime,
    req: pb::PortForwardRequest,
) -> Result<pb::PortForwardResponse> {
    let id = stream::port_forward_request(req)?;
    let url = streaming(cri, "port forward")?.port_forward_url(&id)?;
    Ok(pb::PortForwardResponse { url })
}
