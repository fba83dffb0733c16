//! The per-container monitor: runs the container with runc and outlives the daemon.
//!
//! One small process per container (no tokio, no threads), started by StartContainer (a
//! created container has none, issue 13): it runs `runc run --detach`, is the
//! subreaper parent of the container's init, owns its stdio, writes the CRI log file while the
//! daemon is down or busy (DESIGN rule 11), and records the exit atomically.
//!
//! # Interface
//!
//! ```text
//! bosun monitor --id ID --bundle DIR --runtime PATH --runtime-root DIR
//!               --log-path FILE --exit-file FILE --sync-fd N
//!               [--stdin] [--stdin-once] [--tty] [--systemd-cgroup] [--log-max-line BYTES]
//! ```
//!
//! The daemon writes this command line and the monitor reads it with one type,
//! [`args::MonitorArgs`].
//!
//! `bosun monitor --standby …` is a spare that receives these arguments on a pipe later
//! ([`standby`]); it then runs exactly as if started with them.
//!
//! Dispatched at the top of `main` before any runtime or thread exists. Paths are absolute;
//! `--runtime` may also be a bare name found in PATH; `--log-max-line` defaults to 16384
//! (0: never cut). `--sync-fd` is an inherited descriptor (0–2 allowed: it is duplicated
//! first); the monitor closes every other inherited descriptor above 2.
//!
//! 1. Bad arguments: a message on stderr, exit status 2. Other failures before the fork
//!    (sync fd not open, log file not creatable, bundle missing): stderr, `{"error": …}` on
//!    the sync fd when it is usable, exit status 1. (A spare is not the daemon's child when
//!    it fails: the daemon reads its stderr once the sync pipe ends without a report.)
//! 2. It forks once; the process the daemon spawned exits 0 at once (the daemon reaps it),
//!    so the monitor is not the daemon's child. The monitor: `setsid`, child subreaper,
//!    cwd `/`, SIGPIPE ignored, stdio on /dev/null, SIGCHLD/SIGUSR1 via a signalfd. A spare
//!    has forked and made its session before its arguments came: it goes straight on.
//! 3. It runs `<runtime> --root R --log <bundle>/runc.log --log-format json run --detach
//!    --bundle B --pid-file <bundle>/init.pid [--console-socket console.sock] ID` in the
//!    bundle directory, with pipes as the container's stdout/stderr (and stdin with
//!    `--stdin`; its write end is held for attach). With `--tty` the bundle must set
//!    `process.terminal`; runc sends the terminal master over `<bundle>/console.sock` and
//!    the master is the only output, logged as `stdout`.
//! 4. Failure: one line `{"error": "<runc's last error message>"}` on the sync fd, exit 1,
//!    no exit file (runc has destroyed the container). Success: `{"monitor_pid": N,
//!    "init_pid": N}` and the sync fd is closed; the init may still be runc's until it execs
//!    the container's process (the daemon waits for that exec).
//! 5. Output goes to the CRI log file (`O_APPEND`, created 0640; records as in
//!    [`cri_log`]). SIGUSR1 reopens the log path (kubelet rotation).
//! 6. `<bundle>/attach.sock` (SOCK_SEQPACKET, 0600, bound before `runc run`) serves
//!    attach clients ([`attach`], format in [`attach_proto`]): output tagged by stream to
//!    every client (one that cannot keep up is disconnected, never waited for), client input
//!    to the container's stdin (`--stdin`; closed after the first client's stdin ends with
//!    `--stdin-once`), terminal resizes to the master (`--tty`). It closes after the exit
//!    record is written.
//! 7. Every child is reaped. When the init exits, what it wrote is read at once; if a stream
//!    is still held open and the bundle gives the container no pid namespace of its own, the
//!    processes left in its cgroup are killed (`<runtime> --root R kill --all ID KILL`, as
//!    containerd's shim). Output is drained until EOF or 2 s, the memory cgroup's OOM-kill
//!    counter is compared with zero (`runc run` made the cgroup; on v2 followed while the
//!    container runs, with its slice's for a systemd scope: [`oom_watch`]), and the exit file
//!    is written atomically:
//!    `{"pid", "exit_code" (status, or 128+signal), "signal" (number or null), "oom_killed",
//!    "started_at_ns" (runc run returned), "finished_at_ns" (init reaped)}`; exit 0.

pub mod args;
pub mod attach;
pub mod attach_proto;
#[cfg(test)]
mod attach_tests;
pub mod console;
pub mod container_io;
pub mod cri_log;
pub mod detach;
pub mod error;
pub mod exit_record;
pub mod leftovers;
pub mod log_file;
pub mod oom;
pub mod oom_watch;
pub mod runc;
pub mod signals;
pub mod standby;
pub mod supervise;
pub mod sync_pipe;
pub mod timestamp;

use std::ffi::OsString;
use std::time::SystemTime;

use args::MonitorArgs;
use error::{Context, Error, Result};
use exit_record::{exit_code, unix_nanos, ExitRecord};
use log_file::LogFile;
use oom::OomCounter;
use oom_watch::OomWatch;
use sync_pipe::SyncPipe;

/// `bosun monitor ARGS…`: returns the process exit status (see the module docs).
pub fn main(args: Vec<OsString>) -> i32 {
    // The daemon starts us with posix_spawn (default signals, empty mask) except glibc's
    // two internal signals, which its posix_spawn may leave ignored.
    if let Err(e) = crate::sys::spawn::reset_glibc_signals() {
        eprintln!("bosun monitor: reset signals: {e}");
        return 1;
    }
    // A spare started ahead of need forks away now, off StartContainer's path; its
    // arguments come later, on a pipe.
    let detached = args.first().is_some_and(|a| a == standby::FLAG);
    let args = if detached {
        let waited = detach::fork_session().and_then(|side| match side {
            detach::Side::Parent => Ok(None),
            detach::Side::Child => standby::wait_for_args(),
        });
        match waited {
            Ok(Some(args)) => args,
            Ok(None) => return 0,
            Err(e) => {
                eprintln!("bosun monitor: {e}");
                return 1;
            }
        }
    } else {
        args
    };
    let config = match MonitorArgs::parse(&args) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("bosun monitor: {e}");
            return 2;
        }
    };
    let fail = |e: &Error| {
        let e = crate::error::bounded(&e.to_string(), sync_pipe::MESSAGE_MAX).into_owned();
        eprintln!("bosun monitor: container {}: {e}", config.id)
    };
    let sync_fd = match detach::take_sync_fd(config.sync_fd) {
        Ok(fd) => fd,
        Err(e) => {
            fail(&e);
            return 1;
        }
    };
    let mut sync = SyncPipe::new(sync_fd);
    let log = match prepare(&config, &sync) {
        Ok(log) => log,
        Err(e) => {
            fail(&e);
            sync.fail(&e.to_string());
            return 1;
        }
    };
    if !detached {
        match detach::fork_session() {
            Ok(detach::Side::Child) => {}
            Ok(detach::Side::Parent) => return 0,
            Err(e) => {
                fail(&e);
                sync.fail(&e.to_string());
                return 1;
            }
        }
    }
    match run(&config, log, &mut sync) {
        Ok(()) => 0,
        Err(e) => {
            sync.fail(&e.to_string()); // no-op once the container was reported created
            1
        }
    }
}

/// Checks done while the daemon still waits on our exit status: descriptors, directories,
/// the log file.
fn prepare(config: &MonitorArgs, sync: &SyncPipe) -> Result<LogFile> {
    detach::close_inherited_fds(sync.fd())?;
    let config_json = config.bundle.join("config.json");
    if !config_json.is_file() {
        return Err(Error::msg(format!(
            "bundle: {} not found",
            config_json.display()
        )));
    }
    let exit_dir = config.exit_file.parent().unwrap_or(&config.bundle);
    if !exit_dir.is_dir() {
        return Err(Error::msg(format!(
            "exit file directory {} not found",
            exit_dir.display()
        )));
    }
    LogFile::open(&config.log_path)
}

/// The monitor proper, after the fork and in its own session.
fn run(config: &MonitorArgs, mut log: LogFile, sync: &mut SyncPipe) -> Result<()> {
    detach::quiet_stdio()?;
    let signals = signals::Signals::new()?;
    let (console, pipes, stdio) = if config.tty {
        let console = console::ConsoleSocket::bind(&config.bundle)?;
        (Some(console), None, container_io::terminal_runc_stdio())
    } else {
        let (io, stdio) = container_io::pipes(config.stdin, config.log_max_line)?;
        (None, Some(io), stdio)
    };
    let mut attach = attach::AttachServer::bind(&config.bundle, config.stdin_once, config.tty)?;
    // The slice's OOM count before the container exists: the baseline should the container be
    // OOM-killed, and its scope removed, before the watch below starts.
    let counter = OomCounter::for_bundle(&config.bundle, &config.id).ok();
    let slice_before = counter.as_ref().and_then(OomCounter::read_parent);
    runc::run(config, console.as_ref().map(|_| console::NAME), stdio)?;
    let started_at = SystemTime::now();
    let mut io = match (pipes, console) {
        (Some(io), _) => io,
        (None, Some(console)) => {
            container_io::terminal(console.receive()?, config.stdin, config.log_max_line)?
        }
        (None, None) => return Err(Error::msg("no container stdio")),
    };
    let init = runc::read_pid(&runc::pid_file(&config.bundle))?;
    let me = rustix::process::getpid().as_raw_nonzero().get();
    // crun's `run --detach` returns from a first fork while the second (the init's parent)
    // may still be exiting: the init comes to us (child subreaper) a moment later. runc's
    // init is ours at once.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while runc::parent_of(init).is_some_and(|p| p != me) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    match runc::parent_of(init) {
        Some(parent) if parent == me => {}
        other => {
            return Err(Error::msg(format!(
                "init {init} is not the monitor's child (parent {other:?})"
            )))
        }
    }
    // The daemon is told first: what follows cannot fail the start (each is optional), and
    // an exit meanwhile waits in the signalfd for the loop below.
    sync.ready(me, init);
    // The process runs already (and may have been OOM-killed): the cgroup `runc run` just
    // made counts from zero, which is the baseline, not what it reads now.
    let mut oom = counter.map(|c| OomWatch::start_new(c, slice_before));
    // Before the trim below: the JSON parse must not pull its pages back in afterwards.
    let leftovers = leftovers::Leftovers::for_container(config);
    crate::sys::trim::shed_startup_pages();

    let exit = supervise::run(
        init,
        &signals,
        &mut io,
        &mut log,
        Some(&mut attach),
        oom.as_mut(),
        leftovers.as_ref(),
    )?;
    drop(io);
    let (code, signal) = exit_code(exit.status);
    ExitRecord {
        pid: init,
        exit_code: code,
        signal,
        oom_killed: oom
            .as_mut()
            .is_some_and(|w| w.killed(signal == Some(libc::SIGKILL))),
        started_at_ns: unix_nanos(started_at),
        finished_at_ns: unix_nanos(exit.at),
    }
    .write(&config.exit_file)
    .context("record exit")?;
    // Attach clients see the end only now: the exit is on disk when they look for it.
    drop(attach);
    Ok(())
}
