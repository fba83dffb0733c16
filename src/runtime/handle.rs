//! A container's in-memory companion: its lifecycle and checkpoint locks, exit notification, in-flight stop and init pidfd.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::time::Instant;

use super::state::lock;

/// Per-container runtime state that is not persisted.
#[derive(Debug)]
pub struct Handle {
    /// Serialises create/start/remove steps; never held while waiting for an exit.
    pub lifecycle: tokio::sync::Mutex<()>,
    /// Held by a checkpoint for its CRIU dump and archive (seconds to minutes), without the
    /// lifecycle lock: a stop meanwhile signals and kills at its deadline (the kill makes the
    /// dump fail); a second checkpoint, RemoveContainer and UpdateContainerResources wait for
    /// it (as containerd's shim and CRI-O's per-container lock make them wait).
    pub checkpoint: tokio::sync::Mutex<()>,
    /// True once the exit is recorded in the status (or the container can no longer run).
    exited: watch::Sender<bool>,
    /// The deadline of the stop in flight, if any.
    stop: Mutex<Option<watch::Sender<Instant>>>,
    /// A pidfd of the container's init (signals cannot hit a recycled pid).
    init: Mutex<Option<Arc<OwnedFd>>>,
    /// The container's process settings from its bundle, the template of every exec (read
    /// once: exec probes run every few seconds).
    exec_template: Mutex<Option<Arc<oci_spec::runtime::Process>>>,
}

/// What [`Handle::request_stop`] decided.
pub enum StopRequest {
    /// No stop was in flight: the caller starts one that follows this deadline.
    Start(watch::Receiver<Instant>),
    /// A stop is in flight; its deadline is now the earlier of the two.
    Joined,
}

impl Handle {
    /// A handle for a container that has not exited.
    pub fn new() -> Arc<Handle> {
        Arc::new(Handle {
            lifecycle: tokio::sync::Mutex::new(()),
            checkpoint: tokio::sync::Mutex::new(()),
            exited: watch::channel(false).0,
            stop: Mutex::new(None),
            init: Mutex::new(None),
            exec_template: Mutex::new(None),
        })
    }

    /// Publishes the exit (idempotent).
    pub fn set_exited(&self) {
        self.exited.send_replace(true);
    }

    /// Whether the exit was published.
    pub fn is_exited(&self) -> bool {
        *self.exited.borrow()
    }

    /// Resolves once the exit is published.
    pub async fn exited(&self) {
        let mut rx = self.exited.subscribe();
        let _ = rx.wait_for(|e| *e).await;
    }

    /// Registers a stop with `deadline`: a second stop can only move the deadline earlier.
    pub fn request_stop(&self, deadline: Instant) -> StopRequest {
        let mut slot = lock(&self.stop);
        if let Some(tx) = slot.as_ref() {
            tx.send_if_modified(|d| {
                let earlier = deadline < *d;
                if earlier {
                    *d = deadline;
                }
                earlier
            });
            return StopRequest::Joined;
        }
        let (tx, rx) = watch::channel(deadline);
        *slot = Some(tx);
        StopRequest::Start(rx)
    }

    /// Whether a stop is in flight (signalled, waiting for the exit or its deadline).
    pub fn stop_in_flight(&self) -> bool {
        lock(&self.stop).is_some()
    }

    /// The stop in flight has finished.
    pub fn stop_done(&self) {
        *lock(&self.stop) = None;
    }

    /// The cached exec template, if loaded.
    pub fn exec_template(&self) -> Option<Arc<oci_spec::runtime::Process>> {
        lock(&self.exec_template).clone()
    }

    /// Caches the exec template.
    pub fn set_exec_template(&self, process: Arc<oci_spec::runtime::Process>) {
        *lock(&self.exec_template) = Some(process);
    }

    /// Remembers the init's pidfd (opened while the pid was known to be the init).
    pub fn set_init(&self, pid: u32) {
        let fd = rustix::process::Pid::from_raw(pid as i32).and_then(|p| {
            rustix::process::pidfd_open(p, rustix::process::PidfdFlags::empty()).ok()
        });
        *lock(&self.init) = fd.map(Arc::new);
    }

    /// Sends `signal` to the init through its pidfd; false when that is not possible (no
    /// pidfd, a realtime signal, or the process is gone).
    pub fn signal_init(&self, signal: i32) -> bool {
        let Some(sig) = rustix::process::Signal::from_named_raw(signal) else {
            return false;
        };
        let fd = lock(&self.init).clone();
        fd.is_some_and(|fd| rustix::process::pidfd_send_signal(&*fd, sig).is_ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_second_stop_only_moves_the_deadline_earlier() {
        let h = Handle::new();
        let now = Instant::now();
        let StopRequest::Start(rx) = h.request_stop(now + Duration::from_secs(30)) else {
            panic!("first stop must start");
        };
        assert!(matches!(
            h.request_stop(now + Duration::from_secs(60)),
            StopRequest::Joined
        ));
        assert_eq!(*rx.borrow(), now + Duration::from_secs(30));
        assert!(matches!(
            h.request_stop(now + Duration::from_secs(1)),
            StopRequest::Joined
        ));
        assert_eq!(*rx.borrow(), now + Duration::from_secs(1));
        h.stop_done();
        assert!(matches!(
            h.request_stop(now + Duration::from_secs(60)),
            StopRequest::Start(_)
        ));
    }

    #[tokio::test]
    async fn exit_is_published_once_and_seen_by_late_waiters() {
        let h = Handle::new();
        assert!(!h.is_exited());
        h.set_exited();
        h.set_exited();
        tokio::time::timeout(Duration::from_secs(1), h.exited())
            .await
            .expect("late waiter sees the exit");
        assert!(!h.signal_init(libc::SIGTERM), "no pidfd, no signal");
    }
}
