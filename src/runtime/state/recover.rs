//! Crash recovery: a stored container status reconciled with what the container's monitor left.

use super::status::{reason_for, ContainerState, ContainerStatus};
pub use crate::monitor::exit_record::ExitRecord;

/// Reconciles a stored container status with what the monitor left (first matching row wins):
///
/// | stored state        | exit record | monitor | result                                            |
/// |---------------------|-------------|---------|---------------------------------------------------|
/// | EXITED              | any         | any     | unchanged (already final)                         |
/// | RUNNING/CREATED/UNKNOWN | yes     | any     | EXITED with the record's code, finish time, reason |
/// | RUNNING             | no          | alive   | RUNNING, unchanged                                |
/// | RUNNING             | no          | dead    | UNKNOWN: "monitor gone without an exit record"    |
/// | CREATED, no monitor | no          | —       | CREATED, unchanged (issue 13: never started; the caller checks its bundle and a start the crash interrupted) |
/// | CREATED             | no          | alive   | CREATED, unchanged (caller checks `runc state`)   |
/// | CREATED             | no          | dead    | UNKNOWN: "monitor gone before start"              |
/// | UNKNOWN             | no          | any     | unchanged (stays UNKNOWN)                          |
///
/// `ExitRecord` is the monitor's own type (`crate::monitor::exit_record`), reused as is.
pub fn reconcile(
    status: ContainerStatus,
    exit_record: Option<ExitRecord>,
    monitor_alive: bool,
) -> ContainerStatus {
    let mut s = status;
    let state = s.state();
    if state == ContainerState::Exited {
        return s;
    }
    if let Some(rec) = exit_record {
        let finished = rec.finished_at_ns.max(1);
        if s.created_ns <= 0 {
            s.created_ns = rec.started_at_ns.max(1);
        }
        if s.started_ns <= 0 {
            s.started_ns = rec.started_at_ns.max(1);
        }
        if s.pid == 0 {
            s.pid = u32::try_from(rec.pid).unwrap_or(0);
        }
        s.unknown = false;
        s.finished_ns = finished;
        s.exit_code = rec.exit_code;
        s.reason = reason_for(rec.exit_code, rec.oom_killed).to_string();
        s.message.clear();
        return s;
    }
    match (state, monitor_alive) {
        (ContainerState::Running, false) => {
            let msg = format!(
                "monitor (pid {}) gone without an exit record",
                s.monitor_pid
            );
            s.mark_unknown(msg);
        }
        (ContainerState::Created, false) if s.monitor_pid != 0 => {
            let msg = format!("monitor (pid {}) gone before start", s.monitor_pid);
            s.mark_unknown(msg);
        }
        _ => {}
    }
    s
}
