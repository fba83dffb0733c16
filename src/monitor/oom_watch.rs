//! The OOM counter followed while the container runs: cgroup v2 reports every change of `memory.events` to inotify.
//!
//! Reading the counter only after the init is reaped is too late where the cgroup goes with
//! its last process: systemd removes a scope (runc's systemd driver) as soon as it is empty,
//! often before the monitor has reaped the init. So the monitor watches `memory.events`
//! (cgroup v2 raises a file-modified event on each change) and keeps the highest count seen;
//! the final read only adds to it. v1's `memory.oom_control` has no such events: there the
//! counter is read before and after, as before (the cgroupfs cgroup lives until `runc delete`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use super::oom::OomCounter;

/// A container's OOM-kill counter: its value at the start and the highest seen since.
#[derive(Debug)]
pub struct OomWatch {
    counter: OomCounter,
    /// inotify on the counter file (v2 `memory.events` only), nonblocking.
    inotify: Option<OwnedFd>,
    before: Option<u64>,
    seen: Option<u64>,
}

impl OomWatch {
    /// Reads the counter now and, for v2's `memory.events`, starts watching it.
    pub fn start(counter: OomCounter) -> Self {
        let inotify = counter
            .file()
            .file_name()
            .is_some_and(|n| n == "memory.events")
            .then(|| watch(&counter))
            .flatten();
        let before = counter.read();
        OomWatch {
            counter,
            inotify,
            before,
            seen: before,
        }
    }

    /// The descriptor to poll: readable when the counter file changed.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|fd| fd.as_fd())
    }

    /// Drains the pending change events and reads the counter again.
    pub fn changed(&mut self) {
        if let Some(fd) = &self.inotify {
            let mut buf = [0u8; 1024];
            while let Ok(n) = rustix::io::read(fd, &mut buf) {
                if n == 0 {
                    break;
                }
            }
        }
        self.note(self.counter.read());
    }

    /// Whether an OOM kill happened since [`OomWatch::start`]: the last reading (when the
    /// cgroup is still there) or any count seen while the container ran exceeds the first.
    pub fn killed(&mut self) -> bool {
        self.note(self.counter.read());
        self.seen
            .is_some_and(|seen| seen > self.before.unwrap_or(0))
    }

    fn note(&mut self, now: Option<u64>) {
        self.seen = self.seen.max(now);
    }
}

/// An inotify descriptor watching the counter file for changes; `None` when the kernel
/// refuses (no inotify, file gone): the before/after reading still applies.
fn watch(counter: &OomCounter) -> Option<OwnedFd> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(&fd, counter.file(), WatchFlags::MODIFY)
        .ok()
        .map(|_| fd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn counter_at(root: &Path) -> OomCounter {
        std::fs::write(root.join("cgroup.controllers"), "memory\n").expect("controllers");
        OomCounter::locate(root, "/c1", "c1", "0::/\n").expect("locate")
    }

    fn events(root: &Path, oom_kill: u64) {
        std::fs::create_dir_all(root.join("c1")).expect("mkdir");
        std::fs::write(
            root.join("c1/memory.events"),
            format!("low 0\nhigh 0\nmax 3\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n"),
        )
        .expect("write");
    }

    fn readable(fd: BorrowedFd<'_>) -> bool {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let zero = rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        rustix::event::poll(&mut fds, Some(&zero)).unwrap_or(0) == 1
    }

    #[test]
    fn a_kill_seen_while_running_counts_after_the_cgroup_is_gone() {
        let root = tempfile::tempdir().expect("tempdir");
        events(root.path(), 2);
        let mut w = OomWatch::start(counter_at(root.path()));
        let fd = w.fd().expect("memory.events is watched");
        assert!(!readable(fd), "no change yet");
        events(root.path(), 3);
        assert!(readable(w.fd().expect("fd")), "the change is signalled");
        w.changed();
        assert!(!readable(w.fd().expect("fd")), "events drained");
        // The scope goes with its last process before the init is reaped.
        std::fs::remove_dir_all(root.path().join("c1")).expect("rm");
        assert!(w.killed());
    }

    #[test]
    fn no_change_no_kill_and_a_late_reading_still_counts() {
        let root = tempfile::tempdir().expect("tempdir");
        events(root.path(), 0);
        let mut w = OomWatch::start(counter_at(root.path()));
        assert!(!w.killed());
        events(root.path(), 1);
        assert!(w.killed(), "the final reading sees the kill");
    }

    #[test]
    fn v1_counters_are_read_before_and_after_without_a_watch() {
        let root = tempfile::tempdir().expect("tempdir");
        let file = root.path().join("memory/c1/memory.oom_control");
        std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir");
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n").expect("write");
        let c = OomCounter::locate(root.path(), "/c1", "c1", "4:memory:/\n").expect("locate");
        let mut w = OomWatch::start(c);
        assert!(w.fd().is_none());
        std::fs::write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n").expect("write");
        assert!(w.killed());
    }
}
