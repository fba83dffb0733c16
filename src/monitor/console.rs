//! The console socket: runc sends the container terminal's master over it (`--console-socket`).

use std::fs::File;
use std::io::IoSliceMut;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::net::{
    AddressFamily, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, SocketAddrUnix,
    SocketFlags, SocketType,
};

use super::error::{Context, Error, Result};

/// The socket's name inside the bundle.
pub const NAME: &str = "console.sock";

/// A listening unix socket at `<bundle>/console.sock`, removed on drop.
///
/// A bundle path can be longer than `sun_path` allows (108 bytes), so the socket is bound
/// through `/proc/self/fd/<bundle dir fd>/console.sock` and runc, whose working directory is
/// the bundle, is given the relative name [`NAME`].
#[derive(Debug)]
pub struct ConsoleSocket {
    listener: OwnedFd,
    path: PathBuf,
}

impl ConsoleSocket {
    /// Binds and listens in `bundle`, replacing a stale socket left by an earlier attempt.
    pub fn bind(bundle: &Path) -> Result<Self> {
        let path = bundle.join(NAME);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("remove stale {}", path.display()))
            }
            _ => {}
        }
        let dir = File::open(bundle).with_context(|| format!("open {}", bundle.display()))?;
        let via_proc = format!("/proc/self/fd/{}/{NAME}", dir.as_raw_fd());
        let addr = SocketAddrUnix::new(via_proc.as_str()).context("console socket address")?;
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::STREAM,
            SocketFlags::CLOEXEC,
            None,
        )
        .context("console socket")?;
        rustix::net::bind(&listener, &addr)
            .with_context(|| format!("bind console socket {}", path.display()))?;
        let socket = ConsoleSocket { listener, path };
        rustix::net::listen(&socket.listener, 1).context("listen on console socket")?;
        Ok(socket)
    }

    /// Takes the terminal master runc sent. Call after `runc create` succeeded: runc has
    /// connected and sent it by then, so nothing here waits.
    pub fn receive(self) -> Result<OwnedFd> {
        let conn =
            rustix::net::accept_with(&self.listener, SocketFlags::CLOEXEC | SocketFlags::NONBLOCK)
                .context("runc did not connect to the console socket")?;
        let mut data = [0u8; 4096];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        loop {
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let msg = rustix::net::recvmsg(
                &conn,
                &mut [IoSliceMut::new(&mut data)],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .context("receive terminal from runc")?;
            let mut master = None;
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(mut fds) = message {
                    master = master.or_else(|| fds.next());
                }
            }
            if let Some(master) = master {
                return Ok(master);
            }
            if msg.bytes == 0 {
                return Err(Error::msg(
                    "runc closed the console socket without a terminal",
                ));
            }
        }
    }
}

impl Drop for ConsoleSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
