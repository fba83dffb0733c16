//! ExecSync: request validation and the ExecOutput answer.

use std::time::Duration;

use crate::error::{Error, Result};
use crate::oci::ExecOutput;
use crate::proto::runtime::v1 as pb;

/// The command and timeout of an ExecSync request: `cmd` must be non-empty; a timeout of 0
/// means none (the kubelet runs exec hooks that way); negative timeouts are refused.
pub fn exec_args(cmd: Vec<String>, timeout: i64) -> Result<(Vec<String>, Option<Duration>)> {
    if cmd.is_empty() {
        return Err(Error::invalid("exec sync: cmd is required"));
    }
    let timeout = match u64::try_from(timeout) {
        Ok(0) => None,
        Ok(s) => Some(Duration::from_secs(s)),
        Err(_) => {
            return Err(Error::invalid(format!(
                "exec sync: timeout {timeout} must not be negative"
            )))
        }
    };
    Ok((cmd, timeout))
}

/// The ExecSync answer; a non-zero exit is a normal response.
pub fn exec_response(out: ExecOutput) -> pb::ExecSyncResponse {
    pb::ExecSyncResponse {
        stdout: out.stdout,
        stderr: out.stderr,
        exit_code: out.exit_code,
    }
}
