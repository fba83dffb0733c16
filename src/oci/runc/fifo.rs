//! Starting a runc-created container without spawning `runc start`: read its exec fifo, as `runc start` does.
//!
//! runc 1.x parks a created container's init in an open-for-write of `<root>/<id>/exec.fifo`;
//! `runc start` opens the fifo for reading, reads the byte the init writes, and removes the
//! fifo (its absence is how runc tells RUNNING from CREATED). Doing the same here saves the
//! ~7 ms of starting the runc binary. Anything unexpected (no fifo, no byte in time) leaves
//! the decision to `runc start`, so a runtime without this mechanism works unchanged.

use std::path::Path;
use std::time::{Duration, Instant};

use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::fs::{Mode, OFlags};

/// How long the init may take to write its byte once we opened the fifo (it is normally
/// already blocked in its open, so this takes microseconds).
const RELEASE_WAIT: Duration = Duration::from_secs(1);

/// What [`release`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    /// The init got its reader and wrote its byte: it is exec'ing the process.
    Started,
    /// Not handled here (no fifo, or no byte in time): use `runc start`.
    Fallback(String),
}

/// Releases the created container whose runc state dir is `dir` (blocking).
pub fn release(dir: &Path) -> Released {
    let fifo = dir.join("exec.fifo");
    let fd = match rustix::fs::open(
        &fifo,
        OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(e) => return Released::Fallback(format!("open {}: {e}", fifo.display())),
    };
    let deadline = Instant::now() + RELEASE_WAIT;
    let mut byte = [0u8; 1];
    loop {
        match rustix::io::read(&fd, &mut byte) {
            Ok(n) if n > 0 => break,
            // 0 (no writer yet, or a writer came and went) or EAGAIN: wait for data.
            Ok(_) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Released::Fallback(format!("read {}: {e}", fifo.display())),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Released::Fallback(format!(
                "no byte on {} in {RELEASE_WAIT:?}",
                fifo.display()
            ));
        }
        let slice = left.min(Duration::from_millis(10));
        let ts = Timespec {
            tv_sec: 0,
            tv_nsec: i64::from(slice.subsec_nanos()),
        };
        let mut fds = [PollFd::new(&fd, PollFlags::IN)];
        let _ = poll(&mut fds, Some(&ts));
    }
    // As `runc start` does: the fifo's absence now marks the container as running.
    if let Err(e) = std::fs::remove_file(&fifo) {
        tracing::debug!("remove {}: {e}", fifo.display());
    }
    Released::Started
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_fifo_falls_back() {
        let dir = tempfile::tempdir().expect("tmp");
        assert!(matches!(release(dir.path()), Released::Fallback(m) if m.contains("exec.fifo")));
    }

    #[test]
    fn a_writer_is_released_and_the_fifo_removed() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("exec.fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).expect("mkfifo");
        let writer = {
            let fifo = fifo.clone();
            // Like runc init: a blocking open for writing, then one byte.
            std::thread::spawn(move || std::fs::write(&fifo, b"0"))
        };
        assert_eq!(release(dir.path()), Released::Started);
        writer.join().expect("join").expect("write");
        assert!(
            !fifo.exists(),
            "the fifo marks the container created; it must go"
        );
    }

    #[test]
    fn a_fifo_nobody_writes_falls_back_in_time() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("exec.fifo");
        rustix::fs::mkfifoat(rustix::fs::CWD, &fifo, Mode::from_raw_mode(0o600)).expect("mkfifo");
        let t = Instant::now();
        assert!(matches!(release(dir.path()), Released::Fallback(m) if m.contains("no byte")));
        assert!(t.elapsed() < RELEASE_WAIT + Duration::from_millis(500));
        assert!(fifo.exists(), "left for runc start to judge");
    }
}
