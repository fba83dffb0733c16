//! The exit record: how the container's init ended, written atomically for the daemon.

use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::error::{Context, Error, Result};

/// The exit file's JSON: `{"pid", "exit_code", "signal", "oom_killed", "started_at_ns",
/// "finished_at_ns"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitRecord {
    /// The init's pid (host pid namespace).
    pub pid: i32,
    /// The exit status, or 128 + signal when a signal ended the process (CRI convention).
    pub exit_code: i32,
    /// The signal that ended the process, if one did.
    pub signal: Option<i32>,
    /// The container's memory cgroup counted an OOM kill while it ran.
    pub oom_killed: bool,
    /// When `runc create` returned, Unix nanoseconds.
    pub started_at_ns: i64,
    /// When the init was reaped, Unix nanoseconds.
    pub finished_at_ns: i64,
}

/// `(exit_code, signal)` for a wait status: the exit status, or 128 + the signal's number.
pub fn exit_code(status: ExitStatus) -> (i32, Option<i32>) {
    match (status.code(), status.signal()) {
        (Some(code), _) => (code, None),
        (None, Some(sig)) => (128 + sig, Some(sig)),
        // Stopped or continued: not an exit; callers only pass exits.
        (None, None) => (255, None),
    }
}

/// A raw `waitpid` status as an [`ExitStatus`].
pub fn from_raw(raw: i32) -> ExitStatus {
    ExitStatus::from_raw(raw)
}

/// Unix nanoseconds of `t` (0 before the epoch).
pub fn unix_nanos(t: SystemTime) -> i64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

impl ExitRecord {
    /// Writes the record atomically: a temporary file in the same directory, then a rename —
    /// a reader sees no file or the whole record, also after kill -9 of the daemon or the
    /// monitor. Not fsynced: the file lives in the state dir, and after a power cut the
    /// container is gone anyway (recovery reports a missing record as UNKNOWN); two fsyncs
    /// cost 3-6 ms on the path of every StopContainer here (issue 13).
    pub fn write(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_vec(self).context("encode exit record")?;
        write_atomic(path, &json).with_context(|| format!("write exit file {}", path.display()))
    }
}

fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| Error::msg("path has no parent directory"))?;
    let mut tmp_name = path
        .file_name()
        .ok_or_else(|| Error::msg("path has no file name"))?
        .to_os_string();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o644)
            .open(&tmp)
            .context("create temporary file")?;
        file.write_all(bytes).context("write temporary file")?;
        drop(file);
        std::fs::rename(&tmp, path).context("rename into place")
    })();
    if written.is_err() {
        // A full disk: no half record stays behind, under either name.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_normal_exit_keeps_its_status() {
        assert_eq!(exit_code(from_raw(3 << 8)), (3, None));
        assert_eq!(exit_code(from_raw(0)), (0, None));
        assert_eq!(exit_code(from_raw(255 << 8)), (255, None));
    }

    #[test]
    fn a_signal_is_128_plus_its_number() {
        assert_eq!(exit_code(from_raw(libc::SIGKILL)), (137, Some(9)));
        assert_eq!(exit_code(from_raw(libc::SIGTERM)), (143, Some(15)));
        // with a core dump flag
        assert_eq!(exit_code(from_raw(libc::SIGSEGV | 0x80)), (139, Some(11)));
    }

    #[test]
    fn the_record_is_written_whole_with_the_documented_fields() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("exit");
        let rec = ExitRecord {
            pid: 42,
            exit_code: 137,
            signal: Some(9),
            oom_killed: true,
            started_at_ns: 1,
            finished_at_ns: 2,
        };
        rec.write(&path).expect("write");
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            r#"{"pid":42,"exit_code":137,"signal":9,"oom_killed":true,"started_at_ns":1,"finished_at_ns":2}"#
        );
        assert!(!dir.path().join("exit.tmp").exists());
        let back: ExitRecord = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, rec);
        let rec = ExitRecord {
            signal: None,
            ..rec
        };
        rec.write(&path).expect("overwrite");
        assert!(std::fs::read_to_string(&path)
            .expect("read")
            .contains(r#""signal":null"#));
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let rec = ExitRecord {
            pid: 1,
            exit_code: 0,
            signal: None,
            oom_killed: false,
            started_at_ns: 0,
            finished_at_ns: 0,
        };
        let err = rec
            .write(Path::new("/nonexistent-bosun/exit"))
            .expect_err("must fail");
        assert!(err
            .to_string()
            .starts_with("write exit file /nonexistent-bosun/exit: create"));
    }
}
