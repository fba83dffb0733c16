//! StartContainer: the container's monitor is launched and runs `runc run --detach` on the bundle CreateContainer wrote.

use std::path::PathBuf;
use std::sync::Arc;

use super::events::EventKind;
use super::service::{require_id, Runtime};
use super::state::meta::ContainerEntry;
use super::state::paths;
use super::state::status::{now_ns, ContainerState, ContainerStatus, SandboxState};
use crate::error::{Error, ErrorKind, Result};
use crate::oci::{Launched, MonitorArgs, MonitorLaunch};

impl Runtime {
    /// StartContainer: launches the container's monitor, which runs it (`runc run --detach`)
    /// and reports its pids; returns once the init has exec'd the container's process. A
    /// failure leaves the container EXITED with reason StartError and runc's message (exit
    /// code 128, as containerd), nothing of the attempt behind, and is returned. The pod
    /// must be ready (its namespaces are joined now).
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let sandbox = self.sandbox(&entry.meta().sandbox_id)?;
        // A StopPodSandbox waits for this start (then kills what it started), never the
        // reverse order with the container joining namespaces being torn down.
        let pod_lock = self.sandbox_lock(sandbox.id());
        let _pod = pod_lock.read().await;
        let handle = self.handle(&id);
        let _life = handle.lifecycle.lock().await;
        // A RemoveContainer that held the lock first has removed it: nothing may be started
        // for a container no list shows any more (issue 28).
        if self.state.containers.get(&id).is_err() {
            return Err(Error::not_found(format!(
                "container {id}: start: removed while the start waited"
            )));
        }
        let st = entry.status();
        if st.state() != ContainerState::Created || st.removing {
            return Err(Error::precondition(format!(
                "container {id}: start: container is {:?}",
                st.state()
            )));
        }
        if st.monitor_pid != 0 {
            return self.start_created_by_runc(&entry, &st).await;
        }
        let pod_state = sandbox.status().state();
        if pod_state != SandboxState::Ready {
            return Err(Error::precondition(format!(
                "container {id}: start: its sandbox {} is {pod_state:?}, not ready",
                sandbox.id()
            )));
        }
        // runc's cgroup join waits out an RCU grace period; it starts now, beside the monitor.
        self.warmer.warm();
        // Stamped before `runc run`: a process that exits at once is reaped (and its finish
        // time recorded by the monitor) before the monitor reports.
        let started = now_ns();
        crate::failpoint!("container.start.before-runc");
        let t0 = std::time::Instant::now();
        let launch = self.monitor_launch(&entry);
        // The next spare is made when this start is done, whichever way it ends.
        let _restock = Restock(self.launcher.as_ref(), &launch);
        let launched = self.run_monitor(&entry, &launch).await;
        let launched = match launched {
            Ok(l) => l,
            Err(e) => {
                let msg = e.message().to_string();
                if let Err(w) = entry.update(|s| s.fail_start(now_ns(), msg.clone())) {
                    tracing::warn!(container = %id, "record the failed start: {w}");
                }
                // Never runs now: whoever waits for its end may go on.
                handle.set_exited();
                // runc destroys what a failed `runc run` made; a monitor that did not report
                // in time may still have it running.
                if self.handler_of(&id).root.join(&id).exists() {
                    if let Err(e) = self.runc(&id).delete(&id, true).await {
                        tracing::warn!(container = %id, "start failed: runc delete: {e}");
                    }
                }
                // The container's own process that cannot start (its executable missing from
                // the image) is the caller's; a monitor that timed out is the node's, never the
                // caller's deadline.
                let kind = match e.kind() {
                    ErrorKind::FailedPrecondition => ErrorKind::FailedPrecondition,
                    _ => ErrorKind::Internal,
                };
                return Err(e.with_kind(kind));
            }
        };
        let monitor_us = t0.elapsed().as_micros() as u64;
        crate::failpoint!("container.start.launched");
        let pid = u32::try_from(launched.init_pid).unwrap_or(0);
        crate::oci::runc::wait_exec(pid, &self.handler_of(&id).binary).await;
        crate::failpoint!("container.start.runc-started");
        let recorded = entry.update(|s| {
            s.monitor_pid = u32::try_from(launched.monitor_pid).unwrap_or(0);
            s.start(started, pid)
        });
        // The monitor records the exit whatever happens below.
        self.watch_exit(&id, launched.monitor_pid);
        if let Err(e) = recorded {
            // Running, but not recorded as such: end it (its exit is recorded as it comes).
            self.kill_all(&id).await;
            return Err(e.context(format!("container {id}: start")));
        }
        crate::failpoint!("container.start.done");
        handle.set_init(pid);
        if launch.args.restore.is_some() {
            self.restored(&id, pid);
        }
        tracing::info!(
            container = %id,
            pid,
            monitor_us,
            total_us = t0.elapsed().as_micros() as u64,
            "container started"
        );
        self.emit(EventKind::Started, &id, &entry.meta().sandbox_id);
        Ok(())
    }

    /// The monitor to start for created container `entry`.
    fn monitor_launch(&self, entry: &ContainerEntry) -> MonitorLaunch {
        let meta = entry.meta();
        let handler = self.handlers.recorded(&meta.runtime_handler);
        let log_path = if meta.log_path.is_empty() {
            PathBuf::from("/dev/null")
        } else {
            PathBuf::from(&meta.log_path)
        };
        let mut args = MonitorArgs::new(
            entry.id(),
            paths::bundle(&meta.state_dir),
            &handler.binary,
            &handler.root,
            log_path,
            paths::exit_file(&meta.state_dir),
        );
        args.stdin = meta.request.stdin;
        args.stdin_once = meta.request.stdin_once;
        args.tty = meta.request.tty;
        args.systemd_cgroup = self.config.cgroup_driver == crate::config::CgroupDriver::Systemd;
        args.runtime_options = handler.options.clone();
        args.restore = self.restore_from(entry.id());
        let restoring = args.restore.is_some();
        let mut launch = MonitorLaunch {
            program: self.binary.clone(),
            ..MonitorLaunch::new(args)
        };
        if restoring {
            // CRIU restores the whole memory of the checkpoint before runc returns.
            launch.timeout = crate::oci::runc::checkpoint::CHECKPOINT_TIMEOUT;
        }
        launch
    }

    /// Launches the monitor of created container `entry` (it runs the container and reports
    /// its pids), then detaches the mounts staged for it on the host: runc has copied them
    /// into the container's mount namespace, or failed.
    async fn run_monitor(
        &self,
        entry: &ContainerEntry,
        launch: &MonitorLaunch,
    ) -> Result<Launched> {
        let launched = self.launcher.launch(launch).await;
        let stage = crate::oci::stage::stage_dir(&entry.meta().state_dir);
        // Most containers stage nothing: one stat here, no blocking-pool hop on the path.
        let absent = std::fs::symlink_metadata(&stage)
            .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound);
        if !absent {
            tokio::task::spawn_blocking(move || crate::oci::stage::unstage(&stage))
                .await
                .map_err(|e| Error::internal(format!("unstage task: {e}")))??;
        }
        launched
    }

    /// StartContainer of a container created by a bosun before issue 13, whose monitor holds
    /// its init inside `runc create`: `runc start` releases it.
    async fn start_created_by_runc(
        &self,
        entry: &ContainerEntry,
        st: &ContainerStatus,
    ) -> Result<()> {
        let id = entry.id();
        let started = now_ns();
        match self.runc(id).start(id).await {
            Ok(()) => {
                crate::oci::runc::wait_exec(st.pid, &self.handler_of(id).binary).await;
                entry.update(|s| s.start(started, st.pid))?;
                self.handle(id).set_init(st.pid);
                tracing::info!(container = %id, pid = st.pid, "container started");
                self.emit(EventKind::Started, id, &entry.meta().sandbox_id);
                Ok(())
            }
            Err(e) => {
                let msg = e.message().to_string();
                let _ = entry.update(|s| s.fail_start(now_ns(), msg.clone()));
                // The init may still sit in runc create: kill it so the monitor ends.
                let _ = self.runc(id).delete(id, true).await;
                Err(e.with_kind(ErrorKind::Internal))
            }
        }
    }
}

/// Asks the launcher for its next spare when dropped: at the end of a start, either way.
struct Restock<'a>(&'a dyn crate::oci::MonitorLauncher, &'a MonitorLaunch);

impl Drop for Restock<'_> {
    fn drop(&mut self) {
        self.0.restock(self.1);
    }
}
