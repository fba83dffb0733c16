//! Killing a `runc exec` at any moment, including before its process has started.
//!
//! runc's nsexec makes the exec'd process a session (and group) leader, out of runc's group,
//! and runc names it only in `--pid-file`, written once the process runs. The kill is for the
//! process and everything it started ([`super::proc_tree`]), never for runc first: runc is the
//! process's parent and must live to reap it (killed together, the process would stay a zombie
//! of whichever init inherits it; issue 12). runc then exits by itself and is reaped by its
//! waiter; only a runc still running [`RUNC_EXIT_WAIT`] later is killed too. A kill that finds
//! no pid file while runc runs waits for it on a thread of its own.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};

use super::proc_tree::{kill_tree, Killed};

/// How long a kill waits for runc to name a process it is still starting.
const START_WAIT: Duration = Duration::from_secs(10);
/// How often it looks at the pid file meanwhile.
const START_POLL: Duration = Duration::from_millis(5);
/// How long runc may take to reap the killed process and exit before it is killed as well.
const RUNC_EXIT_WAIT: Duration = Duration::from_secs(5);

/// A temporary directory removed on drop.
pub(crate) struct TmpDir(pub(crate) PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// SIGKILL to `pid`, or to the process group `pid` when `group`.
pub(crate) fn kill(pid: i32, group: bool) {
    let Some(p) = rustix::process::Pid::from_raw(pid) else {
        return;
    };
    let sig = rustix::process::Signal::KILL;
    let _ = if group {
        rustix::process::kill_process_group(p, sig)
    } else {
        rustix::process::kill_process(p, sig)
    };
}

/// The pid runc wrote to `path`, if it did.
pub(crate) fn read_pid(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Kills a `runc exec` from anywhere (a timeout, the container stopped, the caller went away).
///
/// Pids are only signalled while runc runs: until then the exec'd process is alive or runc's
/// unreaped zombie, so its pid (and runc's group id) cannot belong to anyone else. runc is
/// watched through a pidfd taken while it was our unreaped child. The killer keeps the exec's
/// temporary directory (and so the pid file) alive as long as a clone of it exists. Clones
/// share one kill: the first call does it, later ones return at once.
#[derive(Clone)]
pub struct ExecKiller {
    /// Holds the pid file (and runc's log) until the last clone is gone.
    _tmp: Arc<TmpDir>,
    pid_file: PathBuf,
    runc_pid: Option<i32>,
    runc: Option<Arc<OwnedFd>>,
    /// The kill has begun.
    started: Arc<AtomicBool>,
    /// What the kill signalled, for [`ExecKiller::wait_reaped`].
    killed: Arc<Mutex<Killed>>,
}

impl std::fmt::Debug for ExecKiller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecKiller")
            .field("pid_file", &self.pid_file)
            .field("runc_pid", &self.runc_pid)
            .finish()
    }
}

impl ExecKiller {
    /// The killer of the runc `child` just spawned with `--pid-file pid_file` (inside `tmp`).
    pub(crate) fn new(tmp: Arc<TmpDir>, pid_file: PathBuf, child: &tokio::process::Child) -> Self {
        let runc_pid = child.id().and_then(|p| i32::try_from(p).ok());
        let runc = runc_pid
            .and_then(rustix::process::Pid::from_raw)
            .and_then(|p| rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok())
            .map(Arc::new);
        ExecKiller {
            _tmp: tmp,
            pid_file,
            runc_pid,
            runc,
            started: Arc::new(AtomicBool::new(false)),
            killed: Arc::default(),
        }
    }

    /// Whether runc still runs (without a pidfd: assumed).
    pub(crate) fn runc_running(&self) -> bool {
        let Some(fd) = &self.runc else {
            return true;
        };
        let mut fds = [PollFd::new(&**fd, PollFlags::IN)];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        matches!(rustix::event::poll(&mut fds, Some(&zero)), Ok(0))
    }

    /// SIGKILL to the exec'd process and everything it started, while runc runs; nothing once
    /// runc has exited or after the first call. Never blocks on runc: when runc has not named
    /// the process yet, a thread waits for it (at most [`START_WAIT`]) and kills then; a thread
    /// also kills runc if it has not exited [`RUNC_EXIT_WAIT`] after the kill.
    pub fn kill(&self) {
        if !self.runc_running() || self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let named = self.pid();
        if let Some(pid) = named {
            self.kill_process(pid);
        }
        let this = self.clone();
        let spawned = std::thread::Builder::new()
            .name("bosun-exec-kill".into())
            .spawn(move || {
                if named.is_none() {
                    this.kill_once_started();
                }
                this.kill_runc_unless_it_exits();
            });
        if spawned.is_err() {
            // No thread to wait on: runc's group at least.
            self.kill_runc();
        }
    }

    /// Waits until runc names the process or exits (bounded), then kills the process (or,
    /// never named, runc).
    fn kill_once_started(&self) {
        let until = Instant::now() + START_WAIT;
        let mut pid = self.pid();
        while pid.is_none() && Instant::now() < until {
            if !self.runc_running() {
                return;
            }
            std::thread::sleep(START_POLL);
            pid = self.pid();
        }
        if !self.runc_running() {
            return;
        }
        match pid {
            Some(pid) => self.kill_process(pid),
            None => self.kill_runc(),
        }
    }

    /// The exec'd process `pid` (still runc's unreaped child) and everything it started.
    fn kill_process(&self, pid: i32) {
        let killed = kill_tree(pid);
        tracing::debug!(
            pid,
            killed = killed.len(),
            "exec: killed the process and its tree"
        );
        *self
            .killed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = killed;
    }

    /// Gives runc [`RUNC_EXIT_WAIT`] to reap the killed process and exit; kills it after.
    fn kill_runc_unless_it_exits(&self) {
        let Some(fd) = &self.runc else {
            // Without a pidfd runc's exit cannot be told from a reused pid: leave it be.
            return;
        };
        let until = Instant::now() + RUNC_EXIT_WAIT;
        while self.runc_running() {
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                self.kill_runc();
                return;
            }
            let mut fds = [PollFd::new(&**fd, PollFlags::IN)];
            let t = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: left.min(Duration::from_millis(100)).as_nanos() as i64,
            };
            let _ = rustix::event::poll(&mut fds, Some(&t));
        }
    }

    fn kill_runc(&self) {
        if let Some(pgid) = self.runc_pid {
            if self.runc_running() {
                kill(pgid, true);
            }
        }
    }

    /// Waits (at most `limit`) until every process the kill signalled has been reaped (runc
    /// reaps the exec'd process; its orphans go to the pid namespace's init, which bosun's pod
    /// init reaps at once). `false` when some are left, e.g. zombies of a container init that
    /// never reaps (as under containerd, nothing else can reap them).
    pub async fn wait_reaped(&self, limit: Duration) -> bool {
        let killed = self
            .killed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        killed.wait_gone(limit).await
    }

    /// Tells runc the terminal's size changed (it copies it to the container's terminal).
    pub fn winch(&self) {
        if let Some(fd) = &self.runc {
            let _ = rustix::process::pidfd_send_signal(&**fd, rustix::process::Signal::WINCH);
        }
    }

    /// The exec'd process's host pid, once runc wrote it.
    pub fn pid(&self) -> Option<i32> {
        read_pid(&self.pid_file)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::time::Duration;

    use crate::oci::runc::Runc;

    /// A stand-in runc that starts its "exec'd process" in a session of its own (as nsexec
    /// does), tells the test its pid at once, and names it in the pid file only after 300 ms.
    fn slow_runc(dir: &Path) -> Runc {
        let script = dir.join("runc");
        let body = format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --pid-file ] && pf=$2; shift; done\n\
             setsid sleep 1000 &\nchild=$!\necho $child > {side}.tmp && mv {side}.tmp {side}\n\
             sleep 0.3\necho $child > \"$pf.tmp\" && mv \"$pf.tmp\" \"$pf\"\nwait\n",
            side = dir.join("side").display()
        );
        crate::testutil::script(&script, &body);
        let mut runc = Runc::new(&script, dir.join("root"));
        runc.tmp_dir = dir.join("tmp");
        runc
    }

    /// The "exec'd process" as a pidfd, once the stand-in told its pid.
    async fn exec_process(dir: &Path) -> std::os::fd::OwnedFd {
        for _ in 0..500 {
            if let Some(pid) = super::read_pid(&dir.join("side")) {
                let pid = rustix::process::Pid::from_raw(pid).expect("pid");
                return rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())
                    .expect("pidfd");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("the stand-in runc never started its process");
    }

    fn exits_within(fd: &std::os::fd::OwnedFd, secs: u64) -> bool {
        use rustix::event::{PollFd, PollFlags};
        let until = std::time::Instant::now() + Duration::from_secs(secs);
        // Retried on EINTR: the runtime's SIGCHLD handler interrupts the poll.
        while std::time::Instant::now() < until {
            let mut fds = [PollFd::new(fd, PollFlags::IN)];
            let t = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 10_000_000,
            };
            if let Ok(1) = rustix::event::poll(&mut fds, Some(&t)) {
                return true;
            }
        }
        false
    }

    async fn tmp_emptied(dir: &Path) -> bool {
        for _ in 0..200 {
            if std::fs::read_dir(dir.join("tmp")).map_or(0, |d| d.count()) == 0 {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        false
    }

    /// A stand-in runc that names its "exec'd process" at once, waits for it like runc does,
    /// and leaves a mark once it has reaped it.
    fn reaping_runc(dir: &Path) -> Runc {
        let script = dir.join("runc");
        let body = format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --pid-file ] && pf=$2; shift; done\n\
             setsid sleep 1000 &\necho $! > \"$pf.tmp\" && mv \"$pf.tmp\" \"$pf\"\n\
             wait\necho reaped > {mark}\nexit 137\n",
            mark = dir.join("mark").display()
        );
        crate::testutil::script(&script, &body);
        let mut runc = Runc::new(&script, dir.join("root"));
        runc.tmp_dir = dir.join("tmp");
        runc
    }

    /// Issue 12: runc is the exec'd process's parent; killed with it, the process would stay
    /// a zombie of whichever init inherits it. The kill leaves runc alive to reap it.
    #[tokio::test]
    async fn a_timed_out_exec_is_reaped_by_runc_which_is_not_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runc = reaping_runc(dir.path());
        let process = oci_spec::runtime::Process::default();
        let out = super::super::exec::run(
            &runc,
            "c1",
            &process,
            Some(Duration::from_millis(200)),
            1024,
        )
        .await
        .expect("exec");
        assert!(out.timed_out);
        assert_eq!(out.exit_code, 137, "runc's own exit, not a signal");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("mark"))
                .expect("mark")
                .trim(),
            "reaped",
            "runc lived to reap its child"
        );
    }

    #[tokio::test]
    async fn a_stream_exec_dropped_before_runc_names_its_process_still_kills_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runc = slow_runc(dir.path());
        let p = super::super::exec_stream::start(
            &runc,
            "c1",
            &oci_spec::runtime::Process::default(),
            super::super::ExecStdio::default(),
            None,
        )
        .await
        .expect("start");
        let process = exec_process(dir.path()).await;
        assert!(p.killer().pid().is_none(), "dropped before the pid file");
        drop(p);
        assert!(exits_within(&process, 5), "the exec'd process was killed");
        assert!(tmp_emptied(dir.path()).await, "temporary files removed");
    }

    #[tokio::test]
    async fn an_exec_sync_that_times_out_before_runc_names_its_process_still_kills_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let runc = slow_runc(dir.path());
        let process = oci_spec::runtime::Process::default();
        let run =
            super::super::exec::run(&runc, "c1", &process, Some(Duration::from_millis(20)), 1024);
        let (out, pidfd) = tokio::join!(run, exec_process(dir.path()));
        assert!(out.expect("exec").timed_out);
        assert!(exits_within(&pidfd, 5), "the exec'd process was killed");
        assert!(tmp_emptied(dir.path()).await, "temporary files removed");
    }
}
