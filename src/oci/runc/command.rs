//! The OCI runtime behind a trait (DESIGN rule 3): [`OciRuntime`], its real implementation [`Runc`] (a wrapper around the `runc` command line) and the shared result types.
//!
//! Every invocation is `runc --root R --log-format json [--log FILE] <cmd> …`, spawned with
//! default signal dispositions and an empty mask ([`crate::sys::CommandExt`]). Failures carry
//! runc's own message and the container: `container <id>: runc kill: <message>`.

use std::ffi::OsString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Deserialize;
use tokio::io::AsyncWriteExt;

use crate::error::{Error, ErrorKind, Result};
use crate::sys::CommandExt;

/// The most ExecSync keeps of each of stdout and stderr (CRI: the rest is dropped).
pub const EXEC_OUTPUT_CAP: usize = 16 << 20;

/// The name runc's init carries until it execs the container's process.
const RUNC_INIT_COMM: &str = "runc:[2:INIT]";
/// How long [`wait_exec`] waits at most.
const EXEC_WAIT: Duration = Duration::from_secs(2);

/// Waits (at most 2 s) until process `pid`, a container's init released by `<runtime> start`
/// (or `run --detach`), has exec'd the container's process (or is gone). The runtime returns
/// once the init is released, before that exec: a stop signal sent in between reaches the
/// runtime's own code, which loses it or exits 2, never the container's process (seen with
/// runc 1 in 40 starts here). `runtime` is the handler's binary (absolute).
pub async fn wait_exec(pid: u32, runtime: &Path) {
    let runtime = std::fs::metadata(runtime).ok().map(|m| (m.dev(), m.ino()));
    let deadline = tokio::time::Instant::now() + EXEC_WAIT;
    // A procfs read never blocks: read in place, not through tokio's blocking pool (a
    // thread hop per poll on StartContainer's path).
    while runtime_code(pid, runtime) && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether process `pid` still runs the OCI runtime's code rather than the container's:
/// runc's init names itself `runc:[2:INIT]`; crun's init (and runc's, in older versions)
/// has not renamed itself, but runs the runtime's binary (`runtime`: its device and inode)
/// or the copy of it both make in a memfd against CVE-2019-5736 (`/memfd:…`). Gone: false.
fn runtime_code(pid: u32, runtime: Option<(u64, u64)>) -> bool {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let Ok(comm) = std::fs::read(proc.join("comm")) else {
        return false;
    };
    if comm.trim_ascii_end() == RUNC_INIT_COMM.as_bytes() {
        return true;
    }
    let exe = proc.join("exe");
    if std::fs::read_link(&exe).is_ok_and(|l| l.as_os_str().as_bytes().starts_with(b"/memfd:")) {
        return true;
    }
    runtime.is_some_and(|id| std::fs::metadata(&exe).is_ok_and(|m| (m.dev(), m.ino()) == id))
}

/// What `runc state` reports about a container.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct State {
    /// `creating`, `created`, `running`, `paused` or `stopped`.
    pub status: String,
    /// The init's host pid (0 once stopped).
    pub pid: i32,
    /// The bundle directory.
    pub bundle: PathBuf,
}

/// The result of a synchronous exec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExecOutput {
    /// The exit status, or 128 + signal; meaningless when `timed_out`.
    pub exit_code: i32,
    /// Standard output, at most the requested cap.
    pub stdout: Vec<u8>,
    /// Standard error, at most the requested cap.
    pub stderr: Vec<u8>,
    /// The timeout expired and the process was killed.
    pub timed_out: bool,
}

/// The OCI runtime operations the daemon needs after the monitor has created a container.
#[tonic::async_trait]
pub trait OciRuntime: Send + Sync {
    /// `runc start`: runs the created container's process.
    async fn start(&self, id: &str) -> Result<()>;
    /// `runc kill [--all] ID SIGNAL`: signals the init, or every process with `all`.
    async fn kill(&self, id: &str, signal: i32, all: bool) -> Result<()>;
    /// `runc delete [--force]`: removes the container's runtime state (and cgroup).
    async fn delete(&self, id: &str, force: bool) -> Result<()>;
    /// `runc delete --force` of a container whose init has exited (after its exit, at
    /// removal); an implementation may do it without spawning the runtime.
    async fn delete_stopped(&self, id: &str) -> Result<()> {
        self.delete(id, true).await
    }
    /// `runc state`: `None` when the runtime does not know the container.
    async fn state(&self, id: &str) -> Result<Option<State>>;
    /// `runc update --resources -`: applies OCI `linux.resources` JSON.
    async fn update(&self, id: &str, resources: &serde_json::Value) -> Result<()>;
    /// `runc exec`: runs `process` in the container, keeping at most `cap` bytes of each
    /// output stream (the rest is read and dropped); on `timeout` the process is killed and
    /// reaped and the result says `timed_out`.
    async fn exec(
        &self,
        id: &str,
        process: &oci_spec::runtime::Process,
        timeout: Option<Duration>,
        cap: usize,
    ) -> Result<ExecOutput>;
    /// `runc checkpoint --leave-running`: CRIU dumps the running container's processes as
    /// `dump` says and leaves them running.
    async fn checkpoint(&self, id: &str, dump: &super::checkpoint::Dump) -> Result<()> {
        let _ = dump;
        Err(Error::unimplemented(format!(
            "container {id}: checkpoint is not supported by this runtime"
        )))
    }
    /// A streaming `runc exec` for an interactive session (see
    /// [`super::exec_stream`]); `size` is a terminal's initial size.
    async fn exec_stream(
        &self,
        id: &str,
        process: &oci_spec::runtime::Process,
        stdio: super::ExecStdio,
        size: Option<(u16, u16)>,
    ) -> Result<super::ExecProcess> {
        let _ = (process, stdio, size);
        Err(Error::unimplemented(format!(
            "container {id}: streaming exec is not supported by this runtime"
        )))
    }
}

/// The real runtime: the `runc` binary with its state directory.
#[derive(Debug, Clone)]
pub struct Runc {
    /// The runc binary (absolute path or a name in PATH).
    pub binary: PathBuf,
    /// runc's `--root` state directory.
    pub root: PathBuf,
    /// Where exec's temporary files (process.json, pid file, log) go.
    pub tmp_dir: PathBuf,
    /// How long a plain command (start, kill, delete, state, update) may take.
    pub command_timeout: Duration,
    /// runc's systemd cgroup driver (`--systemd-cgroup` on every command, as containerd's
    /// shim passes it): container cgroups are systemd scopes.
    pub systemd_cgroup: bool,
    /// Global options before every command (a handler's `options`).
    pub options: Vec<String>,
    /// The runtime is runc: start and the delete of a stopped container may be done
    /// in-process from runc's own state files (`fifo`, `delete`).
    pub in_process: bool,
}

impl Runc {
    /// `binary` with state under `root`; temporary files in the system temp directory.
    pub fn new(binary: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Self {
        Runc {
            binary: binary.into(),
            root: root.into(),
            tmp_dir: std::env::temp_dir(),
            command_timeout: Duration::from_secs(120),
            systemd_cgroup: false,
            options: Vec::new(),
            in_process: true,
        }
    }

    /// `runc --root R --log-format json [--log FILE]`, clean signal state, no stdin.
    pub(crate) fn command(&self, log: Option<&std::path::Path>) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.binary);
        cmd.args(&self.options)
            .arg("--root")
            .arg(&self.root)
            .arg("--log-format")
            .arg("json");
        if let Some(log) = log {
            cmd.arg("--log").arg(log);
        }
        if self.systemd_cgroup {
            cmd.arg("--systemd-cgroup");
        }
        cmd.stdin(Stdio::null()).reset_signals();
        cmd
    }

    /// Runs `runc <args>` (feeding `input` on stdin), returns stdout or an error naming `id`,
    /// the subcommand `what` and runc's message.
    pub(super) async fn run(
        &self,
        id: &str,
        what: &str,
        args: Vec<OsString>,
        input: Option<Vec<u8>>,
    ) -> Result<Vec<u8>> {
        let fail = |kind: ErrorKind, msg: String| {
            Error::new(kind, format!("container {id}: runc {what}: {msg}"))
        };
        let mut cmd = self.command(None);
        cmd.args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        if input.is_some() {
            cmd.stdin(Stdio::piped());
        }
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                fail(
                    ErrorKind::Internal,
                    format!("spawn {}: {e}", self.binary.display()),
                )
            })?;
        if let (Some(input), Some(mut stdin)) = (input, child.stdin.take()) {
            // A runc that stops reading has failed: its exit status and message say why.
            let _ = stdin.write_all(&input).await;
        }
        let out = tokio::time::timeout(self.command_timeout, child.wait_with_output())
            .await
            .map_err(|_| {
                fail(
                    ErrorKind::DeadlineExceeded,
                    format!("no answer in {:?}", self.command_timeout),
                )
            })?
            .map_err(|e| fail(ErrorKind::Internal, e.to_string()))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        let msg =
            error_message(&out.stderr).unwrap_or_else(|| format!("{} with no message", out.status));
        Err(fail(kind_of(&msg), msg))
    }
}

/// NotFound for runc's "does not exist" messages, Internal otherwise.
pub(crate) fn kind_of(msg: &str) -> ErrorKind {
    if msg.contains("does not exist") {
        ErrorKind::NotFound
    } else {
        ErrorKind::Internal
    }
}

/// runc's error from its `--log-format json` output: the last error-level `msg`, else the
/// last non-empty line.
pub(crate) fn error_message(log: &[u8]) -> Option<String> {
    json_error(log).or_else(|| {
        String::from_utf8_lossy(log)
            .lines()
            .map(str::trim)
            .rfind(|l| !l.is_empty())
            .map(str::to_string)
    })
}

/// The last error-level (`error`, `fatal`, `panic`) `msg` of runc's JSON log lines.
pub(crate) fn json_error(log: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Entry {
        #[serde(default)]
        level: String,
        #[serde(default)]
        msg: String,
    }
    String::from_utf8_lossy(log).lines().rev().find_map(|l| {
        let e: Entry = serde_json::from_str(l.trim()).ok()?;
        matches!(e.level.as_str(), "error" | "fatal" | "panic")
            .then_some(e.msg)
            .filter(|m| !m.is_empty())
    })
}

/// A single, ordinary path component (container ids become directory names under runc's root).
fn is_plain_name(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && !id.contains('/') && !id.contains('\0')
}

#[tonic::async_trait]
impl OciRuntime for Runc {
    async fn start(&self, id: &str) -> Result<()> {
        // runc's own mechanism, without starting the runc binary (see `runtime::fifo`).
        if self.in_process && is_plain_name(id) {
            let dir = self.root.join(id);
            let released = tokio::task::spawn_blocking(move || super::fifo::release(&dir)).await;
            match released {
                Ok(super::fifo::Released::Started) => return Ok(()),
                Ok(super::fifo::Released::Fallback(why)) => {
                    tracing::debug!(container = id, "start through runc: {why}")
                }
                Err(e) => tracing::debug!(container = id, "start through runc: {e}"),
            }
        }
        self.run(id, "start", vec!["start".into(), id.into()], None)
            .await
            .map(drop)
    }

    async fn kill(&self, id: &str, signal: i32, all: bool) -> Result<()> {
        let mut args: Vec<OsString> = vec!["kill".into()];
        if all {
            args.push("--all".into());
        }
        args.extend([id.into(), signal.to_string().into()]);
        self.run(id, "kill", args, None).await.map(drop)
    }

    async fn delete(&self, id: &str, force: bool) -> Result<()> {
        let mut args: Vec<OsString> = vec!["delete".into()];
        if force {
            args.push("--force".into());
        }
        args.push(id.into());
        self.run(id, "delete", args, None).await.map(drop)
    }

    async fn delete_stopped(&self, id: &str) -> Result<()> {
        // The systemd driver's cgroups are scopes only systemd (through runc) stops.
        if !self.systemd_cgroup && self.in_process {
            let (root, cid) = (self.root.clone(), id.to_string());
            let outcome =
                tokio::task::spawn_blocking(move || super::delete::delete_stopped(&root, &cid))
                    .await
                    .map_err(|e| Error::internal(format!("container {id}: delete task: {e}")))?;
            match outcome {
                super::delete::Outcome::Deleted | super::delete::Outcome::Absent => return Ok(()),
                super::delete::Outcome::NeedsRunc(why) => {
                    tracing::debug!(container = %id, "runc delete needed: {why}");
                }
            }
        }
        self.delete(id, true).await
    }

    async fn state(&self, id: &str) -> Result<Option<State>> {
        match self
            .run(id, "state", vec!["state".into(), id.into()], None)
            .await
        {
            Ok(out) => serde_json::from_slice(&out)
                .map(Some)
                .map_err(|e| Error::internal(format!("container {id}: runc state: bad JSON: {e}"))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn checkpoint(&self, id: &str, dump: &super::checkpoint::Dump) -> Result<()> {
        self.checkpoint_leave_running(id, dump).await
    }

    async fn update(&self, id: &str, resources: &serde_json::Value) -> Result<()> {
        let input = serde_json::to_vec(resources)?;
        let args = vec!["update".into(), "--resources".into(), "-".into(), id.into()];
        self.run(id, "update", args, Some(input)).await.map(drop)
    }

    async fn exec(
        &self,
        id: &str,
        process: &oci_spec::runtime::Process,
        timeout: Option<Duration>,
        cap: usize,
    ) -> Result<ExecOutput> {
        super::exec::run(self, id, process, timeout, cap).await
    }

    async fn exec_stream(
        &self,
        id: &str,
        process: &oci_spec::runtime::Process,
        stdio: super::ExecStdio,
        size: Option<(u16, u16)>,
    ) -> Result<super::ExecProcess> {
        super::exec_stream::start(self, id, process, stdio, size).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`wait_exec`] on `pid`, which execs sleep 300 ms after `t`, returns once it has.
    async fn waits_for_sleep(pid: u32, runtime: &Path, t: std::time::Instant) {
        wait_exec(pid, runtime).await;
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).expect("comm");
        assert_eq!(comm.trim_end(), "sleep", "after {:?}", t.elapsed());
        let waited = t.elapsed();
        assert!(waited >= Duration::from_millis(250), "{waited:?}");
    }

    /// A process named as runc's init that execs its real program after 300 ms: the wait
    /// returns once it has, not before.
    #[tokio::test]
    async fn the_wait_for_exec_ends_when_runc_init_has_execd() {
        let dir = tempfile::tempdir().expect("tmp");
        let init = dir.path().join(RUNC_INIT_COMM);
        crate::testutil::script(&init, "#!/bin/sh\nsleep 0.3\nexec sleep 5\n");
        let mut child = tokio::process::Command::new(&init)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let pid = child.id().expect("pid");
        let t = std::time::Instant::now();
        // As in a start: the pid is known once runc's init runs (spawn may return before the
        // exec that names it).
        let comm = format!("/proc/{pid}/comm");
        while std::fs::read(&comm).is_ok_and(|c| c.trim_ascii_end() != RUNC_INIT_COMM.as_bytes()) {
            assert!(t.elapsed() < Duration::from_secs(5), "the script never ran");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        waits_for_sleep(pid, Path::new("/nonexistent"), t).await;
        let _ = child.kill().await;
    }

    /// crun's init does not rename itself: it runs crun's binary until it execs the
    /// container's process. A copy of sh standing for the runtime that execs sleep after
    /// 300 ms: the wait returns once it has, not before.
    #[tokio::test]
    async fn the_wait_for_exec_knows_an_init_by_the_runtime_binary_it_runs() {
        let dir = tempfile::tempdir().expect("tmp");
        let runtime = dir.path().join("crun");
        std::fs::copy("/bin/sh", &runtime).expect("copy sh");
        let t = std::time::Instant::now();
        let mut child = tokio::process::Command::new(&runtime)
            .args(["-c", "sleep 0.3; exec sleep 5"])
            .kill_on_drop(true)
            .spawn()
            .expect("spawn");
        let pid = child.id().expect("pid");
        let exe = format!("/proc/{pid}/exe");
        let is_runtime = || std::fs::read_link(&exe).is_ok_and(|l| l == runtime);
        while !is_runtime() {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the runtime never ran"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        waits_for_sleep(pid, &runtime, t).await;
        let _ = child.kill().await;
        // Gone: no wait.
        let _ = child.wait().await;
        let t = std::time::Instant::now();
        wait_exec(pid, &runtime).await;
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn error_message_prefers_the_last_json_error() {
        let log = br#"{"level":"warning","msg":"ignored","time":"x"}
{"level":"error","msg":"container does not exist","time":"x"}
"#;
        let msg = error_message(log);
        assert_eq!(msg.as_deref(), Some("container does not exist"));
        assert_eq!(kind_of("container does not exist"), ErrorKind::NotFound);
        assert_eq!(
            error_message(b"plain failure\n\n").as_deref(),
            Some("plain failure")
        );
        assert_eq!(error_message(b"  \n"), None);
    }

    #[tokio::test]
    async fn failures_name_the_container_and_the_command() {
        // A fake "runc" that prints a JSON error and fails.
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("runc");
        crate::testutil::script(
            &script,
            "#!/bin/sh\necho '{\"level\":\"error\",\"msg\":\"container does not exist\"}' >&2\nexit 1\n",
        );
        let runc = Runc::new(&script, dir.path());
        let e = runc.kill("c1", 9, true).await.expect_err("kill fails");
        assert_eq!(
            e.to_string(),
            "container c1: runc kill: container does not exist"
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(runc.state("c1").await, Ok(None));
    }

    #[tokio::test]
    async fn state_parses_runc_json_and_update_feeds_stdin() {
        let dir = tempfile::tempdir().expect("tempdir");
        let script = dir.path().join("runc");
        let seen = dir.path().join("seen");
        crate::testutil::script(
            &script,
            &format!(
                "#!/bin/sh\necho \"$@\" >> {seen}\ncase \"$5\" in\n state) echo '{{\"id\":\"c1\",\"pid\":42,\"status\":\"running\",\"bundle\":\"/b\"}}';;\n update) cat >> {seen};;\nesac\n",
                seen = seen.display()
            ),
        );
        let runc = Runc::new(&script, "/r");
        let state = runc.state("c1").await.expect("state");
        let want = State {
            status: "running".into(),
            pid: 42,
            bundle: "/b".into(),
        };
        assert_eq!(state, Some(want));
        let res = serde_json::json!({"cpu": {"shares": 2}});
        runc.update("c1", &res).await.expect("update");
        let seen = std::fs::read_to_string(&seen).expect("seen");
        assert_eq!(
            seen,
            "--root /r --log-format json state c1\n\
             --root /r --log-format json update --resources - c1\n{\"cpu\":{\"shares\":2}}"
        );
    }
}
