//! Recovery of created containers: a StartContainer the daemon's crash interrupted is settled by what its monitor did.
//!
//! A created container has no monitor (issue 13); StartContainer launches one, which runs
//! `runc run --detach`, and records its pid only with the start. A daemon killed in between
//! leaves a CREATED record and maybe a monitor. The monitor is the authority:
//!
//! | what is found                                   | result                                     |
//! |-------------------------------------------------|--------------------------------------------|
//! | its exit record                                 | EXITED with the record's code and reason    |
//! | `runc state` running, one monitor alive         | RUNNING (start time approximate), watched  |
//! | no monitor, no record                           | CREATED: never started, or `runc run` failed (what runc left is deleted); StartContainer may run again |
//! | a monitor still busy after [`SETTLE`]           | UNKNOWN, its monitor watched for the exit   |
//!
//! A creation the crash interrupted (the identity, written last, is missing) or whose bundle
//! is gone (a reboot) cannot start: UNKNOWN, for the kubelet to remove.

use std::sync::Arc;
use std::time::Duration;

use super::service::Runtime;
use super::state::meta::{ContainerEntry, ContainerMeta};
use super::state::paths;
use super::state::recover::reconcile;
use super::state::status::{now_ns, ContainerStatus};
use crate::oci::launch::{find_monitors, read_exit};
use crate::oci::ContainerExit;

/// How long recovery waits for an interrupted start's monitor to settle (`runc run` takes
/// tens of milliseconds; a busy node more).
const SETTLE: Duration = Duration::from_secs(10);

/// Why created container `meta` (no monitor) can never start, if it cannot.
pub(super) fn unstartable(status: &ContainerStatus, meta: &ContainerMeta) -> Option<&'static str> {
    if status.user.is_none() {
        return Some("creation interrupted by a daemon crash");
    }
    let config = paths::bundle(&meta.state_dir).join("config.json");
    (!config.exists()).then_some("its bundle is gone (node rebooted?)")
}

impl Runtime {
    /// Settles created container `entry` (no monitor recorded) after a restart; see the
    /// module docs. `monitored`: a monitor of it was running when recovery began (one scan
    /// for all: a node may hold a thousand created containers).
    pub(super) async fn settle_created(self: &Arc<Self>, entry: &ContainerEntry, monitored: bool) {
        let id = entry.id().to_string();
        let exit_file = paths::exit_file(&entry.meta().state_dir);
        let deadline = tokio::time::Instant::now() + SETTLE;
        let mut first = true;
        loop {
            let monitors = if first && !monitored {
                Vec::new()
            } else {
                find_monitors(&id)
            };
            first = false;
            if let ContainerExit::Recorded(r) = read_exit(&exit_file) {
                let done = reconcile(entry.status(), Some(r), false);
                self.write_recovered(entry, done);
                self.handle(&id).set_exited();
                self.delete_runc_state(&id).await;
                return;
            }
            if monitors.is_empty() {
                // Never started, or its `runc run` failed: it may start (again).
                if self.handler_of(&id).root.join(&id).exists() {
                    if let Err(e) = self.runc(&id).delete(&id, true).await {
                        tracing::warn!(container = %id, "recovery: runc delete: {e}");
                    }
                }
                return;
            }
            let state = self.runc(&id).state(&id).await;
            if let (Ok(Some(st)), [monitor]) = (state, monitors.as_slice()) {
                if st.status == "running" && st.pid > 0 {
                    self.adopt_started(entry, *monitor, st.pid.unsigned_abs())
                        .await;
                    return;
                }
            }
            if tokio::time::Instant::now() >= deadline {
                let monitor = monitors[0];
                let mut s = entry.status();
                s.monitor_pid = monitor.unsigned_abs();
                s.mark_unknown(format!(
                    "start interrupted by a daemon crash; its monitor (pid {monitor}) did not settle"
                ));
                self.write_recovered(entry, s);
                self.watch_exit(&id, monitor);
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A start the crash interrupted got its container running: RUNNING from now on.
    async fn adopt_started(self: &Arc<Self>, entry: &ContainerEntry, monitor: i32, pid: u32) {
        let id = entry.id().to_string();
        crate::oci::runc::wait_exec(pid, &self.handler_of(&id).binary).await;
        let mut s = entry.status();
        s.monitor_pid = monitor.unsigned_abs();
        if let Err(e) = s.start(now_ns(), pid) {
            tracing::warn!(container = %id, "recovery: {e}");
        }
        self.write_recovered(entry, s);
        tracing::warn!(
            container = %id,
            "recovery: started while the daemon went down; start time is approximate"
        );
        // The stage outlived the crash: runc has its own copies of the mounts now.
        let stage = crate::oci::stage::stage_dir(&entry.meta().state_dir);
        if let Err(e) = crate::oci::stage::unstage(&stage) {
            tracing::warn!(container = %id, "recovery: {e}");
        }
        self.handle(&id).set_init(pid);
        self.watch_exit(&id, monitor);
    }

    /// Writes status `s` recovery settled on (a failure is logged: memory keeps the old one).
    fn write_recovered(&self, entry: &ContainerEntry, s: ContainerStatus) {
        if let Err(e) = entry.update(|cur| {
            *cur = s;
            Ok(())
        }) {
            tracing::warn!(container = %entry.id(), "recovery: write status: {e}");
        }
    }
}
