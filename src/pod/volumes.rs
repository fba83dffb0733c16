//! A pod's host-side files for its containers: so far the termination-message file and its reading.

use std::io::Read;
use std::path::{Path, PathBuf};

/// Most bytes of a termination-message file that are reported.
const MAX_MESSAGE_BYTES: u64 = 4096;
/// Most log lines used by FallbackToLogsOnError.
const FALLBACK_LINES: usize = 80;
/// Most bytes of log text used by FallbackToLogsOnError.
const FALLBACK_BYTES: usize = 2048;

/// The host file bind-mounted at a container's terminationMessagePath for one restart:
/// `<pod_dir>/termination/<container>/<restart_count>`.
pub fn termination_message_path(pod_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_dir
        .join("termination")
        .join(container)
        .join(restart_count.to_string())
}

/// The termination message of an exited container: the host file's content (at most 4096 bytes);
/// with policy `FallbackToLogsOnError`, a non-zero exit and an empty file, the last 80 lines
/// (at most 2048 bytes) of the messages in the CRI log at `log_path`. Unreadable files give "".
pub fn termination_message(
    host_file: &Path,
    policy: Option<&str>,
    log_path: &Path,
    exit_code: i32,
) -> String {
    let mut content = Vec::new();
    if let Ok(file) = std::fs::File::open(host_file) {
        let _ = file.take(MAX_MESSAGE_BYTES).read_to_end(&mut content);
    }
    let message = String::from_utf8_lossy(&content).into_owned();
    if !message.is_empty() || exit_code == 0 || policy != Some("FallbackToLogsOnError") {
        return message;
    }
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    log_tail(&log)
}

/// The last lines of a CRI log's messages (`<time> <stream> <P|F> <message>` per line; `P` lines
/// continue on the next one), within the fallback limits.
fn log_tail(log: &str) -> String {
    let mut text = String::new();
    for line in log.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_time, _stream, tag) = (parts.next(), parts.next(), parts.next());
        let Some(message) = parts.next() else {
            continue;
        };
        text.push_str(message);
        if tag != Some("P") {
            text.push('\n');
        }
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = lines.len().saturating_sub(FALLBACK_LINES);
    let tail: String = lines[start..].concat();
    if tail.len() <= FALLBACK_BYTES {
        return tail;
    }
    let mut cut = tail.len() - FALLBACK_BYTES;
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    tail[cut..].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_line(i: usize) -> String {
        format!("2026-11-22T13:00:00.000000000Z stdout F line {i}\n")
    }

    #[test]
    fn path_is_per_container_and_restart() {
        let p = termination_message_path(Path::new("/p"), "app", 3);
        assert_eq!(p, Path::new("/p/termination/app/3"));
    }

    #[test]
    fn file_content_wins_and_is_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("msg");
        std::fs::write(&file, "x".repeat(5000)).expect("write");
        let log = dir.path().join("log");
        std::fs::write(&log, log_line(1)).expect("write");
        let msg = termination_message(&file, Some("FallbackToLogsOnError"), &log, 1);
        assert_eq!(msg.len(), 4096);
    }

    #[test]
    fn fallback_only_on_failure_with_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("msg");
        std::fs::write(&file, "").expect("write");
        let log = dir.path().join("log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&log_line(i));
        }
        text.push_str("2026-11-22T13:00:00Z stderr P par\n2026-11-22T13:00:00Z stderr F tial\n");
        std::fs::write(&log, text).expect("write");
        assert_eq!(termination_message(&file, Some("File"), &log, 1), "");
        assert_eq!(
            termination_message(&file, Some("FallbackToLogsOnError"), &log, 0),
            ""
        );
        let msg = termination_message(&file, Some("FallbackToLogsOnError"), &log, 2);
        assert_eq!(msg.lines().count(), 80);
        assert!(msg.starts_with("line 21\n"));
        assert!(msg.ends_with("line 99\npartial\n"));
    }

    #[test]
    fn fallback_is_capped_in_bytes() {
        let long = "y".repeat(100);
        let log: String = (0..50).map(|_| format!("t stdout F {long}\n")).collect();
        let tail = log_tail(&log);
        assert_eq!(tail.len(), 2048);
        assert!(tail.ends_with("y\n"));
    }
}
