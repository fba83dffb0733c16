//! The sync descriptor: one JSON line telling the daemon how `runc create` went, then closed.

use std::fs::File;
use std::io::Write;
use std::os::fd::OwnedFd;

/// The longest failure message sent: it echoes paths from the request (issue 16 item 7).
pub const MESSAGE_MAX: usize = 4 << 10;

/// The daemon's end of the start handshake: `{"monitor_pid": N, "init_pid": N}` or
/// `{"error": "…"}`, one line, then end of file. Writes never block (a pipe holds far more
/// than one line) and a daemon that went away is not an error for the monitor.
#[derive(Debug)]
pub struct SyncPipe(Option<File>);

impl SyncPipe {
    /// Wraps the descriptor taken over from `--sync-fd`.
    pub fn new(fd: OwnedFd) -> Self {
        SyncPipe(Some(File::from(fd)))
    }

    /// The descriptor, while it is still open (to keep it across closing inherited ones).
    pub fn fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        use std::os::fd::AsFd;
        self.0.as_ref().map(|f| f.as_fd())
    }

    /// The container is created: report both pids and close.
    pub fn ready(&mut self, monitor_pid: i32, init_pid: i32) {
        self.send(&serde_json::json!({"monitor_pid": monitor_pid, "init_pid": init_pid}));
    }

    /// Creation failed: report why (at most [`MESSAGE_MAX`] bytes of it) and close. A no-op
    /// after `ready`.
    pub fn fail(&mut self, message: &str) {
        let message = crate::error::bounded(message, MESSAGE_MAX);
        self.send(&serde_json::json!({ "error": message }));
    }

    fn send(&mut self, value: &serde_json::Value) {
        if let Some(mut file) = self.0.take() {
            let mut line = value.to_string();
            line.push('\n');
            let _ = file.write_all(line.as_bytes());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn one_line_is_sent_then_the_pipe_closes() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let mut sync = SyncPipe::new(w);
        sync.fail("runc create failed: boom \"quoted\"");
        sync.ready(1, 2); // ignored: already closed
        let mut text = String::new();
        File::from(r)
            .read_to_string(&mut text)
            .expect("read to eof");
        assert_eq!(
            text,
            "{\"error\":\"runc create failed: boom \\\"quoted\\\"\"}\n"
        );
    }

    #[test]
    fn long_failures_are_cut() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        let writer = std::thread::spawn(move || SyncPipe::new(w).fail(&"x".repeat(1 << 20)));
        let mut text = String::new();
        File::from(r)
            .read_to_string(&mut text)
            .expect("read to eof");
        writer.join().expect("writer");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        let msg = v["error"].as_str().expect("error");
        assert!(
            msg.len() < MESSAGE_MAX + 64 && msg.ends_with("more bytes]"),
            "{}",
            msg.len()
        );
    }

    #[test]
    fn ready_reports_both_pids() {
        let (r, w) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
        SyncPipe::new(w).ready(10, 20);
        let mut text = String::new();
        File::from(r)
            .read_to_string(&mut text)
            .expect("read to eof");
        let v: serde_json::Value = serde_json::from_str(&text).expect("json");
        assert_eq!(v, serde_json::json!({"monitor_pid": 10, "init_pid": 20}));
        assert!(text.ends_with('\n'));
    }
}
