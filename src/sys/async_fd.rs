//! Owned descriptors (terminal masters, sockets) registered with the tokio reactor.

use std::io;
use std::os::fd::OwnedFd;

use tokio::io::unix::AsyncFd;

/// Registers a non-blocking descriptor for readiness (read and write). Fails instead of
/// panicking outside a tokio runtime.
pub fn register(fd: OwnedFd) -> io::Result<AsyncFd<OwnedFd>> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err(io::Error::other("no tokio runtime"));
    }
    // SAFETY: `fd` is an open descriptor owned by the AsyncFd for its whole life, and
    // OwnedFd::as_raw_fd always returns that same descriptor.
    unsafe { AsyncFd::register(fd) }.map_err(|e| e.into_parts().1)
}
