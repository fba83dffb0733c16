//! A short-lived process that creates a user namespace (and namespaces owned by it) and holds
//! them while its parent writes the ID maps, pins or opens them; `bosun pinns --hold` is its
//! program.

use std::io::{BufRead, BufReader, Write};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use rustix::fs::{Mode, OFlags};
use rustix::thread::UnshareFlags;

use crate::error::{Error, Result, ResultExt};
use crate::sys::CommandExt;

/// A `bosun pinns --hold` child started in a new user namespace (plus `flags`), alive until
/// dropped (its stdin closes and it is reaped).
#[derive(Debug)]
pub struct NsHolder {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Option<BufReader<ChildStdout>>,
}

impl NsHolder {
    /// Starts `binary pinns --hold` in a new user namespace and the namespaces in `flags`
    /// (owned by it). With `init_dir`, the holder first starts `pod-init --dir init_dir` as
    /// PID 1 of its new pid namespace (`flags` must have NEWPID) and reports its pid.
    pub fn spawn(binary: &Path, flags: UnshareFlags, init_dir: Option<&Path>) -> Result<NsHolder> {
        let mut cmd = Command::new(binary);
        cmd.args(["pinns", "--hold"]);
        if let Some(dir) = init_dir {
            cmd.arg("--spawn-init").arg(dir);
        }
        let child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .current_dir("/")
            .reset_signals()
            .unshare(flags | UnshareFlags::NEWUSER)
            .spawn()
            .ctx(|| "start a user namespace holder")?;
        let mut h = NsHolder {
            stdin: None,
            stdout: None,
            child,
        };
        h.stdin = h.child.stdin.take();
        h.stdout = h.child.stdout.take().map(BufReader::new);
        Ok(h)
    }

    /// The holder's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Writes the user namespace's maps (`/proc/<pid>/uid_map` text, one `inside host length`
    /// line per range). Needs CAP_SETUID/CAP_SETGID here; setgroups stays allowed.
    pub fn write_maps(&self, uid_map: &str, gid_map: &str) -> Result<()> {
        for (file, text) in [("uid_map", uid_map), ("gid_map", gid_map)] {
            let path = self.proc_path(file);
            std::fs::write(&path, text).ctx(|| format!("write {}", path.display()))?;
        }
        Ok(())
    }

    /// `/proc/<pid>/<rel>`.
    pub fn proc_path(&self, rel: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{rel}", self.child.id()))
    }

    /// Opens the holder's namespace `name` (`user`, `net`, ...).
    pub fn open_ns(&self, name: &str) -> Result<OwnedFd> {
        let path = self.proc_path(&format!("ns/{name}"));
        rustix::fs::open(&path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
            .ctx(|| format!("open {}", path.display()))
    }

    /// The host pid of the `pod-init` the holder started (`--spawn-init`).
    pub fn init_pid(&mut self) -> Result<u32> {
        let mut line = String::new();
        let read = self
            .stdout
            .as_mut()
            .ok_or_else(|| Error::internal("the holder's stdout is gone"))?
            .read_line(&mut line)
            .ctx(|| "read the pid namespace holder's pid")?;
        line.trim()
            .strip_prefix("pid ")
            .and_then(|p| p.parse().ok())
            .filter(|_| read > 0)
            .ok_or_else(|| Error::internal(format!("user namespace holder said {line:?}")))
    }
}

impl Drop for NsHolder {
    fn drop(&mut self) {
        // EOF on stdin ends it; the kill covers a holder that is stuck.
        drop(self.stdin.take());
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `bosun pinns --hold [--spawn-init DIR]`: with `--spawn-init`, starts `pod-init --dir DIR`
/// (PID 1 of the pid namespace this process was started with) and prints `pid N`; then waits
/// for EOF on stdin and exits 0. Needs no privilege: its parent does the rest.
pub fn hold(init_dir: Option<&Path>) -> i32 {
    if let Some(dir) = init_dir {
        match super::init::spawn(dir) {
            Ok(child) => {
                let mut out = std::io::stdout().lock();
                if writeln!(out, "pid {}", child.id())
                    .and_then(|()| out.flush())
                    .is_err()
                {
                    return 1;
                }
            }
            Err(e) => {
                eprintln!("bosun pinns --hold: spawn pod-init: {e}");
                return 1;
            }
        }
    }
    let mut sink = Vec::new();
    let _ = std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut sink);
    0
}
