//! Streaming `runc exec` for interactive sessions: pipes, or a terminal that runc relays.
//!
//! runc accepts `--console-socket` only together with `--detach`, and a detached exec'd
//! process is no child of anyone we can wait on (its exit code would be lost; the daemon must
//! not become a subreaper: monitors would turn into its zombies). So a terminal exec runs
//! runc in the foreground with the slave of a pty of ours as its stdio: runc allocates the
//! container's terminal, receives its master over its own socketpair, puts our slave into raw
//! mode and relays both ways, copies the slave's size to the container's terminal at start
//! and on SIGWINCH, and exits with the process's code (128+signal when signalled). We keep
//! the master: output, input and the size.
//!
//! Without a terminal runc hands our pipes straight to the process. Streams not asked for
//! are /dev/null.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;

use rustix::fs::OFlags;
use rustix::pipe::{pipe_with, PipeFlags};
use rustix::termios::Winsize;

use super::command::{json_error, kind_of};
use super::exec::code_of;
pub use super::exec_kill::ExecKiller;
use super::exec_kill::TmpDir;
use super::Runc;
use crate::error::{Error, ErrorKind, Result};
use crate::sys::CommandExt;

/// The streams of a streaming exec.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ExecStdio {
    /// A terminal: one output (`terminal`), stdin through it when asked.
    pub tty: bool,
    /// A stdin the caller writes.
    pub stdin: bool,
    /// A stdout the caller reads (without a terminal).
    pub stdout: bool,
    /// A stderr the caller reads (without a terminal).
    pub stderr: bool,
}

/// A running `runc exec`. Dropped before [`ExecProcess::wait`] returned, it kills the exec'd
/// process (its whole process group) and runc.
pub struct ExecProcess {
    /// The write end of the process's stdin (no terminal, stdin asked).
    pub stdin: Option<OwnedFd>,
    /// The read end of its stdout (no terminal, stdout asked).
    pub stdout: Option<OwnedFd>,
    /// The read end of its stderr (no terminal, stderr asked).
    pub stderr: Option<OwnedFd>,
    /// The terminal's master (terminal only): read output, write input, set the size.
    pub terminal: Option<OwnedFd>,
    id: String,
    child: tokio::process::Child,
    kill: ExecKiller,
    log: PathBuf,
    reaped: bool,
}

impl ExecProcess {
    /// A handle that kills the exec (or signals a resize) without owning it.
    pub fn killer(&self) -> ExecKiller {
        self.kill.clone()
    }

    /// Waits for runc to exit: the process's exit code (128+signal when signalled), or
    /// runc's own failure (the container is gone, the executable does not exist).
    pub async fn wait(&mut self) -> Result<i32> {
        let status =
            self.child.wait().await.map_err(|e| {
                Error::internal(format!("container {}: runc exec: wait: {e}", self.id))
            })?;
        // Not before: the group id (runc's pid) may be reused once runc is reaped.
        self.reaped = true;
        let code = code_of(status);
        if code == 255 {
            if let Some(msg) = std::fs::read(&self.log).ok().and_then(|l| json_error(&l)) {
                return Err(Error::new(
                    kind_of(&msg),
                    format!("container {}: runc exec: {msg}", self.id),
                ));
            }
        }
        Ok(code)
    }
}

impl Drop for ExecProcess {
    fn drop(&mut self) {
        if !self.reaped {
            // A no-op if runc already exited (the process ended and was reaped).
            self.kill.kill();
        }
    }
}

/// Sets `size` on a terminal master (the slave side sees it).
pub fn set_size(master: impl AsFd, width: u16, height: u16) -> Result<()> {
    let ws = Winsize {
        ws_row: height,
        ws_col: width,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    rustix::termios::tcsetwinsize(master, ws)
        .map_err(|e| Error::internal(format!("set terminal size: {e}")))
}

/// A pty pair: the master (non-blocking, ours) and the slave in raw mode (runc's stdio).
fn open_pty() -> std::io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pty::{grantpt, openpt, ptsname, unlockpt, OpenptFlags};
    let master = openpt(OpenptFlags::RDWR | OpenptFlags::NOCTTY | OpenptFlags::CLOEXEC)?;
    grantpt(&master)?;
    unlockpt(&master)?;
    let name = ptsname(&master, Vec::new())?;
    let slave = rustix::fs::open(
        name.as_c_str(),
        OFlags::RDWR | OFlags::NOCTTY | OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )?;
    // Raw from the start: input written before runc switches it must not be echoed back.
    let mut t = rustix::termios::tcgetattr(&slave)?;
    t.make_raw();
    rustix::termios::tcsetattr(&slave, rustix::termios::OptionalActions::Now, &t)?;
    let flags = rustix::fs::fcntl_getfl(&master)?;
    rustix::fs::fcntl_setfl(&master, flags | OFlags::NONBLOCK)?;
    Ok((master, slave))
}

/// A pipe: `(ours, runc's)`; ours is the read end unless `ours_writes`.
fn pipe(ours_writes: bool) -> std::io::Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_with(PipeFlags::CLOEXEC)?;
    Ok(if ours_writes { (w, r) } else { (r, w) })
}

/// Starts `process` in container `id` with the streams `stdio` asks for (see the module
/// docs); `size` is the terminal's initial size when known.
pub(crate) async fn start(
    runc: &Runc,
    id: &str,
    process: &oci_spec::runtime::Process,
    stdio: ExecStdio,
    size: Option<(u16, u16)>,
) -> Result<ExecProcess> {
    let fail = |msg: String| {
        Error::new(
            ErrorKind::Internal,
            format!("container {id}: runc exec: {msg}"),
        )
    };
    let suffix: u64 = rand::random();
    let tmp = Arc::new(TmpDir(
        runc.tmp_dir.join(format!("bosun-exec-{id}-{suffix:016x}")),
    ));
    std::fs::create_dir_all(&tmp.0)
        .map_err(|e| fail(format!("create {}: {e}", tmp.0.display())))?;
    let (spec, pid_file, log) = (
        tmp.0.join("process.json"),
        tmp.0.join("pid"),
        tmp.0.join("runc.log"),
    );
    let mut process = process.clone();
    process.set_terminal(Some(stdio.tty));
    process.set_console_size(None);
    let json = serde_json::to_vec(&process)?;
    std::fs::write(&spec, json).map_err(|e| fail(format!("write process.json: {e}")))?;

    let mut cmd = runc.command(Some(&log));
    cmd.arg("exec")
        .arg("--process")
        .arg(&spec)
        .arg("--pid-file")
        .arg(&pid_file)
        .arg(id)
        .new_process_group();
    let (mut stdin, mut stdout, mut stderr, mut terminal) = (None, None, None, None);
    if stdio.tty {
        let (master, slave) = open_pty().map_err(|e| fail(format!("open a pty: {e}")))?;
        if let Some((w, h)) = size {
            set_size(&master, w, h)?;
        }
        let dup = |fd: &OwnedFd| fd.try_clone().map_err(|e| fail(format!("dup pty: {e}")));
        cmd.stdin(Stdio::from(dup(&slave)?))
            .stdout(Stdio::from(dup(&slave)?))
            .stderr(Stdio::from(slave));
        terminal = Some(master);
    } else {
        let io = |e: std::io::Error| fail(format!("pipe: {e}"));
        cmd.stdin(if stdio.stdin {
            let (ours, theirs) = pipe(true).map_err(io)?;
            stdin = Some(ours);
            Stdio::from(theirs)
        } else {
            Stdio::null()
        });
        cmd.stdout(if stdio.stdout {
            let (ours, theirs) = pipe(false).map_err(io)?;
            stdout = Some(ours);
            Stdio::from(theirs)
        } else {
            Stdio::null()
        });
        cmd.stderr(if stdio.stderr {
            let (ours, theirs) = pipe(false).map_err(io)?;
            stderr = Some(ours);
            Stdio::from(theirs)
        } else {
            Stdio::null()
        });
    }
    // No kill_on_drop: runc must outlive a dropped exec until its process is named and
    // killed (see [`ExecKiller`]), which then kills runc too.
    let mut tokio_cmd = tokio::process::Command::from(cmd);
    let child = tokio_cmd
        .spawn()
        .map_err(|e| fail(format!("spawn {}: {e}", runc.binary.display())))?;
    // Dropping the command closed our copies of runc's ends: EOF reaches us when runc (or the
    // process) is done with them.
    drop(tokio_cmd);
    let kill = ExecKiller::new(tmp, pid_file, &child);
    Ok(ExecProcess {
        stdin,
        stdout,
        stderr,
        terminal,
        id: id.to_string(),
        child,
        kill,
        log,
        reaped: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustix::event::{PollFd, PollFlags};

    /// A stand-in runc: records its pid as the exec'd process's, then runs `body`.
    fn fake_runc(dir: &std::path::Path, body: &str) -> Runc {
        let script = dir.join("runc");
        crate::testutil::script(
            &script,
            &format!(
                "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --pid-file ] && pf=$2; shift; done\necho $$ > \"$pf\"\n{body}\n"
            ),
        );
        let mut runc = Runc::new(&script, dir.join("root"));
        runc.tmp_dir = dir.join("tmp");
        runc
    }

    fn process() -> oci_spec::runtime::Process {
        oci_spec::runtime::Process::default()
    }

    #[tokio::test]
    async fn pipes_carry_stdin_and_stdout_and_the_exit_code() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runc = fake_runc(dir.path(), "cat; echo err >&2; exit 3");
        let stdio = ExecStdio {
            stdin: true,
            stdout: true,
            ..Default::default()
        };
        let mut p = start(&runc, "c1", &process(), stdio, None)
            .await
            .expect("start");
        assert!(
            p.stderr.is_none() && p.terminal.is_none(),
            "unasked streams"
        );
        let stdin = p.stdin.take().expect("stdin");
        rustix::io::write(&stdin, b"through\n").expect("write");
        drop(stdin);
        let stdout = p.stdout.take().expect("stdout");
        let mut out = Vec::new();
        std::io::Read::read_to_end(&mut std::fs::File::from(stdout), &mut out).expect("read");
        assert_eq!(out, b"through\n");
        assert_eq!(p.wait().await.expect("wait"), 3);
        drop(p);
        assert_eq!(
            std::fs::read_dir(dir.path().join("tmp"))
                .expect("tmp")
                .count(),
            0,
            "temporary files removed"
        );
    }

    #[tokio::test]
    async fn dropping_a_running_exec_kills_it_and_a_finished_one_is_left_alone() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runc = fake_runc(dir.path(), "exec sleep 1000");
        let p = start(&runc, "c1", &process(), ExecStdio::default(), None)
            .await
            .expect("start");
        let killer = p.killer();
        let mut pid = None;
        for _ in 0..100 {
            pid = killer.pid();
            if pid.is_some() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let pid = pid.expect("pid file written");
        let fd = rustix::process::pidfd_open(
            rustix::process::Pid::from_raw(pid).expect("pid"),
            rustix::process::PidfdFlags::empty(),
        )
        .expect("pidfd");
        assert!(killer.runc_running());
        drop(p);
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let second = rustix::event::Timespec {
            tv_sec: 5,
            tv_nsec: 0,
        };
        assert_eq!(
            rustix::event::poll(&mut fds, Some(&second)).expect("poll"),
            1,
            "killed"
        );

        let runc = fake_runc(dir.path(), "exit 0");
        let mut p = start(&runc, "c1", &process(), ExecStdio::default(), None)
            .await
            .expect("start");
        assert_eq!(p.wait().await.expect("wait"), 0);
        assert!(
            !p.killer().runc_running(),
            "a finished exec is never signalled"
        );
    }
}
