//! Starts the RCU grace period runc's first cgroup join waits for, while the monitor starts.
//!
//! Every write to a `cgroup.procs` file takes the kernel's global cgroup threadgroup rwsem for
//! writing, and the first writer after a quiet spell waits a whole RCU grace period for it
//! (`percpu_down_write` → `rcu_sync_enter` → `synchronize_rcu`: 7–16 ms on a 2-core node).
//! `runc run` pays it when it puts the container's init into its cgroups, on
//! StartContainer's path. A writer that comes while the grace period runs, or within about one
//! more grace period after the last writer, does not wait again. So StartContainer (and exec)
//! first asks for a write that moves nothing: the daemon into the cgroup it is already in, on
//! a blocking thread, started before the monitor. By the time runc joins its cgroups the
//! grace period has passed or is under way, and runc waits for what is left of it at most.
//!
//! The cgroup written to is the daemon's own in one hierarchy (`/proc/self/cgroup`), checked
//! once to hold the daemon (its pid is in that `cgroup.procs`) and again before every write
//! (the line in `/proc/self/cgroup` is still the same): a write never moves the daemon
//! anywhere it is not. Where nothing checks out, or a write fails, warming is off.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Where a warming write goes, and the `/proc/self/cgroup` line that makes it a no-op.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Target {
    /// `<dir>/cgroup.procs` of the daemon's own cgroup in that hierarchy.
    procs: PathBuf,
    /// The `/proc/self/cgroup` line it was found from.
    line: String,
}

/// Warms the cgroup threadgroup rwsem ahead of runc; one write in flight at most.
#[derive(Debug, Default)]
pub struct Warmer {
    target: Option<Target>,
    busy: AtomicBool,
    off: AtomicBool,
}

impl Warmer {
    /// A warmer for the hierarchy mounted at `root` (normally `/sys/fs/cgroup`); off when the
    /// daemon's own cgroup cannot be found there.
    pub fn detect(root: &Path) -> Warmer {
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let pid = std::process::id();
        let target = candidates(root, &own)
            .into_iter()
            .find(|t| holds(&t.procs, pid));
        match &target {
            Some(t) => tracing::info!(procs = %t.procs.display(), "cgroup warming on"),
            None => tracing::info!("cgroup warming off: the daemon's own cgroup not found"),
        }
        Warmer {
            target,
            ..Warmer::default()
        }
    }

    /// Whether a write would be made.
    pub fn is_on(&self) -> bool {
        self.target.is_some() && !self.off.load(Ordering::Relaxed)
    }

    /// Starts a warming write in the background unless one is in flight (it would share its
    /// grace period) or warming is off. Never blocks the caller.
    pub fn warm(self: &Arc<Self>) {
        if !self.is_on() || self.busy.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = Arc::clone(self);
        let run = move || {
            me.write_once();
            me.busy.store(false, Ordering::Release);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => drop(rt.spawn_blocking(run)),
            Err(_) => run(),
        }
    }

    /// One write of `0` (the writer's own process) to the target, if the daemon is still in
    /// the cgroup it names; warming goes off for good on any failure.
    fn write_once(&self) {
        let Some(t) = &self.target else { return };
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        if !own.lines().any(|l| l == t.line) {
            tracing::info!(was = %t.line, "cgroup warming off: the daemon moved to another cgroup");
            self.off.store(true, Ordering::Relaxed);
            return;
        }
        match std::fs::write(&t.procs, "0") {
            Ok(()) => tracing::debug!("cgroup migration lock warmed"),
            Err(e) => {
                tracing::info!(procs = %t.procs.display(), error = %e, "cgroup warming off");
                self.off.store(true, Ordering::Relaxed);
            }
        }
    }
}

/// The daemon's own cgroup directories named by `proc_self_cgroup` under `root`, best first:
/// the cgroup2 one (no controller has anything to do for a move), then `name=` hierarchies,
/// then controller ones. Paths with `..` or from another cgroup namespace (`/..`) are left out.
fn candidates(root: &Path, proc_self_cgroup: &str) -> Vec<Target> {
    let mut out: Vec<(u8, Target)> = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(hier), Some(controllers), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        if !path.starts_with('/') || path.split('/').any(|c| c == "..") {
            continue;
        }
        let rel = path.trim_start_matches('/');
        let target = |dir: PathBuf, rank: u8| {
            (
                rank,
                Target {
                    procs: dir.join("cgroup.procs"),
                    line: line.to_string(),
                },
            )
        };
        if hier == "0" && controllers.is_empty() {
            out.push(target(root.join(rel), 0));
            out.push(target(root.join("unified").join(rel), 0));
        } else if let Some(first) = controllers.split(',').next().filter(|c| !c.is_empty()) {
            let (mount, rank) = match first.strip_prefix("name=") {
                Some(name) => (name, 1),
                None => (first, 2),
            };
            out.push(target(root.join(mount).join(rel), rank));
        }
    }
    out.sort_by_key(|(rank, _)| *rank);
    out.into_iter().map(|(_, t)| t).collect()
}

/// Whether `procs` (a `cgroup.procs` file) lists `pid`.
fn holds(procs: &Path, pid: u32) -> bool {
    std::fs::read_to_string(procs)
        .is_ok_and(|text| text.lines().any(|l| l.trim().parse::<u32>() == Ok(pid)))
}

#[cfg(test)]
#[path = "warm_tests.rs"]
mod tests;
