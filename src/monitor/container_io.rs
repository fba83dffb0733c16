//! The container's stdio from the monitor's side: pipes, or the terminal master runc sent.

use std::os::fd::{AsFd, OwnedFd};
use std::process::Stdio;

use rustix::fs::OFlags;
use rustix::pipe::{pipe_with, PipeFlags};

use super::cri_log::{LineSplitter, Stream};
use super::error::{Context, Result};
use super::runc::RuncStdio;

/// One output stream of the container, read until end of file.
#[derive(Debug)]
pub struct Output {
    /// The read end (non-blocking); `None` once the stream ended.
    pub fd: Option<OwnedFd>,
    /// Its CRI log line state.
    pub splitter: LineSplitter,
    /// Which stream it is (attach clients get it as a tag).
    pub stream: Stream,
}

/// What the monitor holds of the container's stdio.
#[derive(Debug)]
pub struct ContainerIo {
    /// stdout and stderr (pipes), or the terminal master alone (logged as stdout).
    pub outputs: Vec<Output>,
    /// Where attach clients' input goes (`--stdin` only): the pipe's write end (non-blocking),
    /// or a duplicate of the terminal master. Held open for the container's lifetime unless
    /// `--stdin-once` closes it.
    pub stdin: Option<OwnedFd>,
}

/// Pipes for stdout and stderr (and stdin with `with_stdin`): the monitor keeps the read ends
/// (and stdin's write end); runc gets the others, which it passes on to the init.
pub fn pipes(with_stdin: bool, max_line: usize) -> Result<(ContainerIo, RuncStdio)> {
    let (out_r, out_w) = output_pipe().context("stdout pipe")?;
    let (err_r, err_w) = output_pipe().context("stderr pipe")?;
    let (stdin, runc_stdin) = if with_stdin {
        // Our write end stays open (for attach), so the container sees no EOF on stdin. It
        // is non-blocking (only ours: the flag is per open file description): a container
        // that does not read its stdin must not stall the monitor.
        let (r, w) = pipe_with(PipeFlags::CLOEXEC).context("stdin pipe")?;
        set_nonblocking(&w).context("stdin pipe")?;
        (Some(w), Stdio::from(r))
    } else {
        (None, Stdio::null())
    };
    let io = ContainerIo {
        outputs: vec![
            output(out_r, Stream::Stdout, max_line),
            output(err_r, Stream::Stderr, max_line),
        ],
        stdin,
    };
    let stdio = RuncStdio {
        stdin: runc_stdin,
        stdout: Stdio::from(out_w),
        stderr: Stdio::from(err_w),
    };
    Ok((io, stdio))
}

/// With a terminal runc's own stdio is unused: the init gets the terminal's slave.
pub fn terminal_runc_stdio() -> RuncStdio {
    RuncStdio {
        stdin: Stdio::null(),
        stdout: Stdio::null(),
        stderr: Stdio::null(),
    }
}

/// The terminal master as the container's single output (`stdout` records) and, with
/// `with_stdin`, its input.
pub fn terminal(master: OwnedFd, with_stdin: bool, max_line: usize) -> Result<ContainerIo> {
    set_nonblocking(&master).context("terminal master")?;
    let stdin = if with_stdin {
        Some(master.try_clone().context("duplicate terminal master")?)
    } else {
        None
    };
    Ok(ContainerIo {
        outputs: vec![output(master, Stream::Stdout, max_line)],
        stdin,
    })
}

fn output(fd: OwnedFd, stream: Stream, max_line: usize) -> Output {
    Output {
        fd: Some(fd),
        splitter: LineSplitter::new(stream, max_line),
        stream,
    }
}

/// A pipe whose read end (ours) is non-blocking; the write end (the container's) stays
/// blocking — `O_NONBLOCK` is per open file description, so setting it on one end is local.
fn output_pipe() -> Result<(OwnedFd, OwnedFd)> {
    let (r, w) = pipe_with(PipeFlags::CLOEXEC).context("pipe2")?;
    set_nonblocking(&r)?;
    Ok((r, w))
}

fn set_nonblocking(fd: impl AsFd) -> Result<()> {
    let flags = rustix::fs::fcntl_getfl(&fd).context("F_GETFL")?;
    rustix::fs::fcntl_setfl(&fd, flags | OFlags::NONBLOCK).context("F_SETFL O_NONBLOCK")
}
