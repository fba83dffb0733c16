//! The monitor's signals (SIGCHLD, SIGUSR1) as a readable descriptor: a blocked mask + signalfd.
#![allow(unsafe_code)]

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use super::error::{Error, Result};

/// Which of our signals arrived since the last read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Arrived {
    /// A child changed state: reap.
    pub child: bool,
    /// Log rotation: reopen the log file.
    pub reopen_log: bool,
}

/// SIGCHLD and SIGUSR1 blocked and delivered through a non-blocking signalfd. A blocked mask
/// survives fork and exec: children must be started through [`reset_in_child`].
#[derive(Debug)]
pub struct Signals {
    fd: OwnedFd,
}

/// The size of `struct signalfd_siginfo`.
const SIGINFO_SIZE: usize = 128;

impl Signals {
    /// Sets SIGCHLD and SIGUSR1 to their default action (an inherited SIG_IGN on SIGCHLD
    /// would make the kernel reap our children itself), blocks them and opens the signalfd.
    pub fn new() -> Result<Self> {
        for sig in [libc::SIGCHLD, libc::SIGUSR1] {
            // SAFETY: SIG_DFL installs no handler code.
            if unsafe { libc::signal(sig, libc::SIG_DFL) } == libc::SIG_ERR {
                return Err(Error::msg(format!("reset signal {sig}")));
            }
        }
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set; sigaddset/sigprocmask/signalfd get a
        // pointer to that initialised set, which outlives the calls.
        let fd = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            libc::sigaddset(set.as_mut_ptr(), libc::SIGCHLD);
            libc::sigaddset(set.as_mut_ptr(), libc::SIGUSR1);
            if libc::sigprocmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(Error::msg(format!(
                    "block signals: {}",
                    std::io::Error::last_os_error()
                )));
            }
            libc::signalfd(-1, set.as_ptr(), libc::SFD_CLOEXEC | libc::SFD_NONBLOCK)
        };
        if fd < 0 {
            return Err(Error::msg(format!(
                "signalfd: {}",
                std::io::Error::last_os_error()
            )));
        }
        // SAFETY: signalfd returned a new descriptor that nothing else owns.
        Ok(Signals {
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
    }

    /// Reads every queued signal without blocking.
    pub fn read(&self) -> Arrived {
        let mut arrived = Arrived::default();
        let mut buf = [0u8; SIGINFO_SIZE * 8];
        while let Ok(n) = rustix::io::read(&self.fd, &mut buf) {
            if n == 0 {
                break;
            }
            for info in buf[..n].chunks_exact(SIGINFO_SIZE) {
                // ssi_signo is the first u32 of struct signalfd_siginfo.
                let signo = u32::from_ne_bytes([info[0], info[1], info[2], info[3]]) as i32;
                match signo {
                    libc::SIGCHLD => arrived.child = true,
                    libc::SIGUSR1 => arrived.reopen_log = true,
                    _ => {}
                }
            }
        }
        arrived
    }
}

impl AsFd for Signals {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Makes `cmd`'s child start with no blocked signal and every disposition at its default:
/// otherwise runc, and through it the container's init, would inherit our blocked
/// SIGUSR1/SIGCHLD, our ignored SIGPIPE, and the SIG_IGN that glibc's `posix_spawn` leaves on
/// its internal signals 32 and 33 in the processes it starts (seen in containers: SigIgn bit 31).
pub fn reset_in_child(cmd: &mut Command) {
    // SAFETY: the closure runs between fork and exec and makes only raw rt_sigaction and
    // sigprocmask calls, which are async-signal-safe; it touches no Rust state.
    unsafe {
        cmd.pre_exec(|| {
            // An all-zero kernel `struct sigaction` is SIG_DFL with no flags and an empty mask
            // whatever the architecture's field order; the buffer is larger than any layout.
            let default_action = [0u64; 8];
            for sig in 1..=64 {
                // glibc's sigaction refuses 32 and 33, hence the raw syscall; SIGKILL and
                // SIGSTOP fail with EINVAL, which is fine.
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    sig,
                    default_action.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
            }
            let mut set = MaybeUninit::<libc::sigset_t>::uninit();
            libc::sigemptyset(set.as_mut_ptr());
            if libc::sigprocmask(libc::SIG_SETMASK, set.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}
