//! `runc exec` for ExecSync: capped output, a deadline that kills and reaps the process.
//!
//! runc runs in its own process group with `--pid-file`. On timeout (or when the caller
//! abandons the exec) [`ExecKiller`] kills the exec'd process and everything it started; runc
//! reaps the process and exits, we reap runc, and a timed-out call returns only once the
//! killed processes are reaped (critest looks for them right after). runc's own failures go
//! to a per-exec log file, kept apart from the process's stderr.

use std::process::{ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use super::command::{json_error, kind_of};
use super::exec_kill::{ExecKiller, TmpDir};
use super::{ExecOutput, Runc};
use crate::error::{Error, ErrorKind, Result};
use crate::sys::CommandExt;

/// How long output may keep flowing after the process ended (a descendant that escaped the
/// kill could hold the pipes open forever).
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long a timed-out exec waits for the processes it killed to be reaped.
const REAP_WAIT: Duration = Duration::from_secs(1);

/// Reads `r` to EOF keeping at most `cap` bytes in `out`; the rest is read and dropped so the
/// writer never blocks.
async fn read_capped(r: Option<impl AsyncRead + Unpin>, out: &mut Vec<u8>, cap: usize) {
    let Some(mut r) = r else { return };
    let mut buf = vec![0u8; 64 << 10];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let room = cap.saturating_sub(out.len()).min(n);
                out.extend_from_slice(&buf[..room]);
            }
        }
    }
}

/// The exit status as CRI wants it: the code, or 128 + signal.
pub(crate) fn code_of(status: ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(255)
}

/// Kills the exec when dropped armed: the caller abandoned the exec future.
struct Abandoned(Option<ExecKiller>);

impl Abandoned {
    fn kill(&self) {
        if let Some(k) = &self.0 {
            k.kill();
        }
    }
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Runs `process` in container `id` (see [`crate::oci::OciRuntime::exec`]).
pub(crate) async fn run(
    runc: &Runc,
    id: &str,
    process: &oci_spec::runtime::Process,
    timeout: Option<Duration>,
    cap: usize,
) -> Result<ExecOutput> {
    let fail = |kind: ErrorKind, msg: String| {
        Error::new(kind, format!("container {id}: runc exec: {msg}"))
    };
    let suffix: u64 = rand::random();
    let tmp = Arc::new(TmpDir(
        runc.tmp_dir.join(format!("bosun-exec-{id}-{suffix:016x}")),
    ));
    std::fs::create_dir_all(&tmp.0).map_err(|e| {
        fail(
            ErrorKind::Internal,
            format!("create {}: {e}", tmp.0.display()),
        )
    })?;
    let (spec, pid_file, log) = (
        tmp.0.join("process.json"),
        tmp.0.join("pid"),
        tmp.0.join("runc.log"),
    );
    let json = serde_json::to_vec(process)?;
    std::fs::write(&spec, json)
        .map_err(|e| fail(ErrorKind::Internal, format!("write process.json: {e}")))?;

    let mut cmd = runc.command(Some(&log));
    cmd.arg("exec")
        .arg("--process")
        .arg(&spec)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(id)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .new_process_group();
    // No kill_on_drop: runc must outlive an abandoned exec until its process is named and
    // killed (see [`ExecKiller`]), which then kills runc too.
    let mut child = tokio::process::Command::from(cmd).spawn().map_err(|e| {
        fail(
            ErrorKind::Internal,
            format!("spawn {}: {e}", runc.binary.display()),
        )
    })?;
    // A clone: `tmp` must outlive the disarmed killer, since runc's log is read after the wait.
    let mut killer = Abandoned(Some(ExecKiller::new(tmp.clone(), pid_file, &child)));
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let mut readers = Box::pin(async {
        tokio::join!(
            read_capped(stdout, &mut out, cap),
            read_capped(stderr, &mut err, cap)
        )
    });
    // A timeout past what the clock can hold (ExecSync's i64::MAX seconds) is no deadline.
    let deadline = timeout.and_then(|t| tokio::time::Instant::now().checked_add(t));
    let expired = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(expired);
    let mut drained = false;
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            _ = &mut readers, if !drained => drained = true,
            () = &mut expired, if !timed_out => {
                timed_out = true;
                killer.kill();
            }
        }
    };
    let status = status.map_err(|e| fail(ErrorKind::Internal, format!("wait: {e}")))?;
    // runc is reaped: its pid (the group id) may be reused from now on.
    let disarmed = killer.0.take();
    if !drained {
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut readers).await;
    }
    drop(readers);
    if timed_out {
        if let Some(k) = disarmed {
            if !k.wait_reaped(REAP_WAIT).await {
                tracing::debug!(
                    container = id,
                    "exec timeout: killed processes not all reaped"
                );
            }
        }
        return Ok(ExecOutput {
            exit_code: code_of(status),
            stdout: out,
            stderr: err,
            timed_out: true,
        });
    }
    // runc exits 255 on its own failures (container missing, exec of a bad path) and logs why.
    if code_of(status) == 255 {
        if let Some(msg) = std::fs::read(&log).ok().and_then(|l| json_error(&l)) {
            return Err(fail(kind_of(&msg), msg));
        }
    }
    Ok(ExecOutput {
        exit_code: code_of(status),
        stdout: out,
        stderr: err,
        timed_out: false,
    })
}
