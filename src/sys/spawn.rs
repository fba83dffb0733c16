//! Spawning children in a clean state: default signal dispositions, an empty signal mask,
//! optionally a new process group and an inherited descriptor at a fixed number.
//!
//! glibc's `posix_spawn` (what `std::process::Command` uses when it can) leaves ignored
//! signals ignored — including its internal 32/33 — and the daemon's mask may leak into
//! children. The hooks here run in the forked child before `exec` and use only
//! async-signal-safe raw system calls.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt as _;
use std::process::Command;

/// The kernel's `struct sigaction` (x86_64, aarch64: handler, flags, restorer, 64-bit mask).
#[repr(C)]
struct KernelSigaction {
    handler: libc::sighandler_t,
    flags: libc::c_ulong,
    restorer: usize,
    mask: u64,
}

/// The highest signal number the kernel knows on the architectures we build for.
const MAX_SIGNAL: libc::c_int = 64;

/// Resets every signal to its default action and clears the mask of the calling process.
///
/// Only raw `rt_sigaction`/`rt_sigprocmask` system calls: async-signal-safe, and unlike
/// glibc's wrappers they also reach glibc's internal signals 32 and 33.
fn reset_signals_now() -> io::Result<()> {
    for sig in 1..=MAX_SIGNAL {
        if sig != libc::SIGKILL && sig != libc::SIGSTOP {
            set_default_action(sig)?;
        }
    }
    let empty: u64 = 0;
    // SAFETY: sets the mask from a valid 8-byte set; the old-mask pointer is null.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            std::mem::size_of::<u64>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Puts glibc's internal signals 32 and 33 back to their default action in the calling
/// process: a program started by [`super::vfork::spawn`] may have them ignored (glibc's
/// `posix_spawn` cannot reset them); everything else is default already.
pub fn reset_glibc_signals() -> io::Result<()> {
    set_default_action(32)?;
    set_default_action(33)
}

/// `sig`'s action back to SIG_DFL with a raw `rt_sigaction` (async-signal-safe; glibc's
/// wrapper refuses its internal 32 and 33).
fn set_default_action(sig: libc::c_int) -> io::Result<()> {
    let default = KernelSigaction {
        handler: libc::SIG_DFL,
        flags: 0,
        restorer: 0,
        mask: 0,
    };
    // SAFETY: `default` is a valid kernel sigaction installing SIG_DFL (no handler code);
    // the old-action pointer is null and the size matches the 64-bit kernel sigset.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            &default as *const KernelSigaction,
            std::ptr::null_mut::<KernelSigaction>(),
            std::mem::size_of::<u64>(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Child set-up for [`Command`]s the daemon spawns.
pub trait CommandExt {
    /// In the child: every signal back to its default action and an empty signal mask.
    fn reset_signals(&mut self) -> &mut Self;
    /// In the child: `setpgid(0, 0)`, so the child and what it forks can be killed as a group.
    fn new_process_group(&mut self) -> &mut Self;
    /// In the child: `fd` duplicated to `target` (without close-on-exec). `fd` is moved into
    /// the command and closed in the parent when the command is dropped.
    fn inherit_fd_as(&mut self, fd: OwnedFd, target: RawFd) -> &mut Self;
    /// In the child: `unshare(flags)` (`CLONE_NEW*` namespace flags only), so the program
    /// starts in new namespaces; with `CLONE_NEWUSER` the others are owned by the new user
    /// namespace (the kernel creates it first).
    fn unshare(&mut self, flags: rustix::thread::UnshareFlags) -> &mut Self;
}

impl CommandExt for Command {
    fn reset_signals(&mut self) -> &mut Self {
        // SAFETY: the hook makes only async-signal-safe raw system calls and allocates
        // nothing (required between fork and exec in a multi-threaded process).
        unsafe { self.pre_exec(reset_signals_now) }
    }

    fn new_process_group(&mut self) -> &mut Self {
        // SAFETY: setpgid is async-signal-safe and the hook allocates nothing.
        unsafe {
            self.pre_exec(|| {
                if libc::setpgid(0, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }

    fn inherit_fd_as(&mut self, fd: OwnedFd, target: RawFd) -> &mut Self {
        // SAFETY: dup2 and fcntl are async-signal-safe; `fd` is owned by the closure, so it
        // stays open until the command is dropped (after the spawn).
        unsafe {
            self.pre_exec(move || {
                let raw = fd.as_raw_fd();
                let rc = if raw == target {
                    // dup2 onto itself keeps close-on-exec: clear the flag instead.
                    libc::fcntl(raw, libc::F_SETFD, 0)
                } else {
                    libc::dup2(raw, target)
                };
                if rc < 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }

    fn unshare(&mut self, flags: rustix::thread::UnshareFlags) -> &mut Self {
        use rustix::thread::UnshareFlags as F;
        let namespaces =
            F::NEWUSER | F::NEWNS | F::NEWNET | F::NEWIPC | F::NEWUTS | F::NEWPID | F::NEWCGROUP;
        // Anything else (CLONE_FILES, CLONE_FS, ...) is refused in the child before exec.
        let bits = flags.bits() as libc::c_int;
        let allowed = namespaces.contains(flags);
        // SAFETY: unshare is a raw system call (async-signal-safe); the hook allocates nothing.
        unsafe {
            self.pre_exec(move || {
                if !allowed {
                    return Err(io::Error::from(io::ErrorKind::InvalidInput));
                }
                if libc::unshare(bits) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Stdio;

    fn masks(cmd: &mut Command) -> Vec<(String, String)> {
        // grep itself reads the masks: dash clears its signal mask at start-up.
        let out = cmd
            .args(["-E", "SigIgn|SigBlk", "/proc/self/status"])
            .stdout(Stdio::piped())
            .output()
            .expect("spawn sh");
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            .collect()
    }

    #[test]
    fn reset_signals_leaves_no_ignored_or_blocked_signal() {
        let got = masks(Command::new("grep").reset_signals());
        assert_eq!(
            got,
            [
                ("SigBlk".to_string(), "0000000000000000".to_string()),
                ("SigIgn".to_string(), "0000000000000000".to_string()),
            ]
        );
    }

    /// A `grep` whose first hook dirties the child (SIGUSR1 ignored, SIGUSR2 blocked) the way
    /// a daemon's state would leak into it.
    fn dirty_grep() -> Command {
        let mut cmd = Command::new("grep");
        // SAFETY: signal() to SIG_IGN and a raw rt_sigprocmask: async-signal-safe, no allocation.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGUSR1, libc::SIG_IGN);
                let set: u64 = 1 << (libc::SIGUSR2 - 1);
                libc::syscall(
                    libc::SYS_rt_sigprocmask,
                    libc::SIG_BLOCK,
                    &set as *const u64,
                    std::ptr::null_mut::<u64>(),
                    8usize,
                );
                Ok(())
            });
        }
        cmd
    }

    #[test]
    fn reset_signals_clears_an_inherited_mask_and_ignore() {
        let dirty = masks(&mut dirty_grep());
        assert!(
            dirty.iter().all(|(_, v)| v != "0000000000000000"),
            "{dirty:?}"
        );
        let got = masks(dirty_grep().reset_signals());
        assert!(got.iter().all(|(_, v)| v == "0000000000000000"), "{got:?}");
        assert_eq!(got.len(), 2);
    }

    #[test]
    fn new_process_group_and_inherited_fd() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let out = Command::new("sh")
            .arg("-c")
            .arg(r#"echo through-fd >&7; ps -o pid= -o pgid= -p $$ 2>/dev/null || cat /proc/$$/stat"#)
            .new_process_group()
            .inherit_fd_as(w, 7)
            .stdout(Stdio::piped())
            .output()
            .expect("spawn");
        assert!(out.status.success(), "{out:?}");
        let mut buf = [0u8; 64];
        let n = rustix::io::read(&r, &mut buf).expect("read");
        assert_eq!(&buf[..n], b"through-fd\n");
        let text = String::from_utf8_lossy(&out.stdout);
        let stat: Vec<&str> = text.split_whitespace().collect();
        // Either "pid pgid" from ps or /proc stat (pid comm state ppid pgrp …).
        let (pid, pgid) = if stat.len() == 2 {
            (stat[0], stat[1])
        } else {
            (stat[0], stat[4])
        };
        assert_eq!(pid, pgid, "{text}");
    }

    #[test]
    fn unshare_starts_the_child_in_new_namespaces() {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIP unshare_starts_the_child_in_new_namespaces: needs root");
            return;
        }
        let ours = std::fs::read_link("/proc/self/ns/uts").expect("own uts");
        let out = Command::new("readlink")
            .arg("/proc/self/ns/uts")
            .unshare(rustix::thread::UnshareFlags::NEWUTS)
            .output()
            .expect("spawn");
        assert!(out.status.success(), "{out:?}");
        let theirs = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert_ne!(theirs, ours.to_string_lossy(), "same uts namespace");
        let refused = Command::new("true")
            .unshare(rustix::thread::UnshareFlags::FILES)
            .status();
        assert!(refused.is_err(), "CLONE_FILES must be refused");
    }
}
