//! Exec, Attach and PortForward: request validation into the streaming server's terms.

use crate::error::{Error, Result};
use crate::proto::runtime::v1 as pb;
use crate::runtime::StreamRequest;

/// The streams of an exec or attach: a TTY merges stderr into stdout, so asking for both is
/// refused, and at least one stream must be asked for.
fn streams(rpc: &str, tty: bool, stdin: bool, stdout: bool, stderr: bool) -> Result<StreamRequest> {
    if tty && stderr {
        return Err(Error::invalid(format!(
            "{rpc}: tty and stderr cannot both be true (a terminal has no separate stderr)"
        )));
    }
    if !(stdin || stdout || stderr) {
        return Err(Error::invalid(format!(
            "{rpc}: one of stdin, stdout or stderr must be true"
        )));
    }
    Ok(StreamRequest {
        tty,
        stdin,
        stdout,
        stderr,
    })
}

fn container_id(rpc: &str, id: String) -> Result<String> {
    if id.is_empty() {
        return Err(Error::invalid(format!("{rpc}: container_id is required")));
    }
    Ok(id)
}

/// Exec: the container, the command and the streams.
pub fn exec_request(req: pb::ExecRequest) -> Result<(String, Vec<String>, StreamRequest)> {
    let id = container_id("exec", req.container_id)?;
    if req.cmd.is_empty() {
        return Err(Error::invalid("exec: cmd is required"));
    }
    let s = streams("exec", req.tty, req.stdin, req.stdout, req.stderr)?;
    Ok((id, req.cmd, s))
}

/// Attach: the container and the streams.
pub fn attach_request(req: pb::AttachRequest) -> Result<(String, StreamRequest)> {
    let id = container_id("attach", req.container_id)?;
    let s = streams("attach", req.tty, req.stdin, req.stdout, req.stderr)?;
    Ok((id, s))
}

/// PortForward: the sandbox; the ports, advisory in CRI (the client names them on the
/// connection), must be valid TCP ports when given.
pub fn port_forward_request(req: pb::PortForwardRequest) -> Result<String> {
    if req.pod_sandbox_id.is_empty() {
        return Err(Error::invalid("port forward: pod_sandbox_id is required"));
    }
    if let Some(p) = req.port.iter().find(|p| !(1..=65535).contains(*p)) {
        return Err(Error::invalid(format!(
            "port forward: port {p} is not a TCP port"
        )));
    }
    Ok(req.pod_sandbox_id)
}

/// An answer carrying `url`.
pub fn exec_response(url: String) -> pb::ExecResponse {
    pb::ExecResponse { url }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::convert::assert_invalid;

    fn exec(f: impl FnOnce(&mut pb::ExecRequest)) -> pb::ExecRequest {
        let mut r = pb::ExecRequest {
            container_id: "c".into(),
            cmd: vec!["sh".into()],
            stdout: true,
            ..Default::default()
        };
        f(&mut r);
        r
    }

    #[test]
    fn exec_validation_names_the_field() {
        assert_invalid(exec_request(exec(|r| r.cmd.clear())), &["cmd"]);
        assert_invalid(
            exec_request(exec(|r| r.container_id.clear())),
            &["container_id"],
        );
        assert_invalid(
            exec_request(exec(|r| {
                r.tty = true;
                r.stderr = true
            })),
            &["tty", "stderr"],
        );
        assert_invalid(
            exec_request(exec(|r| r.stdout = false)),
            &["stdin", "stdout"],
        );
        let (id, cmd, s) = exec_request(exec(|r| r.tty = true)).expect("valid");
        assert_eq!((id.as_str(), cmd.len()), ("c", 1));
        assert!(s.tty && s.stdout && !s.stdin);
    }

    #[test]
    fn attach_and_port_forward_validation() {
        let a = pb::AttachRequest {
            container_id: "c".into(),
            ..Default::default()
        };
        assert_invalid(attach_request(a), &["stdin", "stdout", "stderr"]);
        assert_invalid(
            port_forward_request(pb::PortForwardRequest::default()),
            &["pod_sandbox_id"],
        );
        assert_invalid(
            port_forward_request(pb::PortForwardRequest {
                pod_sandbox_id: "s".into(),
                port: vec![80, 70000],
            }),
            &["70000"],
        );
    }
}
