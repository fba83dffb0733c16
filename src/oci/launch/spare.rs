//! Spawning a monitor process, and keeping one spare (`bosun monitor --standby`) ready for the next StartContainer.
//!
//! A monitor's exec and start-up take ~2 ms (loader, relocations, Rust runtime); a spare has
//! done them before the call, which hands it the container's arguments on a pipe instead
//! (issue 13). The slot holds at most one spare, for one program; a launch takes it when its
//! arguments fit the spare's command line ([`standby::fits`]) and has a new one made in the
//! background once its monitor has reported (not while its runc runs).
//! A spare that died or was never made costs nothing but the spawn the call does itself.
//! The spare forks away at once (the process we spawned exits and is reaped in the
//! background), so it is no child of ours: dropped, or when the daemon dies, its argument pipe
//! reads EOF and it exits.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::monitor::args::SYNC_FD;
use crate::monitor::standby;
use crate::sys::vfork;

/// A spawned monitor process with the read ends of its sync pipe and stderr.
#[derive(Debug)]
pub struct Spawned {
    /// The process, which forks the monitor proper and exits; `None` for a spare, which did
    /// so before it was handed its container (its status is no longer ours to read).
    pub child: Option<vfork::Child>,
    /// The sync pipe's read end: the report line.
    pub sync: OwnedFd,
    /// Its stderr's read end.
    pub stderr: OwnedFd,
}

/// Spawns `program monitor <args>` with the sync pipe on fd 3 and stderr on a pipe, and the
/// argument pipe's read end on fd 4 when `args_pipe` is given.
fn spawn(
    program: &Path,
    args: &[OsString],
    args_pipe: Option<&OwnedFd>,
) -> std::io::Result<Spawned> {
    let pipe = || rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC);
    let (sync, sync_write) = pipe()?;
    let (stderr, err_write) = pipe()?;
    let mut dup = vec![(err_write.as_fd(), 2), (sync_write.as_fd(), SYNC_FD)];
    if let Some(fd) = args_pipe {
        dup.push((fd.as_fd(), standby::ARGS_FD));
    }
    let setup = vfork::Setup {
        null: vec![0, 1],
        dup,
    };
    let mut argv: Vec<OsString> = vec!["monitor".into()];
    argv.extend(args.iter().cloned());
    // Our copies of the write ends close when this returns: EOF once the monitor is done.
    let child = Some(vfork::spawn(program, &argv, &setup)?);
    Ok(Spawned {
        child,
        sync,
        stderr,
    })
}

/// Spawns `program monitor <args>`: the cold path, when no spare fits.
pub fn spawn_monitor(program: &Path, args: &[OsString]) -> std::io::Result<Spawned> {
    spawn(program, args, None)
}

/// Waits for the process that forks a spare away, in the background: it exits at once.
fn reap(mut child: vfork::Child) {
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(async move {
                match child.wait().await {
                    Ok(status) if status.success() => {}
                    Ok(status) => tracing::warn!(%status, "spare monitor failed to start"),
                    Err(e) => tracing::warn!(error = %e, "spare monitor: wait"),
                }
            });
        }
        // Never so in the daemon; dropped, it is killed and reaped, and the launch that
        // would take the spare finds its pipe closed and spawns a monitor instead.
        Err(_) => drop(child),
    }
}

/// A monitor waiting for its arguments.
#[derive(Debug)]
struct Spare {
    program: PathBuf,
    spawned: Spawned,
    args: OwnedFd,
}

impl Spare {
    fn start(program: &Path) -> std::io::Result<Spare> {
        let (read, args) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        let mut spawned = spawn(program, &standby::placeholder(), Some(&read))?;
        if let Some(child) = spawned.child.take() {
            reap(child);
        }
        Ok(Spare {
            program: program.to_path_buf(),
            spawned,
            args,
        })
    }

    /// Gives the spare its arguments; an error (it died: EPIPE) drops it.
    fn hand_over(self, args: &[OsString]) -> std::io::Result<Spawned> {
        let bytes = standby::encode(args);
        // Never blocks: at most ROOM bytes into an empty pipe (64 KiB).
        let mut done = 0;
        while done < bytes.len() {
            done += rustix::io::write(&self.args, &bytes[done..])?;
        }
        // Dropping the write end is the spare's EOF.
        Ok(self.spawned)
    }
}

/// At most one spare monitor.
#[derive(Debug, Default)]
pub struct SpareSlot(Mutex<Option<Spare>>);

impl SpareSlot {
    /// Spawns `program monitor <args>`, through the spare when there is one for `program`
    /// and the arguments fit it. The caller refills the slot when it can spare the CPU
    /// ([`SpareSlot::refill_later`]).
    pub fn spawn(&self, program: &Path, args: &[OsString]) -> std::io::Result<Spawned> {
        // A spare that cannot take these arguments stays for the next launch.
        let spare = standby::fits(args).then(|| self.take(program)).flatten();
        let spawned = match spare.map(|s| s.hand_over(args)) {
            Some(Ok(spawned)) => spawned,
            Some(Err(e)) => {
                tracing::debug!(error = %e, "spare monitor gone: spawning one");
                spawn_monitor(program, args)?
            }
            None => spawn_monitor(program, args)?,
        };
        Ok(spawned)
    }

    /// Makes a spare for `program` in the background unless the slot holds one.
    pub fn refill_later(self: &Arc<Self>, program: &Path) {
        if self.is_full() {
            return;
        }
        let (slot, program) = (Arc::clone(self), program.to_path_buf());
        // posix_spawn waits for the exec: a blocking call, off the caller's path.
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(move || slot.refill(&program))),
            Err(_) => slot.refill(&program),
        }
    }

    /// Whether the slot holds a spare.
    pub fn is_full(&self) -> bool {
        self.lock().is_some()
    }

    fn take(&self, program: &Path) -> Option<Spare> {
        let mut slot = self.lock();
        match slot.take() {
            Some(s) if s.program == program => Some(s),
            other => {
                // Another program's spare stays for its own launches.
                *slot = other;
                None
            }
        }
    }

    /// Makes a spare for `program` now unless the slot holds one.
    fn refill(&self, program: &Path) {
        if self.lock().is_some() {
            return;
        }
        // Spawned without the lock: a concurrent launch does not wait for it.
        match Spare::start(program) {
            Ok(spare) => {
                let mut slot = self.lock();
                if slot.is_none() {
                    *slot = Some(spare);
                } // else another launch refilled it first: this one is dropped, reads EOF, exits
            }
            Err(e) => tracing::warn!(error = %e, "no spare monitor"),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Spare>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}
