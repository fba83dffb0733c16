//! Starting a program without copying the daemon (glibc's `posix_spawn`: `clone` with
//! `CLONE_VM|CLONE_VFORK`) and owning the child through a pidfd.
//!
//! `fork` in a multi-threaded daemon copies its page tables and makes every page it writes
//! afterwards fault once (copy-on-write); on a busy node that was milliseconds of each
//! StartContainer (issue 13). What the child needs set up is limited to what `posix_spawn`
//! can do: descriptors opened or duplicated, signals back to default, an empty mask.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;

use rustix::process::{Pid, Signal, WaitOptions};

use super::PidFd;

/// What the child gets besides the inherited environment and the parent's descriptors that
/// are not close-on-exec (the daemon opens all of its own close-on-exec).
#[derive(Debug, Default)]
pub struct Setup<'a> {
    /// Descriptor numbers opened on /dev/null (0 read-only, others write-only).
    pub null: Vec<RawFd>,
    /// `(fd, target)`: `fd` duplicated to `target`, without close-on-exec.
    pub dup: Vec<(BorrowedFd<'a>, RawFd)>,
}

/// Starts `program` (a path: no PATH search) with `args` after argv[0] = `program`; returns
/// once it has exec'd (an exec failure is this call's error). In the child every signal the
/// C library lets a caller name is back to its default action and the mask is empty; glibc's
/// own signals 32 and 33 keep the parent's disposition, so a program that forwards its
/// signal state to others must reset those itself (the monitor does, first thing).
pub fn spawn(program: &Path, args: &[OsString], setup: &Setup<'_>) -> io::Result<Child> {
    let invalid = || {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "a NUL byte in a spawn argument",
        )
    };
    let cstr = |b: &[u8]| CString::new(b).map_err(|_| invalid());
    let path = cstr(program.as_os_str().as_bytes())?;
    let mut argv_c = vec![path.clone()];
    for a in args {
        argv_c.push(cstr(a.as_bytes())?);
    }
    let env_c = std::env::vars_os()
        .map(|(k, v)| {
            let mut b = k.as_bytes().to_vec();
            b.push(b'=');
            b.extend_from_slice(v.as_bytes());
            cstr(&b)
        })
        .collect::<io::Result<Vec<_>>>()?;
    let argv = nul_terminated(&argv_c);
    let envp = nul_terminated(&env_c);
    // A source at or below some target could be overwritten by an earlier action: every
    // source is first moved above all targets (close-on-exec copies, closed here after).
    let above = setup
        .null
        .iter()
        .chain(setup.dup.iter().map(|(_, t)| t))
        .copied()
        .max()
        .unwrap_or(2)
        + 1;
    let sources = setup
        .dup
        .iter()
        .map(|(fd, _)| rustix::io::fcntl_dupfd_cloexec(fd, above).map_err(io::Error::from))
        .collect::<io::Result<Vec<OwnedFd>>>()?;
    let mut actions = FileActions::new()?;
    for &target in &setup.null {
        let flags = if target == 0 {
            libc::O_RDONLY
        } else {
            libc::O_WRONLY
        };
        actions.open_null(target, flags)?;
    }
    for (source, (_, target)) in sources.iter().zip(&setup.dup) {
        actions.dup2(source.as_raw_fd(), *target)?;
    }
    let attrs = Attributes::clean_signals()?;
    let mut pid: libc::pid_t = 0;
    // SAFETY: every pointer is valid for the call: `path` and the NUL-terminated argv/envp
    // arrays point into CStrings alive until after it; actions and attributes are initialised
    // (their guards destroy them after the call).
    let rc = unsafe {
        libc::posix_spawn(
            &mut pid,
            path.as_ptr(),
            &actions.0,
            &attrs.0,
            argv.as_ptr(),
            envp.as_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Child::adopt(pid)
}

/// The pointers of `strings`, then a null pointer (what exec takes).
fn nul_terminated(strings: &[CString]) -> Vec<*mut libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr().cast_mut())
        .chain(std::iter::once(std::ptr::null_mut()))
        .collect()
}

/// `posix_spawn_file_actions_t`, destroyed on drop.
struct FileActions(libc::posix_spawn_file_actions_t);

impl FileActions {
    fn new() -> io::Result<Self> {
        // SAFETY: an all-zero value is a valid argument for _init, which fully initialises it.
        let mut actions = FileActions(unsafe { std::mem::zeroed() });
        // SAFETY: a pointer to the value just made.
        check(unsafe { libc::posix_spawn_file_actions_init(&mut actions.0) })?;
        Ok(actions)
    }

    fn open_null(&mut self, fd: RawFd, flags: libc::c_int) -> io::Result<()> {
        // SAFETY: initialised actions; glibc copies the path.
        check(unsafe {
            libc::posix_spawn_file_actions_addopen(&mut self.0, fd, c"/dev/null".as_ptr(), flags, 0)
        })
    }

    fn dup2(&mut self, fd: RawFd, target: RawFd) -> io::Result<()> {
        // SAFETY: initialised actions and plain descriptor numbers.
        check(unsafe { libc::posix_spawn_file_actions_adddup2(&mut self.0, fd, target) })
    }
}

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised in `new` and destroyed once.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// `posix_spawnattr_t`, destroyed on drop.
struct Attributes(libc::posix_spawnattr_t);

impl Attributes {
    /// Every nameable signal to its default action, an empty mask.
    fn clean_signals() -> io::Result<Self> {
        // SAFETY: an all-zero value is a valid argument for _init, which fully initialises it.
        let mut attrs = Attributes(unsafe { std::mem::zeroed() });
        // SAFETY: pointers to initialised values owned here; sigemptyset/sigfillset fill the
        // sets before they are read.
        unsafe {
            check(libc::posix_spawnattr_init(&mut attrs.0))?;
            let mut empty: libc::sigset_t = std::mem::zeroed();
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigfillset(&mut all);
            check(libc::posix_spawnattr_setsigmask(&mut attrs.0, &empty))?;
            check(libc::posix_spawnattr_setsigdefault(&mut attrs.0, &all))?;
            let flags = libc::POSIX_SPAWN_SETSIGMASK | libc::POSIX_SPAWN_SETSIGDEF;
            check(libc::posix_spawnattr_setflags(
                &mut attrs.0,
                flags as libc::c_short,
            ))?;
        }
        Ok(attrs)
    }
}

impl Drop for Attributes {
    fn drop(&mut self) {
        // SAFETY: initialised in `clean_signals` and destroyed once.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// posix_spawn's family returns an error number instead of setting errno.
fn check(rc: libc::c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

/// A child of ours, waited for through a pidfd; killed (SIGKILL) and reaped when dropped
/// before [`Child::wait`] returned, as `kill_on_drop` would.
#[derive(Debug)]
pub struct Child {
    pid: Pid,
    pidfd: Option<PidFd>,
    reaped: bool,
}

impl Child {
    /// Takes charge of child `pid` (not yet reaped: nobody else waits for our children).
    fn adopt(pid: libc::pid_t) -> io::Result<Child> {
        let pid = Pid::from_raw(pid).ok_or_else(|| io::Error::other("posix_spawn: no pid"))?;
        let mut child = Child {
            pid,
            pidfd: None,
            reaped: false,
        };
        // On error the drop kills and reaps it.
        child.pidfd = Some(PidFd::open(pid.as_raw_nonzero().get())?);
        Ok(child)
    }

    /// The child's pid.
    pub fn id(&self) -> i32 {
        self.pid.as_raw_nonzero().get()
    }

    /// Waits for the child to exit and reaps it.
    pub async fn wait(&mut self) -> io::Result<ExitStatus> {
        if let Some(fd) = &self.pidfd {
            fd.exited().await?;
        }
        // It has exited (or we have no pidfd and block: only on the error path of `adopt`).
        let waited = rustix::process::waitpid(Some(self.pid), WaitOptions::empty())?;
        self.reaped = true;
        let raw = waited.map_or(0, |(_, status)| status.as_raw());
        Ok(ExitStatus::from_raw(raw))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if self.reaped {
            return;
        }
        let _ = rustix::process::kill_process(self.pid, Signal::KILL);
        let pid = self.pid;
        let reap = move || {
            let _ = rustix::process::waitpid(Some(pid), WaitOptions::empty());
        };
        match (self.pidfd.take(), tokio::runtime::Handle::try_current()) {
            (Some(fd), Ok(rt)) => {
                rt.spawn(async move {
                    let _ = fd.exited().await;
                    reap();
                });
            }
            // Killed: the wait is short.
            _ => reap(),
        }
    }
}

#[cfg(test)]
#[path = "vfork_tests.rs"]
mod tests;
