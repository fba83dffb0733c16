//! The event loop: copy container output into the log and to attach clients, reap children, notice the init's exit.

use std::process::ExitStatus;
use std::time::{Duration, Instant, SystemTime};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use rustix::process::{wait, WaitOptions};

use super::attach::{AttachReady, AttachServer};
use super::container_io::ContainerIo;
use super::error::{Context, Result};
use super::exit_record::from_raw;
use super::leftovers::Leftovers;
use super::log_file::LogFile;
use super::oom_watch::OomWatch;
use super::signals::Signals;

/// How long output is still copied after the init exited, at most: a process outside the
/// container's cgroup may hold the pipes open forever.
pub const DRAIN: Duration = Duration::from_secs(2);

const READ_BUF: usize = 16 * 1024;

/// Reads per output when the init exits before a stream still open is taken as held: a full
/// pipe (64 KiB) is four.
const DRAIN_READS: usize = 16;

/// How and when the init ended.
#[derive(Debug, Clone, Copy)]
pub struct InitExit {
    /// Its wait status.
    pub status: ExitStatus,
    /// When it was reaped.
    pub at: SystemTime,
}

/// Runs until the init `init` has exited and its output is drained (EOF on every stream and
/// every attach client's queue sent, or [`DRAIN`] after the exit). When the init exits, what
/// is readable is read at once; if some stream is still held open and the container shares a
/// pid namespace, its `leftovers` are killed then, so the exit is recorded without waiting
/// for them (issue 12). Reopens the log
/// on SIGUSR1 or an attach client's request; reaps every child (we are the subreaper:
/// orphans of the container end up here); serves attach clients; follows the OOM counter
/// while the container runs. Only the log write may block.
pub fn run(
    init: i32,
    signals: &Signals,
    io: &mut ContainerIo,
    log: &mut LogFile,
    mut attach: Option<&mut AttachServer>,
    mut oom: Option<&mut OomWatch>,
    leftovers: Option<&Leftovers>,
) -> Result<InitExit> {
    let mut buf = vec![0u8; READ_BUF];
    // The init's exit, and until when its output is still drained.
    let mut exited: Option<(InitExit, Instant)> = None;
    loop {
        if let Some((exit, deadline)) = exited {
            let open = io.outputs.iter().any(|o| o.fd.is_some());
            // Output already read but queued for a lagging attach client is sent too (within
            // the same limit): the client would lose the container's last output otherwise.
            let queued = attach.as_deref().is_some_and(AttachServer::lagging);
            if (!open && !queued) || Instant::now() >= deadline {
                for output in &mut io.outputs {
                    output.splitter.finish(log);
                    output.fd = None;
                }
                log.end();
                return Ok(exit);
            }
        }
        let deadline = exited.map(|(_, deadline)| deadline);
        let ready = wait_ready(signals, io, attach.as_deref(), oom.as_deref(), deadline)?;
        if ready.oom {
            if let Some(w) = oom.as_deref_mut() {
                w.changed();
            }
        }
        if ready.signals {
            let arrived = signals.read();
            if arrived.reopen_log {
                // On failure the old file is kept; the kubelet retries ReopenContainerLog.
                let _ = log.reopen();
            }
            if arrived.child {
                if let Some(exit) = reap(init)? {
                    // The OOM counter now, before the drain: with the systemd driver the
                    // scope (and its memory.events) goes as soon as systemd sees it empty,
                    // and the kernel may delay the oom_kill change's event by up to 20 ms.
                    if let Some(w) = oom.as_deref_mut() {
                        w.changed();
                    }
                    exited = Some((exit, Instant::now() + DRAIN));
                    end_leftovers(io, &mut buf, log, attach.as_deref_mut(), leftovers);
                }
            }
        }
        for (i, ready) in ready.outputs.iter().enumerate() {
            if *ready {
                let _ = read_once(io, i, &mut buf, log, attach.as_deref_mut());
            }
        }
        if let (Some(server), Some(r)) = (attach.as_deref_mut(), &ready.attach) {
            server.service(r, io, &mut buf);
            if server.reopen_requested() {
                answer_reopen(server, log, io);
            }
        }
    }
}

/// What one poll found ready.
struct Ready {
    signals: bool,
    oom: bool,
    outputs: Vec<bool>,
    attach: Option<AttachReady>,
}

/// Polls the signalfd, the OOM counter's watch, the open outputs and the attach socket and
/// clients.
fn wait_ready(
    signals: &Signals,
    io: &ContainerIo,
    attach: Option<&AttachServer>,
    oom: Option<&OomWatch>,
    deadline: Option<Instant>,
) -> Result<Ready> {
    let outputs = &io.outputs;
    let mut fds = Vec::with_capacity(3 + outputs.len() + attach.map_or(0, |a| a.clients() + 1));
    fds.push(PollFd::new(signals, PollFlags::IN));
    let oom_fd = oom.and_then(OomWatch::fd);
    let oom_slot = oom_fd.as_ref().map(|fd| {
        fds.push(PollFd::new(fd, PollFlags::IN));
        fds.len() - 1
    });
    let mut slots = Vec::with_capacity(outputs.len());
    for output in outputs {
        slots.push(output.fd.as_ref().map(|fd| {
            fds.push(PollFd::new(fd, PollFlags::IN));
            fds.len() - 1
        }));
    }
    let attach_slots = attach.map(|a| a.register(&mut fds, io.stdin.as_ref()));
    let timeout = deadline
        .map(|d| Timespec::try_from(d.saturating_duration_since(Instant::now())))
        .transpose()
        .context("poll timeout")?;
    match poll(&mut fds, timeout.as_ref()) {
        Ok(_) | Err(Errno::INTR) => {}
        Err(e) => return Err(e).context("poll"),
    }
    Ok(Ready {
        signals: !fds[0].revents().is_empty(),
        oom: oom_slot.is_some_and(|i| !fds[i].revents().is_empty()),
        outputs: slots
            .iter()
            .map(|slot| slot.is_some_and(|i| !fds[i].revents().is_empty()))
            .collect(),
        attach: attach_slots.map(|s| AttachServer::ready(&s, &fds)),
    })
}

/// The init has exited: takes what is readable and, if a stream is still held open and the
/// container shares a pid namespace, kills its `leftovers`. Cold and out of line, like
/// [`answer_reopen`]: the idle loop's code stays on few pages once the startup ones are shed.
#[cold]
#[inline(never)]
fn end_leftovers(
    io: &mut ContainerIo,
    buf: &mut [u8],
    log: &mut LogFile,
    attach: Option<&mut AttachServer>,
    leftovers: Option<&Leftovers>,
) {
    drain_ready(io, buf, log, attach);
    let held = io.outputs.iter().any(|o| o.fd.is_some());
    if let (true, Some(leftovers)) = (held, leftovers) {
        // Best effort: the drain limit still ends the wait if this fails.
        if let Err(e) = leftovers.kill() {
            eprintln!("bosun monitor: kill leftover processes: {e}");
        }
    }
}

/// Reopens the log for the attach clients that asked, and answers them only once the new file
/// is open (the kubelet checks it as soon as ReopenContainerLog returns).
#[cold]
#[inline(never)]
fn answer_reopen(server: &mut AttachServer, log: &mut LogFile, io: &mut ContainerIo) {
    let result = log.reopen();
    let error = result.err().map(|e| e.to_string());
    server.reopened(error.as_deref(), io);
}

/// Reads each output until it would block or ends, at most [`DRAIN_READS`] times (a writer
/// that never pauses must not hold the loop): an output still open afterwards has a writer.
fn drain_ready(
    io: &mut ContainerIo,
    buf: &mut [u8],
    log: &mut LogFile,
    mut attach: Option<&mut AttachServer>,
) {
    for i in 0..io.outputs.len() {
        for _ in 0..DRAIN_READS {
            if !read_once(io, i, buf, log, attach.as_deref_mut()) {
                break;
            }
        }
    }
}

/// One read from ready output `i` into the log and to attach clients; end of file (or EIO:
/// the terminal's last slave closed) flushes what is pending and closes the stream. Returns
/// whether bytes were read (more may follow).
fn read_once(
    io: &mut ContainerIo,
    i: usize,
    buf: &mut [u8],
    log: &mut LogFile,
    attach: Option<&mut AttachServer>,
) -> bool {
    let Some(output) = io.outputs.get_mut(i) else {
        return false;
    };
    let Some(fd) = &output.fd else {
        return false;
    };
    match rustix::io::read(fd, &mut *buf) {
        Ok(0) => {}
        Ok(n) => {
            output.splitter.feed(&buf[..n], log);
            let stream = output.stream;
            if let Some(server) = attach {
                server.broadcast(stream, &buf[..n], io);
            }
            return true;
        }
        Err(Errno::AGAIN) => return false,
        Err(Errno::INTR) => return true,
        Err(_) => {} // EIO from a terminal master whose slave is gone, or a broken stream
    }
    output.splitter.finish(log);
    output.fd = None;
    false
}

/// Reaps every exited child without blocking; returns the init's exit if it was among them.
fn reap(init: i32) -> Result<Option<InitExit>> {
    let mut found = None;
    loop {
        // wait(), not waitpid(None): the latter is waitpid(0), our process group only.
        match wait(WaitOptions::NOHANG) {
            Ok(Some((pid, status))) => {
                if pid.as_raw_nonzero().get() == init {
                    found = Some(InitExit {
                        status: from_raw(status.as_raw()),
                        at: SystemTime::now(),
                    });
                }
            }
            Ok(None) | Err(Errno::CHILD) => return Ok(found),
            Err(Errno::INTR) => {}
            Err(e) => return Err(e).context("waitpid"),
        }
    }
}
