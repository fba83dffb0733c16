//! ReopenContainerLog: the monitor reopens the log file and says so before the call returns.
//!
//! The kubelet renames the log away, calls ReopenContainerLog and checks the new file at
//! once, so the reopen is a request and answer over the monitor's attach socket
//! ([`IN_REOPEN_LOG`], [`OUT_LOG_REOPENED`]; issue 12). A monitor started by an older bosun
//! (no attach socket, or protocol version 0 in its ready message) cannot answer: it gets
//! SIGUSR1, its only way to reopen, and the call returns as before. A monitor that knows the
//! request but does not answer in time gets an error and no signal: the kubelet then renames
//! the file back and retries, which a late reopen would race.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use rustix::net::RecvFlags;
use tokio::io::Interest;

use super::service::{require_id, Runtime};
use super::session::attach::connect;
use super::state::paths;
use super::state::status::ContainerState;
use crate::error::{Error, Result};
use crate::monitor::attach_proto::{IN_REOPEN_LOG, OUT_LOG_REOPENED, OUT_READY};

/// How long a monitor may take to answer (its loop blocks only on a log write).
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// What a monitor answered.
#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// The new file is open.
    Reopened,
    /// It could not open it (the message says why).
    Failed(String),
    /// It closed the connection (exiting, or too many clients).
    Closed,
    /// It predates the request (protocol version 0).
    Unsupported,
}

impl Runtime {
    /// ReopenContainerLog: the running container's monitor opens a new file at the log path
    /// (the kubelet renamed the old one away); returns once it has. FailedPrecondition when
    /// the container is not running or its monitor is gone.
    pub async fn reopen_log(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let st = entry.status();
        let not_running =
            |what: String| Error::precondition(format!("container {id}: reopen log: {what}"));
        if st.state() != ContainerState::Running {
            return Err(not_running(format!("container is {:?}", st.state())));
        }
        if !super::restore::monitor_alive(st.monitor_pid, &id) {
            return Err(not_running(format!(
                "its monitor (pid {}) is gone",
                st.monitor_pid
            )));
        }
        let bundle = paths::bundle(&entry.meta().state_dir);
        let answer = match connect(&bundle) {
            Ok(fd) => tokio::time::timeout(ANSWER_WAIT, ask(fd)).await,
            // No attach socket: a monitor older than it.
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return signal_reopen(&id, st.monitor_pid);
            }
            Err(e) => {
                return Err(Error::internal(format!(
                    "container {id}: reopen log: connect to its monitor: {e}"
                )))
            }
        };
        match answer {
            Ok(Ok(Answer::Reopened)) => Ok(()),
            Ok(Ok(Answer::Unsupported)) => signal_reopen(&id, st.monitor_pid),
            Ok(Ok(Answer::Failed(why))) => Err(Error::internal(format!(
                "container {id}: reopen log: {why}"
            ))),
            Ok(Ok(Answer::Closed)) => Err(not_running(
                "its monitor closed the connection (the container is exiting, or too many attaches)"
                    .into(),
            )),
            Ok(Err(e)) => Err(Error::internal(format!(
                "container {id}: reopen log: talk to its monitor: {e}"
            ))),
            Err(_) => Err(Error::unavailable(format!(
                "container {id}: reopen log: its monitor did not answer in {ANSWER_WAIT:?}"
            ))),
        }
    }
}

/// Asks the monitor behind `fd` to reopen the log and waits for its answer, skipping the
/// container output that reaches every attach client meanwhile.
async fn ask(fd: std::os::fd::OwnedFd) -> io::Result<Answer> {
    let socket = crate::sys::async_fd::register(fd)?;
    let mut buf = vec![0u8; 64 << 10];
    let mut ready = false;
    loop {
        let n = socket
            .async_io(Interest::READABLE, |fd| {
                Ok(rustix::net::recv(fd, &mut buf[..], RecvFlags::DONTWAIT)?.0)
            })
            .await?;
        match buf[..n].split_first() {
            None => return Ok(Answer::Closed),
            Some((&OUT_READY, version)) if !ready => {
                if version.first().is_none_or(|v| *v < 1) {
                    return Ok(Answer::Unsupported);
                }
                ready = true;
                socket
                    .async_io(Interest::WRITABLE, |fd| {
                        Ok(rustix::net::send(
                            fd,
                            &[IN_REOPEN_LOG],
                            rustix::net::SendFlags::DONTWAIT | rustix::net::SendFlags::NOSIGNAL,
                        )?)
                    })
                    .await?;
            }
            Some((&OUT_LOG_REOPENED, [])) if ready => return Ok(Answer::Reopened),
            Some((&OUT_LOG_REOPENED, why)) if ready => {
                let why = String::from_utf8_lossy(&why[..why.len().min(512)]).into_owned();
                return Ok(Answer::Failed(why));
            }
            Some(_) => {} // output for attach clients
        }
    }
}

/// SIGUSR1 to the monitor: how monitors before the reopen request reopen their log.
fn signal_reopen(id: &str, monitor_pid: u32) -> Result<()> {
    let pid = i32::try_from(monitor_pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
        .ok_or_else(|| Error::internal(format!("container {id}: no monitor pid")))?;
    rustix::process::kill_process(pid, rustix::process::Signal::USR1)
        .map_err(|e| Error::internal(format!("container {id}: reopen log: signal monitor: {e}")))
}
