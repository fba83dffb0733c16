//! Starting a container's monitor ([`launch_monitor`]): spawning it (or handing a spare its arguments) and reading its report.
//!
//! The monitor (`bosun monitor …`, see [`crate::monitor`]) forks away: the process we spawn
//! exits at once and is reaped here (a spare's was reaped before, [`SpareSlot`]); the
//! monitor reports `{"monitor_pid","init_pid"}` or
//! `{"error"}` on a pipe given to it as fd 3, and writes the exit file when the init exits.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncReadExt;

use super::spare::{self, SpareSlot, Spawned};
use crate::error::{Error, ErrorKind, Result};
use crate::monitor::args::MonitorArgs;

/// The longest sync message kept (the rest of a longer one is read and dropped).
const SYNC_MAX: usize = 64 << 10;
/// The most of the monitor's stderr kept for an error message (the rest is read and dropped).
const STDERR_MAX: usize = 4 << 10;
/// How long the pipes may stay open after the spawned process exited (a forked monitor closes
/// its copy of stderr at once).
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// A monitor to start: its arguments and how the daemon runs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorLaunch {
    /// The `bosun` binary to run as `<program> monitor …`; `None`: the current executable.
    pub program: Option<PathBuf>,
    /// The arguments after `monitor` (paths absolute; see the monitor's interface).
    pub args: MonitorArgs,
    /// How long to wait for the monitor's report (it includes `runc run`).
    pub timeout: Duration,
}

impl MonitorLaunch {
    /// `args` run by the current executable, with a 60 s report timeout.
    pub fn new(args: MonitorArgs) -> Self {
        MonitorLaunch {
            program: None,
            args,
            timeout: Duration::from_secs(60),
        }
    }
}

/// A monitor that started its container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct Launched {
    /// The monitor's pid (not our child).
    pub monitor_pid: i32,
    /// The container init's host pid.
    pub init_pid: i32,
}

/// Spawns the monitor for `launch.args.id`, reaps the process that forks it, and returns the
/// pids it reports; errors carry the monitor's message and name the container.
pub async fn launch_monitor(launch: &MonitorLaunch) -> Result<Launched> {
    launch_with(launch, None).await
}

/// [`launch_monitor`], through the spare in `slot` when it has one (see [`SpareSlot`]). The
/// slot is not refilled here: the caller does it ([`restock`]) once its start is done, so the
/// next spare's exec and start-up take no CPU from this start.
pub async fn launch_with(
    launch: &MonitorLaunch,
    slot: Option<&Arc<SpareSlot>>,
) -> Result<Launched> {
    let program = monitor_program(launch)?;
    let argv = launch.args.to_argv();
    // posix_spawn, not fork: nothing of the daemon is copied (issue 13).
    let spawned = match slot {
        Some(slot) => slot.spawn(&program, &argv),
        None => spare::spawn_monitor(&program, &argv),
    };
    report(launch, &program, spawned).await
}

/// Makes the next spare in `slot` in the background for launches like `launch`.
pub fn restock(launch: &MonitorLaunch, slot: &Arc<SpareSlot>) {
    match monitor_program(launch) {
        Ok(program) => slot.refill_later(&program),
        Err(e) => tracing::warn!("no spare monitor: {e}"),
    }
}

/// The binary run as `monitor`: the configured one, else this executable.
fn monitor_program(launch: &MonitorLaunch) -> Result<PathBuf> {
    match &launch.program {
        Some(p) => Ok(p.clone()),
        None => std::env::current_exe().map_err(|e| {
            start_error(
                &launch.args.id,
                ErrorKind::Internal,
                format!("current executable: {e}"),
            )
        }),
    }
}

/// The report of the monitor `spawned` for `launch.args.id`.
async fn report(
    launch: &MonitorLaunch,
    program: &Path,
    spawned: std::io::Result<Spawned>,
) -> Result<Launched> {
    let fail = |kind: ErrorKind, msg: String| start_error(&launch.args.id, kind, msg);
    let Spawned {
        mut child,
        sync: read,
        stderr: err_read,
    } = spawned.map_err(|e| {
        fail(
            ErrorKind::Internal,
            format!("spawn {}: {e}", program.display()),
        )
    })?;
    // The monitor goes on without us from here: a crash now is settled at recovery.
    crate::failpoint!("container.start.monitor-spawned");
    // Both pipes are read while the process runs: a monitor that fails with a message longer
    // than a pipe buffer would otherwise block writing it while we wait for its exit (issue 16
    // item 7: CreateContainer stuck for the whole timeout with the pod's locks held).
    let err_pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(err_read).ok();
    let mut stderr = Box::pin(read_bounded(err_pipe, STDERR_MAX));
    let mut sync = Box::pin(read_line(read));
    let work = async {
        let (mut err_text, mut sync_line) = (None, None);
        // The spawned process forks the monitor and exits; a spare did so beforehand, and then
        // the sync pipe alone tells: a report, or its end without one.
        let mut forked = child.is_none();
        let failed = loop {
            if forked && sync_line.is_some() {
                break None;
            }
            tokio::select! {
                st = wait_spawned(&mut child), if !forked => {
                    let st = st?;
                    if !st.success() {
                        break Some(st.to_string());
                    }
                    forked = true;
                }
                e = &mut stderr, if err_text.is_none() => err_text = Some(e),
                s = &mut sync, if sync_line.is_none() => sync_line = Some(s),
            }
        };
        let line = sync_line.map(|s| s.unwrap_or_default());
        // A spare ends its sync pipe without a report only when it failed: its stderr says why.
        let lost = child.is_none() && line.as_deref().is_some_and(|l| l.trim().is_empty());
        match (failed, line) {
            (None, Some(line)) if !lost => Ok::<_, std::io::Error>(Ok(line)),
            (failed, line) => {
                // The process is gone; its stderr (and maybe the pipe) has the reason.
                let err = match err_text {
                    Some(e) => e,
                    None => tokio::time::timeout(PIPE_GRACE, stderr)
                        .await
                        .unwrap_or_default(),
                };
                let sync = match line {
                    Some(s) => s,
                    None => tokio::time::timeout(PIPE_GRACE, sync)
                        .await
                        .unwrap_or(Ok(String::new()))
                        .unwrap_or_default(),
                };
                let status = failed.unwrap_or_else(|| "ended without a report".to_string());
                Ok(Err((status, err, sync)))
            }
        }
    };
    let outcome = tokio::time::timeout(launch.timeout, work)
        .await
        .map_err(|_| {
            fail(
                ErrorKind::DeadlineExceeded,
                format!("no report in {:?}", launch.timeout),
            )
        })?
        .map_err(|e| fail(ErrorKind::Internal, e.to_string()))?;
    let line = match outcome {
        Ok(line) => line,
        Err((status, stderr, sync)) => {
            if let Some(msg) = sync_error(&sync) {
                return Err(reported_error(&launch.args.id, msg));
            }
            let stderr = stderr.trim();
            let stderr = stderr.strip_prefix("bosun monitor: ").unwrap_or(stderr);
            let msg = if stderr.is_empty() {
                status
            } else {
                format!("{status}: {stderr}")
            };
            return Err(fail(failure_kind(&msg), msg));
        }
    };
    if let Some(msg) = sync_error(&line) {
        return Err(reported_error(&launch.args.id, msg));
    }
    serde_json::from_str::<Launched>(line.trim()).map_err(|e| {
        let msg = if line.is_empty() {
            "the monitor closed the sync pipe without a report".to_string()
        } else {
            format!("bad report {line:?}: {e}")
        };
        fail(ErrorKind::Internal, msg)
    })
}

/// The kind of a failed start as the monitor reported it: FailedPrecondition when runc could
/// not start the container's own process (its executable missing or not executable in the
/// image, its working directory unusable): the caller's container cannot run as configured,
/// and the same call fails the same way again. Internal for anything else (runc, the node).
fn failure_kind(msg: &str) -> ErrorKind {
    const PROCESS: [&str; 3] = [
        "unable to start container process: exec: ",
        "exec format error",
        "set in config.json failed",
    ];
    if PROCESS.iter().any(|p| msg.contains(p)) {
        ErrorKind::FailedPrecondition
    } else {
        ErrorKind::Internal
    }
}

/// A failed start of container `id`'s monitor.
fn start_error(id: &str, kind: ErrorKind, msg: String) -> Error {
    Error::new(kind, format!("container {id}: start monitor: {msg}"))
}

/// A failed start that the monitor reported (runc's error, or the monitor's own set-up): the
/// message says what failed, so it is not put down to the monitor (a missing executable in the
/// image read `start monitor: runc run failed: … exec: "/x": … no such file`).
fn reported_error(id: &str, msg: String) -> Error {
    Error::new(failure_kind(&msg), format!("container {id}: start: {msg}"))
}

/// The exit of the process we spawned; never resolves when there is none (a spare's).
async fn wait_spawned(
    child: &mut Option<crate::sys::vfork::Child>,
) -> std::io::Result<std::process::ExitStatus> {
    match child {
        Some(c) => c.wait().await,
        None => std::future::pending().await,
    }
}

/// The `error` of a `{"error": …}` sync message.
fn sync_error(line: &str) -> Option<String> {
    #[derive(Deserialize)]
    struct Failed {
        error: String,
    }
    serde_json::from_str::<Failed>(line.trim())
        .ok()
        .map(|f| f.error)
}

/// Reads one line (up to a newline or EOF) from the pipe's read end, keeping at most
/// [`SYNC_MAX`] bytes of it: the rest of an overlong line is read and dropped, so the writer
/// never blocks on us.
async fn read_line(fd: OwnedFd) -> std::io::Result<String> {
    let mut pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = pipe.read(&mut chunk).await?;
        let got = &chunk[..n];
        let line_end = got.iter().position(|&b| b == b'\n');
        let take = line_end
            .unwrap_or(n)
            .min(SYNC_MAX.saturating_sub(buf.len()));
        buf.extend_from_slice(&got[..take]);
        if n == 0 || line_end.is_some() {
            break;
        }
    }
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

/// Reads `pipe` to EOF, keeping its first `max` bytes (lossy UTF-8) and dropping the rest.
async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(pipe: Option<R>, max: usize) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    while let Ok(n) = pipe.read(&mut chunk).await {
        if n == 0 {
            break;
        }
        let take = n.min(max.saturating_sub(buf.len()));
        buf.extend_from_slice(&chunk[..take]);
    }
    String::from_utf8_lossy(&buf).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in for `bosun` running `body` as a shell script.
    fn program(dir: &Path, body: &str) -> MonitorLaunch {
        let path = dir.join("fake-bosun");
        crate::testutil::script(&path, &format!("#!/bin/sh\n{body}\n"));
        let args = MonitorArgs::new("c1", "/b", "runc", "/r", "/l", dir.join("exit"));
        MonitorLaunch {
            program: Some(path),
            timeout: Duration::from_secs(5),
            ..MonitorLaunch::new(args)
        }
    }

    #[tokio::test]
    async fn reports_the_pids_from_fd_3() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"[ "$1 $2 $3" = "monitor --id c1" ] || exit 9
echo '{"monitor_pid": 11, "init_pid": 22}' >&3"#;
        let got = launch_monitor(&program(dir.path(), script)).await;
        let want = Launched {
            monitor_pid: 11,
            init_pid: 22,
        };
        assert_eq!(got, Ok(want));
    }

    #[tokio::test]
    async fn a_process_that_cannot_start_is_the_callers_precondition() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exec = r#"runc run failed: unable to start container process: exec: \"/nope\": stat /nope: no such file or directory"#;
        let launch = program(dir.path(), &format!("echo '{{\"error\": \"{exec}\"}}' >&3"));
        let e = launch_monitor(&launch).await.expect_err("error");
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
        assert!(e.to_string().contains("/nope"), "{e}");
        for (msg, kind) in [
            (
                r#"unable to start container process: exec: "sh": executable file not found in $PATH"#,
                ErrorKind::FailedPrecondition,
            ),
            (
                "unable to start container process: exec: \"/etc/passwd\": permission denied",
                ErrorKind::FailedPrecondition,
            ),
            (
                "exec /bin/x: exec format error",
                ErrorKind::FailedPrecondition,
            ),
            (
                r#"chdir to cwd ("/etc/passwd") set in config.json failed: not a directory"#,
                ErrorKind::FailedPrecondition,
            ),
            (
                "runc create: cgroup: permission denied",
                ErrorKind::Internal,
            ),
            ("ended without a report", ErrorKind::Internal),
        ] {
            assert_eq!(failure_kind(msg), kind, "{msg}");
        }
    }

    #[tokio::test]
    async fn errors_name_the_container() {
        let dir = tempfile::tempdir().expect("tempdir");
        let launch = program(dir.path(), r#"echo '{"error": "runc create: boom"}' >&3"#);
        let e = launch_monitor(&launch).await.expect_err("error");
        assert_eq!(e.to_string(), "container c1: start: runc create: boom");
        let launch = program(dir.path(), "echo 'bosun monitor: bad flag' >&2; exit 2");
        let e = launch_monitor(&launch).await.expect_err("error");
        assert!(e.to_string().ends_with("exit status: 2: bad flag"), "{e}");
        let launch = program(dir.path(), "exit 0");
        let e = launch_monitor(&launch).await.expect_err("error");
        assert!(e.to_string().contains("without a report"), "{e}");
        let mut launch = program(dir.path(), "exec sleep 5 3>&-");
        launch.timeout = Duration::from_millis(300);
        let e = launch_monitor(&launch).await.expect_err("timeout");
        assert_eq!(e.kind(), ErrorKind::DeadlineExceeded, "{e}");
    }

    /// Issue 16 item 7: a monitor failing with a message far longer than a pipe buffer, on
    /// stderr or on the sync pipe, is read while it runs: the error comes at once, bounded.
    #[tokio::test]
    async fn a_long_failure_message_neither_blocks_nor_floods() {
        let dir = tempfile::tempdir().expect("tempdir");
        // Cut short at the bound, a report is unreadable: the monitor's own failure.
        for script in [
            // 256 KiB on stderr, then exit 1 (what a 64 KiB log path made the monitor say).
            "head -c 262144 /dev/zero | tr '\\0' x >&2; exit 1",
            // A 256 KiB `{"error": …}` on the sync pipe, then exit 1.
            "printf '{\"error\": \"' >&3; head -c 262144 /dev/zero | tr '\\0' y >&3; \
             printf '\"}\\n' >&3; exit 1",
            // The same after the fork: the report is all that is read.
            "(printf '{\"error\": \"' >&3; head -c 262144 /dev/zero | tr '\\0' z >&3; \
             printf '\"}\\n' >&3) & exit 0",
        ] {
            let mut run = program(dir.path(), script);
            run.timeout = Duration::from_secs(20);
            let t = std::time::Instant::now();
            let e = launch_monitor(&run).await.expect_err("the monitor failed");
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "{:?}: {script}",
                t.elapsed()
            );
            assert_eq!(e.kind(), ErrorKind::Internal, "{script}: {e}");
            assert!(
                e.message().len() <= SYNC_MAX + 256,
                "{} bytes",
                e.message().len()
            );
            assert!(
                e.message().starts_with("container c1: start monitor: "),
                "{script}"
            );
        }
    }

    /// A spare forks away before its container comes, so its report (or failure) comes on
    /// the pipes alone: the launch must neither wait for a status nor lose stderr's reason.
    #[tokio::test]
    async fn a_spare_reports_on_its_pipes_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = r#"if [ "$2" = --standby ]; then
  ( args=$(tr '\0' ' ' <&4)
    case "$args" in
      "") exit 0 ;;
      *"--id ok "*) echo '{"monitor_pid": 11, "init_pid": 22}' >&3 ;;
      *"--id silent "*) exit 0 ;;
      *) echo "bosun monitor: spare says no to $args" >&2; exit 2 ;;
    esac ) &
  exit 0
fi
echo '{"monitor_pid": 1, "init_pid": 2}' >&3"#;
        let slot = Arc::new(SpareSlot::default());
        let mut launch = program(dir.path(), script);
        launch.args.id = "ok".into();
        let cold = launch_with(&launch, Some(&slot)).await;
        assert_eq!(cold.map(|l| l.monitor_pid), Ok(1), "no spare yet: spawned");
        assert!(!slot.is_full(), "a launch does not refill the slot itself");
        // The next spare is made in the background once asked for.
        let stock = launch.clone();
        let ready = || async {
            restock(&stock, &slot);
            for _ in 0..500 {
                if slot.is_full() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("no spare made after a launch");
        };
        ready().await;
        let spared = launch_with(&launch, Some(&slot)).await;
        assert_eq!(spared.map(|l| l.monitor_pid), Ok(11), "through the spare");
        ready().await;
        launch.args.id = "bad".into();
        let e = launch_with(&launch, Some(&slot))
            .await
            .expect_err("the spare failed");
        assert_eq!(e.kind(), ErrorKind::Internal, "{e}");
        assert!(
            e.message().starts_with(
                "container bad: start monitor: ended without a report: spare says no to --id bad"
            ),
            "{e}"
        );
        ready().await;
        launch.args.id = "silent".into();
        let e = launch_with(&launch, Some(&slot))
            .await
            .expect_err("the spare failed");
        assert_eq!(
            e.message(),
            "container silent: start monitor: ended without a report",
            "{e}"
        );
    }
}
