//! The OOM counter followed while the container runs: cgroup v2 reports every change of `memory.events` to inotify.
//!
//! Reading the counter only after the init is reaped is too late where the cgroup goes with
//! its last process: systemd removes a scope (runc's systemd driver) as soon as it is empty,
//! often before the monitor has reaped the init. Watching the scope's `memory.events` is not
//! enough either: the kernel sends at most one change event per file every 10–20 ms and drops
//! a pending one when the cgroup is removed, and the kill is counted an instant before the
//! victim dies. So the monitor watches the scope's file and its slice's (v2 counts each kill
//! in every ancestor too, and the slice stays), reading both on each change, slice first:
//! - the scope still readable at the end, or a kill seen in it: its own count decides;
//! - the scope gone unread since the kill: the slice's count rose after the last reading of
//!   the scope and the init died of SIGKILL (an OOM kill is one). A sibling container's kill in
//!   that same instant would be taken for ours; one seen earlier is not, as every change of the
//!   slice's file makes the monitor read the scope's again.
//! - the scope gone before the watch even started (killed and removed while `runc run` was
//!   returning): the slice's count, read before `runc run`, is the mark.
//!
//! v1's `memory.oom_control` has no such events: there the counter is read before and after
//! (the cgroupfs cgroup lives until `runc delete`).

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::fs::inotify::{self, CreateFlags, WatchFlags};

use super::oom::OomCounter;

/// A container's OOM-kill counter: its value at the start and the highest seen since.
#[derive(Debug)]
pub struct OomWatch {
    counter: OomCounter,
    /// inotify on the counter files (v2 `memory.events` only), nonblocking.
    inotify: Option<OwnedFd>,
    /// The slice's file is watched: only then is it read (a stale mark could take a
    /// sibling's old kill for ours).
    parent: bool,
    before: Option<u64>,
    seen: Option<u64>,
    /// The slice's count read just before the last successful reading of the scope's.
    parent_mark: Option<u64>,
}

impl OomWatch {
    /// Reads the counter now and, for v2's `memory.events`, starts watching it (and the
    /// slice's, when the counter has one).
    pub fn start(counter: OomCounter) -> Self {
        let (inotify, parent) = counter
            .file()
            .file_name()
            .is_some_and(|n| n == "memory.events")
            .then(|| watch(&counter))
            .flatten()
            .unzip();
        let mut w = OomWatch {
            counter,
            inotify,
            parent: parent.unwrap_or(false),
            before: None,
            seen: None,
            parent_mark: None,
        };
        w.before = w.read();
        w
    }

    /// [`OomWatch::start`] for a cgroup made just now (by `runc run`): its count started at
    /// zero, whatever it reads by now (a process OOM-killed at once is counted as such).
    /// `slice_before` is the slice's count read before `runc run`: when the scope is gone
    /// already (OOM-killed and removed by systemd before this start), the slice's count
    /// rising past it is the kill's only trace, so it is the mark.
    pub fn start_new(counter: OomCounter, slice_before: Option<u64>) -> Self {
        let mut w = Self::start(counter);
        w.before = Some(0);
        if w.parent_mark.is_none() && w.seen.is_none() && slice_before.is_some() {
            w.parent = true;
            w.parent_mark = slice_before;
        }
        w
    }

    /// The descriptor to poll: readable when a counter file changed.
    pub fn fd(&self) -> Option<BorrowedFd<'_>> {
        self.inotify.as_ref().map(|fd| fd.as_fd())
    }

    /// Drains the pending change events and reads the counters again.
    pub fn changed(&mut self) {
        if let Some(fd) = &self.inotify {
            let mut buf = [0u8; 1024];
            while let Ok(n) = rustix::io::read(fd, &mut buf) {
                if n == 0 {
                    break;
                }
            }
        }
        self.read();
    }

    /// Whether an OOM kill happened since [`OomWatch::start`]: the last reading (when the
    /// cgroup is still there) or any count seen while the container ran exceeds the first;
    /// or, the cgroup being gone and the init `sigkilled`, the slice's count rose since the
    /// last reading of the container's (see the module docs).
    pub fn killed(&mut self, sigkilled: bool) -> bool {
        let mark = self.parent_mark;
        let now = self.read();
        if self
            .seen
            .is_some_and(|seen| seen > self.before.unwrap_or(0))
        {
            return true;
        }
        let gone = now.is_none() && self.before.is_some();
        gone && sigkilled && matches!((mark, self.read_parent()), (Some(m), Some(p)) if p > m)
    }

    fn read_parent(&self) -> Option<u64> {
        self.parent.then(|| self.counter.read_parent()).flatten()
    }

    /// Reads the slice's count, then the container's; returns the latter.
    fn read(&mut self) -> Option<u64> {
        let parent = self.read_parent();
        let now = self.counter.read();
        if now.is_some() {
            self.parent_mark = parent;
        }
        self.seen = self.seen.max(now);
        now
    }
}

/// An inotify descriptor watching the counter files for changes, and whether the slice's file
/// is among them; `None` when the kernel refuses (no inotify, file gone): the before/after
/// reading still applies.
fn watch(counter: &OomCounter) -> Option<(OwnedFd, bool)> {
    let fd = inotify::init(CreateFlags::CLOEXEC | CreateFlags::NONBLOCK).ok()?;
    inotify::add_watch(&fd, counter.file(), WatchFlags::MODIFY).ok()?;
    let parent = counter
        .parent()
        .is_some_and(|p| inotify::add_watch(&fd, p, WatchFlags::MODIFY).is_ok());
    Some((fd, parent))
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
        assert!(w.killed(false));
    }

    #[test]
    fn no_change_no_kill_and_a_late_reading_still_counts() {
        let root = tempfile::tempdir().expect("tempdir");
        events(root.path(), 0);
        let mut w = OomWatch::start(counter_at(root.path()));
        assert!(!w.killed(true));
        events(root.path(), 1);
        assert!(w.killed(false), "the final reading sees the kill");
    }

    /// `runc run` returns with the process running: a kill before the first reading is ours.
    #[test]
    fn a_new_cgroup_counts_from_zero() {
        let root = tempfile::tempdir().expect("tempdir");
        events(root.path(), 1);
        let mut w = OomWatch::start_new(counter_at(root.path()), None);
        assert!(w.killed(true), "killed before the first reading");
        let mut w = OomWatch::start(counter_at(root.path()));
        assert!(!w.killed(true), "an old cgroup's count is its baseline");
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
        assert!(w.killed(false));
    }

    /// A systemd scope `cri-c1.scope` in `pod1.slice`, both counting `scope` and `slice` kills.
    fn scope_at(root: &Path, scope: u64, slice: u64) -> OomCounter {
        std::fs::write(root.join("cgroup.controllers"), "memory\n").expect("controllers");
        let dir = root.join("pod1.slice/cri-c1.scope");
        std::fs::create_dir_all(&dir).expect("mkdir");
        set(&dir, scope);
        set(&root.join("pod1.slice"), slice);
        OomCounter::locate(root, "pod1.slice:cri:c1", "c1", "0::/\n").expect("locate")
    }

    fn set(dir: &Path, oom_kill: u64) {
        std::fs::write(
            dir.join("memory.events"),
            format!("low 0\nhigh 0\nmax 9\noom 1\noom_kill {oom_kill}\noom_group_kill 0\n"),
        )
        .expect("write");
    }

    #[test]
    fn a_slice_kill_after_the_scope_went_unread_is_ours_if_the_init_was_sigkilled() {
        for sigkilled in [true, false] {
            let root = tempfile::tempdir().expect("tempdir");
            let mut w = OomWatch::start(scope_at(root.path(), 0, 4));
            // The kill is counted, the victim dies, systemd removes the empty scope before
            // the kernel's delayed change event reaches us.
            set(&root.path().join("pod1.slice"), 5);
            std::fs::remove_dir_all(root.path().join("pod1.slice/cri-c1.scope")).expect("rm");
            assert_eq!(w.killed(sigkilled), sigkilled, "sigkilled {sigkilled}");
        }
    }

    /// OOM-killed before `runc run` returned and the scope removed before the watch started:
    /// nothing to watch, but the slice counted one more kill than before the run.
    #[test]
    fn a_scope_gone_before_the_watch_started_is_judged_by_the_slice_before_the_run() {
        for (sigkilled, slice_after, want) in [(true, 5, true), (false, 5, false), (true, 4, false)]
        {
            let root = tempfile::tempdir().expect("tempdir");
            let counter = scope_at(root.path(), 0, 4);
            let before = counter.read_parent();
            assert_eq!(before, Some(4));
            set(&root.path().join("pod1.slice"), slice_after);
            std::fs::remove_dir_all(root.path().join("pod1.slice/cri-c1.scope")).expect("rm");
            let mut w = OomWatch::start_new(counter, before);
            assert_eq!(
                w.killed(sigkilled),
                want,
                "sigkilled {sigkilled}, slice {slice_after}"
            );
        }
        // No slice reading before the run: no verdict from the slice.
        let root = tempfile::tempdir().expect("tempdir");
        let counter = scope_at(root.path(), 0, 4);
        set(&root.path().join("pod1.slice"), 5);
        std::fs::remove_dir_all(root.path().join("pod1.slice/cri-c1.scope")).expect("rm");
        assert!(!OomWatch::start_new(counter, None).killed(true));
    }

    #[test]
    fn a_siblings_kill_seen_while_the_scope_lives_is_not_ours() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut w = OomWatch::start(scope_at(root.path(), 0, 0));
        set(&root.path().join("pod1.slice"), 1);
        assert!(
            readable(w.fd().expect("fd")),
            "the slice's change is signalled"
        );
        w.changed();
        // Later the container is killed (StopContainer's KILL) and its scope removed.
        std::fs::remove_dir_all(root.path().join("pod1.slice/cri-c1.scope")).expect("rm");
        assert!(!w.killed(true));
    }

    #[test]
    fn a_scope_still_there_decides_by_its_own_count() {
        let root = tempfile::tempdir().expect("tempdir");
        let mut w = OomWatch::start(scope_at(root.path(), 0, 0));
        set(&root.path().join("pod1.slice"), 1);
        assert!(!w.killed(true), "a sibling's kill, our scope counted none");
        let mut w = OomWatch::start(scope_at(root.path(), 2, 7));
        set(&root.path().join("pod1.slice/cri-c1.scope"), 3);
        assert!(w.killed(false));
    }

    #[test]
    fn an_unwatched_slice_is_not_read() {
        let root = tempfile::tempdir().expect("tempdir");
        let counter = scope_at(root.path(), 0, 0);
        std::fs::remove_file(root.path().join("pod1.slice/memory.events")).expect("rm");
        let mut w = OomWatch::start(counter);
        assert!(w.fd().is_some(), "the scope's file is still watched");
        set(&root.path().join("pod1.slice"), 1);
        std::fs::remove_dir_all(root.path().join("pod1.slice/cri-c1.scope")).expect("rm");
        assert!(!w.killed(true), "no mark to compare with");
    }
}
