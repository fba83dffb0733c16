//! StopContainer (signal, deadline that only shortens, SIGKILL of every process) and exit handling.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::events::EventKind;
use super::handle::StopRequest;
use super::service::{require_id, Runtime};
use super::state::paths;
use super::state::status::{now_ns, reason_for, ContainerState, EXIT_CODE_UNKNOWN, REASON_UNKNOWN};
use crate::error::Result;
use crate::oci::ContainerExit;

/// The longest stop grace honoured (100 years): StopContainer timeouts are clamped to it.
const MAX_GRACE_SECS: i64 = 100 * 365 * 24 * 3600;

impl Runtime {
    /// StopContainer: the stop signal (CRI stop_signal, else the image's STOPSIGNAL, else
    /// SIGTERM), then SIGKILL of every process at `now + timeout_secs` (`<= 0`: at once), then
    /// the wait for the exit. The stop runs in its own task: a caller that goes away does not
    /// cut the grace short. A concurrent stop only moves the deadline earlier. Idempotent;
    /// stopping a stopped or unknown container succeeds.
    pub async fn stop_container(self: &Arc<Self>, id: &str, timeout_secs: i64) -> Result<()> {
        require_id("container", id)?;
        let Some(entry) = self.find_container(id)? else {
            return Ok(());
        };
        let id = entry.id().to_string();
        let state = entry.status().state();
        if !matches!(state, ContainerState::Running | ContainerState::Unknown) {
            return Ok(());
        }
        let handle = self.handle(&id);
        if handle.is_exited() {
            if state == ContainerState::Unknown {
                // Nothing is left to signal (its monitor is gone): the stop makes it EXITED.
                entry.update_even_if_full(|s| {
                    s.exit(now_ns(), EXIT_CODE_UNKNOWN, false)?;
                    s.reason = REASON_UNKNOWN.to_string();
                    Ok(())
                })?;
            }
            return Ok(());
        }
        // A grace beyond a century is the same wish; Instant + i64::MAX seconds would panic.
        let grace = Duration::from_secs(timeout_secs.clamp(0, MAX_GRACE_SECS).unsigned_abs());
        let deadline = Instant::now() + grace;
        if let StopRequest::Start(deadline_rx) = handle.request_stop(deadline) {
            let rt = self.clone();
            let signal = entry.meta().stop_signal();
            let kill_now = timeout_secs <= 0;
            let cid = id.clone();
            tokio::spawn(async move {
                rt.run_stop(&cid, signal, kill_now, deadline_rx).await;
            });
        }
        handle.exited().await;
        Ok(())
    }

    /// The stop task: first signal, then follow the (only shortening) deadline, then KILL.
    async fn run_stop(
        self: Arc<Self>,
        id: &str,
        signal: i32,
        kill_now: bool,
        mut deadline: tokio::sync::watch::Receiver<Instant>,
    ) {
        let handle = self.handle(id);
        if !kill_now {
            tracing::debug!(container = %id, signal, "stop: sending the stop signal");
            if !handle.signal_init(signal) {
                if let Err(e) = self.runc(id).kill(id, signal, false).await {
                    tracing::debug!(container = %id, "stop signal: {e}");
                }
            }
            crate::failpoint!("container.stop.signalled");
            loop {
                let at = *deadline.borrow_and_update();
                tokio::select! {
                    _ = handle.exited() => {
                        handle.stop_done();
                        return;
                    }
                    _ = tokio::time::sleep_until(at) => break,
                    changed = deadline.changed() => {
                        if changed.is_err() {
                            break;
                        }
                    }
                }
            }
        }
        let late = Instant::now().saturating_duration_since(*deadline.borrow());
        tracing::debug!(container = %id, late_us = late.as_micros() as u64, "stop: SIGKILL");
        self.kill_all(id).await;
        crate::failpoint!("container.stop.killed");
        handle.exited().await;
        handle.stop_done();
    }

    /// SIGKILL to the init at once (pidfd). When the container has its own pid namespace the
    /// kernel kills every other process of it with its init; otherwise (pod or host pid
    /// namespace) every process of its cgroup gets SIGKILL too: with one write to v2's
    /// `cgroup.kill` where the kernel has it, else `runc kill --all`. Skipping that process
    /// where it is not needed keeps the CPU free for the exit path (2 cores).
    pub(super) async fn kill_all(&self, id: &str) {
        let handle = self.handle(id);
        let entry = self.state.containers.get(id).ok();
        let own_pid_ns = entry.as_ref().is_some_and(|e| {
            e.meta().request.linux.security.namespaces.pid == crate::oci::NamespaceMode::Container
        });
        if handle.signal_init(libc::SIGKILL) && own_pid_ns {
            return;
        }
        let dir = entry.and_then(|e| {
            crate::cgroups::container_dir(self.config.cgroup_driver, &e.meta().cgroups_path)
        });
        if let Some(dir) = dir {
            match self.stats.reader().kill(&dir) {
                Ok(true) => {
                    tracing::debug!(container = %id, cgroup = %dir, "stop: cgroup.kill");
                    return;
                }
                Ok(false) => {}
                Err(e) => tracing::debug!(container = %id, "{dir}/cgroup.kill: {e}"),
            }
        }
        if let Err(e) = self.runc(id).kill(id, libc::SIGKILL, true).await {
            tracing::debug!(container = %id, "runc kill --all: {e}");
        }
    }

    /// Watches container `id`'s monitor and records the exit when it comes (also for
    /// monitors re-adopted after a restart).
    pub(super) fn watch_exit(self: &Arc<Self>, id: &str, monitor_pid: i32) {
        let rt = self.clone();
        let id = id.to_string();
        tokio::spawn(async move {
            let Ok(entry) = rt.state.containers.get(&id) else {
                return;
            };
            let exit_file = paths::exit_file(&entry.meta().state_dir);
            let exit = rt.launcher.wait_exit(&id, monitor_pid, &exit_file).await;
            rt.record_exit(&id, exit).await;
        });
    }

    /// Writes the exit into the status, publishes it, then cleans up the runc state (and with
    /// it the cgroup, and any process left in a shared pid namespace).
    pub(super) async fn record_exit(&self, id: &str, exit: ContainerExit) {
        let handle = self.handle(id);
        {
            let _life = handle.lifecycle.lock().await;
            crate::failpoint!("container.exit.observed");
            if let Ok(entry) = self.state.containers.get(id) {
                // The exit is a fact (the monitor's record): on a full disk it is published
                // anyway, or the container would stay RUNNING and unremovable (issue 28).
                let result = entry.update_even_if_full(|s| {
                    match (&exit, s.state()) {
                        (_, ContainerState::Exited) => {}
                        (ContainerExit::Recorded(r), _) => {
                            let at = r.finished_at_ns.max(1);
                            if s.started_ns <= 0 && s.state() != ContainerState::Created {
                                s.started_ns = r.started_at_ns.max(1);
                            }
                            s.unknown = false;
                            s.finished_ns = at;
                            s.exit_code = r.exit_code;
                            s.reason = reason_for(r.exit_code, r.oom_killed).to_string();
                            if s.created_ns <= 0 {
                                s.created_ns = at;
                            }
                        }
                        (ContainerExit::Unknown(why), _) => s.mark_unknown(why.clone()),
                    }
                    // Runtime-side reasons only: the kubelet reads the termination-message file
                    // itself and appends it (issue 12: "done: done"); bosun's supervisor does
                    // the same at the pod layer.
                    if let ContainerExit::Unknown(why) = &exit {
                        s.message = why.clone();
                    }
                    Ok(())
                });
                match result {
                    Ok(s) => tracing::info!(
                        container = %id, exit_code = s.exit_code, reason = %s.reason, "container exited"
                    ),
                    Err(e) => tracing::error!(container = %id, "record exit: {e}"),
                }
            }
        }
        // Published before the cleanup: a StopContainer waiting on it returns now, not after
        // `runc delete` (tens of ms); a RemoveContainer that follows deletes again harmlessly.
        crate::failpoint!("container.exit.recorded");
        handle.set_exited();
        if let Ok(entry) = self.state.containers.get(id) {
            self.emit(EventKind::Stopped, id, &entry.meta().sandbox_id);
        }
        if let Err(e) = self.runc(id).delete_stopped(id).await {
            tracing::debug!(container = %id, "runc delete after exit: {e}");
        }
    }
}
