//! Learning when a container exited, from its monitor's exit record: [`ExitWatcher`], also for monitors started before a daemon restart, and finding monitors by their command line.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::monitor::exit_record::ExitRecord;
use crate::sys::PidFd;

/// How a container ended, as far as its monitor recorded it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ContainerExit {
    /// The monitor's exit record.
    Recorded(ExitRecord),
    /// The monitor is gone and left no readable record (the reason says why).
    Unknown(String),
}

/// Waits for a container's exit through its monitor — a child of ours or not (after a daemon
/// restart): a pidfd of the monitor becomes readable when it exits, and the exit file, written
/// before that, is then read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExitWatcher {
    id: String,
    monitor_pid: i32,
    exit_file: PathBuf,
}

impl ExitWatcher {
    /// Watches the monitor `monitor_pid` of container `id`, which writes `exit_file`.
    pub fn new(id: impl Into<String>, monitor_pid: i32, exit_file: impl Into<PathBuf>) -> Self {
        ExitWatcher {
            id: id.into(),
            monitor_pid,
            exit_file: exit_file.into(),
        }
    }

    /// Resolves once the monitor has exited (at once if it is already gone); never panics.
    pub async fn wait(&self) -> ContainerExit {
        match PidFd::open(self.monitor_pid) {
            // The pid may have been reused since the monitor was recorded: check it is ours.
            // If it dies from here on, the pidfd (bound to this very process) reports it.
            Ok(fd) if self.monitor_alive() => {
                if fd.exited().await.is_err() {
                    self.poll_until_gone().await;
                }
            }
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(_) => self.poll_until_gone().await,
        }
        read_exit(&self.exit_file)
    }

    /// The fallback when no pidfd can be had: polls the monitor's command line.
    async fn poll_until_gone(&self) {
        while self.monitor_alive() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether the watched monitor still runs.
    fn monitor_alive(&self) -> bool {
        monitor_alive(self.monitor_pid, &self.id)
    }
}

/// Whether `pid` runs `… monitor --id <id> …`: the monitor of container `id`, not a process
/// that recycled its pid (and not a zombie, which has no command line).
pub fn monitor_alive(pid: i32, id: &str) -> bool {
    if pid <= 0 {
        return false;
    }
    let cmdline = std::fs::read(format!("/proc/{pid}/cmdline"));
    let needle = format!("\0monitor\0--id\0{id}\0");
    cmdline.is_ok_and(|c| String::from_utf8_lossy(&c).contains(&needle))
}

/// The container ids of every running monitor (`… monitor --id <id> …`, one scan of
/// `/proc`), with their pids: after a launch, for a moment, the process that forks the monitor
/// is listed too. Recovery uses it for StartContainer calls a daemon crash interrupted, whose
/// monitor's pid was never recorded.
pub fn running_monitors() -> Vec<(String, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).ok()?;
            let argv: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            argv.windows(3)
                .find(|w| w[0] == b"monitor" && w[1] == b"--id")
                .map(|w| (String::from_utf8_lossy(w[2]).into_owned(), pid))
        })
        .collect()
}

/// The pids of [`running_monitors`] for container `id`.
pub fn find_monitors(id: &str) -> Vec<i32> {
    running_monitors()
        .into_iter()
        .filter(|(m, _)| m == id)
        .map(|(_, pid)| pid)
        .collect()
}

/// The exit record at `path`, or why there is none.
pub fn read_exit(path: &Path) -> ContainerExit {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice(&bytes) {
            Ok(record) => ContainerExit::Recorded(record),
            Err(e) => ContainerExit::Unknown(format!("exit file {}: {e}", path.display())),
        },
        Err(e) => ContainerExit::Unknown(format!("no exit file {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn exit_watcher_waits_for_the_monitor_then_reads_the_record() {
        let dir = tempfile::tempdir().expect("tempdir");
        let exit = dir.path().join("exit");
        let record = r#"{"pid":5,"exit_code":137,"signal":9,"oom_killed":false,"started_at_ns":1,"finished_at_ns":2}"#;
        // Its command line looks like a monitor's: `sh -c SCRIPT monitor --id c1 FILE`.
        let script = format!("sleep 0.3; echo '{record}' > \"$3\"");
        let mut child = tokio::process::Command::new("sh")
            .args(["-c", &script, "monitor", "--id", "c1"])
            .arg(&exit)
            .spawn()
            .expect("spawn");
        let pid = child.id().and_then(|p| i32::try_from(p).ok()).expect("pid");
        let watcher = ExitWatcher::new("c1", pid, &exit);
        // The spawn may return before the new command line is visible in /proc.
        for _ in 0..100 {
            if watcher.monitor_alive() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        let got = watcher.wait().await;
        let ContainerExit::Recorded(r) = got else {
            panic!("{got:?}");
        };
        assert_eq!((r.pid, r.exit_code, r.signal), (5, 137, Some(9)));
        child.wait().await.expect("reap");
        // A pid that is not this container's monitor (ours) resolves at once: no file.
        let me = std::process::id() as i32;
        let other = ExitWatcher::new("c2", me, dir.path().join("none"));
        let got = tokio::time::timeout(Duration::from_secs(2), other.wait()).await;
        assert!(matches!(got, Ok(ContainerExit::Unknown(_))), "{got:?}");
    }
}
