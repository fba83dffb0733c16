//! Process descriptors (`pidfd_open`) as tokio readiness: readable once the process exits,
//! whether or not it is our child.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A pidfd registered with the current tokio reactor.
#[derive(Debug)]
pub struct PidFd(AsyncFd<OwnedFd>);

impl PidFd {
    /// Opens a pidfd for `pid` (ESRCH when it is gone) and registers it for readability.
    /// Fails instead of panicking outside a tokio runtime.
    pub fn open(pid: i32) -> io::Result<PidFd> {
        let pid = rustix::process::Pid::from_raw(pid)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
        let fd = rustix::process::pidfd_open(pid, rustix::process::PidfdFlags::empty())?;
        Self::register(fd)
    }

    /// Registers an already open pidfd.
    pub fn register(fd: OwnedFd) -> io::Result<PidFd> {
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(io::Error::other("no tokio runtime"));
        }
        // SAFETY: `fd` is an open descriptor owned by the AsyncFd for its whole life, and
        // OwnedFd::as_raw_fd always returns that same descriptor.
        let fd = unsafe { AsyncFd::register_with_interest(fd, Interest::READABLE) };
        fd.map(PidFd).map_err(|e| e.into_parts().1)
    }

    /// Resolves when the process has exited (it may be a zombie, not yet reaped).
    pub async fn exited(&self) -> io::Result<()> {
        self.0.readable().await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn resolves_when_the_process_exits() {
        let mut child = std::process::Command::new("sleep")
            .arg("0.2")
            .spawn()
            .expect("spawn");
        let pid = i32::try_from(child.id()).expect("pid");
        let fd = PidFd::open(pid).expect("pidfd");
        let start = std::time::Instant::now();
        fd.exited().await.expect("exited");
        assert!(start.elapsed() >= std::time::Duration::from_millis(150));
        child.wait().expect("reap");
        let gone = PidFd::open(pid).map(drop).expect_err("reaped pid");
        assert_eq!(gone.raw_os_error(), Some(libc::ESRCH));
    }

    #[test]
    fn no_runtime_is_an_error_not_a_panic() {
        let e = PidFd::open(std::process::id() as i32).expect_err("no runtime");
        assert!(e.to_string().contains("no tokio runtime"), "{e}");
    }
}
