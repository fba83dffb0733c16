//! Becoming the monitor: keep the sync fd, drop inherited fds, fork away, new session, subreaper, quiet stdio.
#![allow(unsafe_code)]

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};

use rustix::process::{getpid, set_child_subreaper, setsid};

use super::error::{Context, Error, Result};

/// Which side of the fork we are on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The process the daemon spawned: it must exit 0 now so the daemon reaps it.
    Parent,
    /// The monitor proper, no longer the daemon's child.
    Child,
}

/// Takes over the inherited sync descriptor `raw`: duplicated to a close-on-exec fd ≥ 3
/// (so the daemon may pass 0–2, and neither runc nor the container inherits it).
pub fn take_sync_fd(raw: RawFd) -> Result<OwnedFd> {
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table; any integer is acceptable.
    if raw < 0 || unsafe { libc::fcntl(raw, libc::F_GETFD) } < 0 {
        return Err(Error::msg(format!(
            "--sync-fd {raw} is not an open descriptor"
        )));
    }
    // SAFETY: `raw` was just checked to be open, and nothing closes it before the dup below.
    let borrowed = unsafe { BorrowedFd::borrow_raw(raw) };
    rustix::io::fcntl_dupfd_cloexec(borrowed, 3).context("duplicate sync fd")
}

/// Closes every descriptor ≥ 3 except `keep`: the monitor outlives the daemon and must not pin
/// whatever the daemon leaked to it (sockets, files of other containers).
pub fn close_inherited_fds(keep: Option<BorrowedFd<'_>>) -> Result<()> {
    let ranges = match keep.map(|fd| fd.as_raw_fd() as libc::c_uint) {
        Some(keep) if keep > 3 => vec![(3, keep - 1), (keep + 1, libc::c_uint::MAX)],
        Some(keep) => vec![(keep.max(2) + 1, libc::c_uint::MAX)],
        None => vec![(3, libc::c_uint::MAX)],
    };
    for (first, last) in ranges {
        // SAFETY: no OwnedFd or File of this process lies in these ranges: the only
        // descriptor we own at this point (besides 0–2) is `keep`, which is excluded.
        if unsafe { libc::close_range(first, last, 0) } != 0 {
            return Err(Error::msg(format!(
                "close inherited descriptors: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok(())
}

/// Forks once. The caller must still be single-threaded (checked): the dispatch in `main`
/// runs before any runtime or thread exists.
pub fn fork() -> Result<Side> {
    let threads = std::fs::read_dir("/proc/self/task")
        .map(|d| d.count())
        .unwrap_or(1);
    if threads != 1 {
        return Err(Error::msg(format!(
            "fork: monitor has {threads} threads, must be single-threaded"
        )));
    }
    // SAFETY: the process is single-threaded (checked above), so the child's copy of memory
    // and locks is consistent; the child continues as an ordinary process.
    match unsafe { libc::fork() } {
        -1 => Err(Error::msg(format!(
            "fork: {}",
            std::io::Error::last_os_error()
        ))),
        0 => Ok(Side::Child),
        _ => Ok(Side::Parent),
    }
}

/// [`fork`], and in the child [`new_session`]: the monitor's (or a spare's) way out of the
/// daemon's process tree.
pub fn fork_session() -> Result<Side> {
    let side = fork()?;
    if side == Side::Child {
        new_session()?;
    }
    Ok(side)
}

/// In the forked child: a session of its own (no terminal, no signals aimed at the daemon's
/// process group), the subreaper of everything the container leaves behind, cwd `/`, SIGPIPE
/// ignored (a gone daemon must not kill us on the sync pipe). A spare does this before its
/// arguments come, and [`quiet_stdio`] after.
pub fn new_session() -> Result<()> {
    setsid().context("setsid")?;
    set_child_subreaper(Some(getpid())).context("prctl(PR_SET_CHILD_SUBREAPER)")?;
    std::env::set_current_dir("/").context("chdir /")?;
    // SAFETY: setting a signal's disposition to SIG_IGN installs no handler code.
    if unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(Error::msg("ignore SIGPIPE"));
    }
    Ok(())
}

/// stdin, stdout and stderr on /dev/null: from here on failures go to the sync pipe only.
pub fn quiet_stdio() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .context("open /dev/null")?;
    rustix::stdio::dup2_stdin(&null).context("stdin to /dev/null")?;
    rustix::stdio::dup2_stdout(&null).context("stdout to /dev/null")?;
    rustix::stdio::dup2_stderr(&null).context("stderr to /dev/null")?;
    Ok(())
}
