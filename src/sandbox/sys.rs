//! The raw syscalls pinning needs (unshare, loopback up, signal waits), each behind a safe wrapper.
#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;

use rustix::thread::UnshareFlags;

/// `unshare(2)` of net, IPC, UTS and pid namespace flags, for a single-threaded child.
pub fn unshare_namespaces(flags: UnshareFlags) -> io::Result<()> {
    let allowed =
        UnshareFlags::NEWNET | UnshareFlags::NEWIPC | UnshareFlags::NEWUTS | UnshareFlags::NEWPID;
    unshare_only(
        flags,
        allowed,
        "unshare: only net, ipc, uts and pid namespaces",
    )
}

/// `unshare(2)` of net, IPC and UTS namespace flags in the calling thread only: the thread
/// moves to the new namespaces, the rest of the process stays where it is. For a thread that
/// exists only to create namespaces (see `pinns::pin_from_thread`).
pub fn unshare_thread_namespaces(flags: UnshareFlags) -> io::Result<()> {
    let allowed = UnshareFlags::NEWNET | UnshareFlags::NEWIPC | UnshareFlags::NEWUTS;
    unshare_only(
        flags,
        allowed,
        "unshare from a thread: only net, ipc and uts namespaces",
    )
}

/// `unshare(2)` of `flags` if they are all `allowed` namespace flags (never `CLONE_FILES`/
/// `CLONE_FS`, which would invalidate descriptors or the cwd that other code relies on).
fn unshare_only(flags: UnshareFlags, allowed: UnshareFlags, refusal: &str) -> io::Result<()> {
    if !allowed.contains(flags) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, refusal));
    }
    // SAFETY: only namespace flags pass the check above. Net, IPC and UTS namespaces belong to
    // the calling thread (task) and a new pid namespace only to its later children, so no
    // descriptor table, fs state or namespace that other threads use is replaced.
    unsafe { rustix::thread::unshare_unsafe(flags) }.map_err(io::Error::from)
}

/// Sets `IFF_UP` on `name` in the calling thread's network namespace (SIOCGIFFLAGS/SIOCSIFFLAGS).
pub fn link_up(name: &str) -> io::Result<()> {
    let sock = rustix::net::socket(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    let bytes = name.as_bytes();
    if bytes.is_empty() || bytes.len() >= req.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "bad interface name",
        ));
    }
    for (dst, src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = *src as libc::c_char;
    }
    // SAFETY: the socket is open for the whole call and `req` is a valid, NUL-terminated ifreq
    // that the kernel reads and fills.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFFLAGS, &mut req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    unsafe {
        req.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
    }
    // SAFETY: as above; the kernel only reads `req`.
    if unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCSIFFLAGS, &req) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// What [`SignalWait::wait`] saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sig {
    /// A child changed state.
    Child,
    /// SIGTERM, SIGINT or SIGHUP: time to go.
    Stop,
}

/// SIGCHLD, SIGTERM, SIGINT and SIGHUP blocked and taken synchronously with `sigwaitinfo`
/// (blocked signals reach a namespace's PID 1, which ignores default-action ones).
#[derive(Debug)]
pub struct SignalWait {
    set: libc::sigset_t,
}

impl SignalWait {
    /// Blocks the signals (and resets SIGCHLD to its default so children are not auto-reaped).
    pub fn new() -> io::Result<Self> {
        // SAFETY: SIG_DFL installs no handler code.
        if unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) } == libc::SIG_ERR {
            return Err(io::Error::last_os_error());
        }
        let mut set = MaybeUninit::<libc::sigset_t>::uninit();
        // SAFETY: sigemptyset initialises the set before sigaddset and sigprocmask read it.
        let set = unsafe {
            libc::sigemptyset(set.as_mut_ptr());
            for sig in [libc::SIGCHLD, libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
                libc::sigaddset(set.as_mut_ptr(), sig);
            }
            if libc::sigprocmask(libc::SIG_BLOCK, set.as_ptr(), std::ptr::null_mut()) != 0 {
                return Err(io::Error::last_os_error());
            }
            set.assume_init()
        };
        Ok(SignalWait { set })
    }

    /// Waits for the next of our signals.
    pub fn wait(&self) -> io::Result<Sig> {
        loop {
            // SAFETY: `self.set` is an initialised sigset; a null siginfo pointer is allowed.
            let sig = unsafe { libc::sigwaitinfo(&self.set, std::ptr::null_mut()) };
            match sig {
                libc::SIGCHLD => return Ok(Sig::Child),
                s if s > 0 => return Ok(Sig::Stop),
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
    }
}
