//! The attach socket: container output fanned out to attach clients, their input to stdin.
//!
//! A non-blocking SOCK_SEQPACKET listener at `<bundle>/attach.sock` (format in
//! [`super::attach_proto`]). Output is sent to every client with `MSG_DONTWAIT`; what a
//! client's full socket cannot take waits in that client's own queue (allocated only while it
//! lags, at most [`CLIENT_QUEUE_MAX`] bytes) and is sent as the socket drains. A client that
//! falls further behind is disconnected: neither the container nor the log ever waits for an
//! attach. Client input goes to the container's stdin through
//! one small buffer; while it is not written out no client input is read (flow control
//! without memory growth). With `--stdin-once` the container's stdin is closed once the first
//! client that sent stdin ends it (a terminal gets its end-of-file character instead).
//! A client may also ask for the log file to be reopened: the supervisor does it and the
//! client gets the answer in order with its output.

use std::collections::VecDeque;
use std::fs::File;
use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::event::{PollFd, PollFlags};
use rustix::io::Errno;
use rustix::net::{
    AddressFamily, RecvFlags, SendAncillaryBuffer, SendFlags, SocketAddrUnix, SocketFlags,
    SocketType,
};

use super::attach_proto::{
    parse_client, ClientMessage, OUT_LOG_REOPENED, OUT_STDERR, OUT_STDOUT, READY, SOCKET_NAME,
};
use super::container_io::ContainerIo;
use super::cri_log::Stream;
use super::error::{Context, Result};

/// The most attach clients at once; more are accepted and closed at once.
pub const MAX_CLIENTS: usize = 32;

/// The most output bytes queued for one lagging client before it is disconnected.
pub const CLIENT_QUEUE_MAX: usize = 4 << 20;

/// The terminal's end-of-file character (VEOF, `^D`).
const VEOF: u8 = 0x04;

#[derive(Debug)]
struct Client {
    fd: OwnedFd,
    /// The client declared or sent stdin (an empty stdin message declares it).
    has_stdin: bool,
    /// The client asked for the log to be reopened and waits for the answer.
    wants_reopen: bool,
    /// Output messages (tag + data) its socket could not take yet, oldest first.
    queue: VecDeque<Vec<u8>>,
    /// Bytes in `queue`.
    queued: usize,
}

impl Client {
    fn new(fd: OwnedFd) -> Self {
        Client {
            fd,
            has_stdin: false,
            wants_reopen: false,
            queue: VecDeque::new(),
            queued: 0,
        }
    }

    /// Sends `msg` now, or after what is queued; `Err` when the client is gone or too far
    /// behind.
    fn send_in_order(&mut self, msg: &[u8]) -> std::result::Result<(), Errno> {
        if self.queue.is_empty() {
            match rustix::net::send(&self.fd, msg, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(_) => return Ok(()),
                Err(Errno::AGAIN | Errno::INTR) => {}
                Err(e) => return Err(e),
            }
        }
        if self.queued + msg.len() > CLIENT_QUEUE_MAX {
            return Err(Errno::NOBUFS);
        }
        self.queue.push_back(msg.to_vec());
        self.queued += msg.len();
        Ok(())
    }

    /// Sends queued output until the socket is full; `Err` when the client is gone.
    fn flush(&mut self) -> std::result::Result<(), Errno> {
        while let Some(msg) = self.queue.front() {
            match rustix::net::send(&self.fd, msg, SendFlags::DONTWAIT | SendFlags::NOSIGNAL) {
                Ok(_) => {
                    self.queued -= msg.len();
                    self.queue.pop_front();
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e),
            }
        }
        // Caught up: give the memory back.
        self.queue = VecDeque::new();
        Ok(())
    }
}

/// What the last poll reported for the attach descriptors, in [`AttachServer::register`]'s
/// order.
#[derive(Debug, Default)]
pub struct AttachReady {
    listener: bool,
    /// Per client: (readable or hung up, writable).
    clients: Vec<(bool, bool)>,
    stdin_writable: bool,
}

#[cfg(test)]
impl AttachReady {
    /// Everything ready: the listener and `clients` clients (tests drive the server without
    /// a poll).
    pub fn all(clients: usize) -> Self {
        AttachReady {
            listener: true,
            clients: vec![(true, true); clients],
            stdin_writable: true,
        }
    }
}

/// Where [`AttachServer::register`] put the attach descriptors in the poll set.
#[derive(Debug, Default)]
pub struct AttachSlots {
    listener: usize,
    clients: Option<(usize, usize)>,
    stdin: Option<usize>,
}

/// The listening attach socket and its clients.
#[derive(Debug)]
pub struct AttachServer {
    listener: OwnedFd,
    path: PathBuf,
    clients: Vec<Client>,
    stdin_once: bool,
    tty: bool,
    /// Client input not yet written to the container's stdin.
    pending: Vec<u8>,
    /// Close the container's stdin once `pending` is written (stdin-once).
    close_stdin: bool,
    /// The container's stdin was closed for good (stdin-once): input is dropped.
    stdin_done: bool,
    /// The last input byte did not end a line (a terminal needs two `^D` to end input then).
    line_open: bool,
}

impl AttachServer {
    /// Binds `<bundle>/attach.sock` (mode 0600), replacing a stale one, and listens. Bound
    /// through `/proc/self/fd/<bundle fd>/…`: a bundle path may exceed `sun_path`.
    pub fn bind(bundle: &Path, stdin_once: bool, tty: bool) -> Result<Self> {
        let path = bundle.join(SOCKET_NAME);
        match std::fs::remove_file(&path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(e).with_context(|| format!("remove stale {}", path.display()))
            }
            _ => {}
        }
        let dir = File::open(bundle).with_context(|| format!("open {}", bundle.display()))?;
        let via_proc = format!("/proc/self/fd/{}/{SOCKET_NAME}", dir.as_raw_fd());
        let addr = SocketAddrUnix::new(via_proc.as_str()).context("attach socket address")?;
        let listener = rustix::net::socket_with(
            AddressFamily::UNIX,
            SocketType::SEQPACKET,
            SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            None,
        )
        .context("attach socket")?;
        rustix::net::bind(&listener, &addr)
            .with_context(|| format!("bind attach socket {}", path.display()))?;
        let server = AttachServer {
            listener,
            path,
            clients: Vec::new(),
            stdin_once,
            tty,
            pending: Vec::new(),
            close_stdin: false,
            stdin_done: false,
            line_open: false,
        };
        std::fs::set_permissions(
            &server.path,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .context("chmod attach socket")?;
        rustix::net::listen(&server.listener, 8).context("listen on attach socket")?;
        Ok(server)
    }

    /// How many clients are attached.
    pub fn clients(&self) -> usize {
        self.clients.len()
    }

    /// Whether output read from the container still waits in some client's queue.
    pub fn lagging(&self) -> bool {
        self.clients.iter().any(|c| !c.queue.is_empty())
    }

    /// Adds the listener, the clients (readable: only while no stdin is backed up; writable:
    /// while output waits in their queue) and, with stdin backed up, the container's stdin
    /// (writable) to the poll set.
    pub fn register<'a>(
        &'a self,
        fds: &mut Vec<PollFd<'a>>,
        stdin: Option<&'a OwnedFd>,
    ) -> AttachSlots {
        let mut slots = AttachSlots {
            listener: fds.len(),
            ..Default::default()
        };
        fds.push(PollFd::new(&self.listener, PollFlags::IN));
        let backed_up = !self.pending.is_empty();
        let first = fds.len();
        for c in &self.clients {
            // Hang-ups are reported whatever the events asked for.
            let mut events = if backed_up {
                PollFlags::empty()
            } else {
                PollFlags::IN
            };
            if !c.queue.is_empty() {
                events |= PollFlags::OUT;
            }
            fds.push(PollFd::new(&c.fd, events));
        }
        slots.clients = Some((first, fds.len()));
        if let (true, Some(fd)) = (backed_up, stdin) {
            slots.stdin = Some(fds.len());
            fds.push(PollFd::new(fd, PollFlags::OUT));
        }
        slots
    }

    /// Reads what the poll reported for the descriptors [`AttachServer::register`] added.
    pub fn ready(slots: &AttachSlots, fds: &[PollFd<'_>]) -> AttachReady {
        let hit = |i: usize| fds.get(i).is_some_and(|f| !f.revents().is_empty());
        let client = |i: usize| {
            let ev = fds
                .get(i)
                .map(|f| f.revents())
                .unwrap_or(PollFlags::empty());
            (
                !(ev - PollFlags::OUT).is_empty(),
                ev.contains(PollFlags::OUT),
            )
        };
        AttachReady {
            listener: hit(slots.listener),
            clients: slots
                .clients
                .map(|(a, b)| (a..b).map(client).collect())
                .unwrap_or_default(),
            stdin_writable: slots.stdin.is_some_and(hit),
        }
    }

    /// Sends one chunk of output to every client; what a client's socket cannot take now is
    /// queued for it; a client whose queue would pass [`CLIENT_QUEUE_MAX`] is disconnected.
    pub fn broadcast(&mut self, stream: Stream, data: &[u8], io: &mut ContainerIo) {
        if self.clients.is_empty() {
            return;
        }
        let tag = [match stream {
            Stream::Stdout => OUT_STDOUT,
            Stream::Stderr => OUT_STDERR,
        }];
        let iov = [IoSlice::new(&tag), IoSlice::new(data)];
        let mut i = 0;
        while i < self.clients.len() {
            let c = &mut self.clients[i];
            let sent = if c.queue.is_empty() {
                rustix::net::sendmsg(
                    &c.fd,
                    &iov,
                    &mut SendAncillaryBuffer::default(),
                    SendFlags::DONTWAIT | SendFlags::NOSIGNAL,
                )
                .map(|_| ())
            } else {
                // Behind already: keep the order.
                Err(Errno::AGAIN)
            };
            match sent {
                Ok(()) => i += 1,
                Err(Errno::AGAIN | Errno::INTR)
                    if c.queued + 1 + data.len() <= CLIENT_QUEUE_MAX =>
                {
                    c.queue.push_back([&tag[..], data].concat());
                    c.queued += 1 + data.len();
                    i += 1;
                }
                Err(Errno::AGAIN | Errno::INTR) => {
                    eprintln!(
                        "bosun monitor: attach client dropped: more than {CLIENT_QUEUE_MAX} bytes \
                         of output behind"
                    );
                    self.drop_client(i, io);
                }
                // Gone: never wait for a client.
                Err(_) => self.drop_client(i, io),
            }
        }
    }

    /// Accepts new clients, serves client input and writes backed-up stdin.
    pub fn service(&mut self, ready: &AttachReady, io: &mut ContainerIo, buf: &mut [u8]) {
        if ready.stdin_writable {
            self.flush_stdin(io);
        }
        // From the back: dropping a client must not shift the ones still to serve.
        for i in (0..ready.clients.len().min(self.clients.len())).rev() {
            let (readable, writable) = ready.clients[i];
            if writable && self.clients[i].flush().is_err() {
                self.drop_client(i, io);
                continue;
            }
            if readable {
                self.serve_client(i, io, buf);
            }
        }
        if ready.listener {
            self.accept();
        }
    }

    fn accept(&mut self) {
        loop {
            match rustix::net::accept_with(
                &self.listener,
                SocketFlags::CLOEXEC | SocketFlags::NONBLOCK,
            ) {
                Ok(fd) if self.clients.len() < MAX_CLIENTS => {
                    // A fresh socket has room: the client learns it is in the fan-out now.
                    let ready =
                        rustix::net::send(&fd, &READY, SendFlags::DONTWAIT | SendFlags::NOSIGNAL);
                    if ready.is_ok() {
                        self.clients.push(Client::new(fd));
                    }
                }
                Ok(_too_many) => {}
                Err(Errno::INTR | Errno::CONNABORTED) => {}
                Err(_) => return, // EAGAIN: none left; anything else: try at the next poll
            }
        }
    }

    /// One message from client `i` (or its hang-up).
    fn serve_client(&mut self, i: usize, io: &mut ContainerIo, buf: &mut [u8]) {
        let n = match rustix::net::recv(&self.clients[i].fd, &mut *buf, RecvFlags::DONTWAIT) {
            Ok((0, _)) => return self.drop_client(i, io), // orderly close
            Ok((n, _)) => n,
            Err(Errno::AGAIN | Errno::INTR) => return,
            Err(_) => return self.drop_client(i, io),
        };
        match parse_client(&buf[..n]) {
            Some(ClientMessage::Stdin(data)) => {
                self.clients[i].has_stdin = true;
                self.write_stdin(data, io);
            }
            Some(ClientMessage::StdinEof) => {
                self.clients[i].has_stdin = false;
                self.stdin_ended(io);
            }
            Some(ClientMessage::Resize { width, height }) if self.tty => {
                // With a terminal the single output is its master.
                if let Some(master) = io.outputs.first().and_then(|o| o.fd.as_ref()) {
                    let ws = rustix::termios::Winsize {
                        ws_row: height,
                        ws_col: width,
                        ws_xpixel: 0,
                        ws_ypixel: 0,
                    };
                    let _ = rustix::termios::tcsetwinsize(master, ws);
                }
            }
            Some(ClientMessage::Resize { .. }) => {}
            Some(ClientMessage::ReopenLog) => self.clients[i].wants_reopen = true,
            None => {} // unknown: ignored (a newer daemon)
        }
    }

    /// Whether a client waits for the log file to be reopened.
    pub fn reopen_requested(&self) -> bool {
        self.clients.iter().any(|c| c.wants_reopen)
    }

    /// Answers every client waiting for a reopen: `error` is why it failed, `None` success.
    pub fn reopened(&mut self, error: Option<&str>, io: &mut ContainerIo) {
        let mut msg = vec![OUT_LOG_REOPENED];
        msg.extend_from_slice(error.unwrap_or("").as_bytes());
        for i in (0..self.clients.len()).rev() {
            let c = &mut self.clients[i];
            if c.wants_reopen {
                c.wants_reopen = false;
                if c.send_in_order(&msg).is_err() {
                    self.drop_client(i, io);
                }
            }
        }
    }

    fn drop_client(&mut self, i: usize, io: &mut ContainerIo) {
        let client = self.clients.swap_remove(i);
        if client.has_stdin {
            self.stdin_ended(io);
        }
    }

    /// A client's stdin ended: with stdin-once the container's stdin closes (after what is
    /// still buffered).
    fn stdin_ended(&mut self, io: &mut ContainerIo) {
        if !self.stdin_once || self.stdin_done || io.stdin.is_none() {
            return;
        }
        if self.tty {
            // A terminal cannot be half-closed: type its end of file, twice after an
            // unfinished line (the first `^D` only ends that line).
            self.pending.push(VEOF);
            if self.line_open {
                self.pending.push(VEOF);
            }
        }
        self.close_stdin = true;
        self.flush_stdin(io);
    }

    fn write_stdin(&mut self, data: &[u8], io: &mut ContainerIo) {
        if self.stdin_done || self.close_stdin || io.stdin.is_none() {
            return;
        }
        if let Some(&last) = data.last() {
            self.line_open = !matches!(last, b'\n' | b'\r');
        }
        self.pending.extend_from_slice(data);
        self.flush_stdin(io);
    }

    /// Writes what it can of the buffered input without blocking; closes stdin when asked
    /// and everything is out; a broken stdin drops the input.
    fn flush_stdin(&mut self, io: &mut ContainerIo) {
        let Some(fd) = io.stdin.as_ref() else {
            self.pending = Vec::new();
            return;
        };
        while !self.pending.is_empty() {
            match rustix::io::write(fd, &self.pending) {
                Ok(n) => {
                    self.pending.drain(..n);
                }
                Err(Errno::INTR) => {}
                Err(Errno::AGAIN) => return,
                Err(_) => {
                    // The container closed its stdin (or exited): nobody reads it any more.
                    io.stdin = None;
                    self.stdin_done = true;
                    self.pending = Vec::new();
                    return;
                }
            }
        }
        self.pending = Vec::new();
        if self.close_stdin {
            io.stdin = None;
            self.stdin_done = true;
        }
    }
}

impl Drop for AttachServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
