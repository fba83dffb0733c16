//! Everything an exec'd process started, found in /proc, killed together and awaited.
//!
//! runc's nsexec makes the exec'd process a session leader, so every process it starts keeps
//! its session id unless it calls `setsid` itself, even after it is orphaned and reparented to
//! the pid namespace's init. [`kill_tree`] SIGKILLs the session and, from the parent links,
//! any descendant that left it, scanning /proc again until a scan finds nobody new (a process
//! with SIGKILL pending can no longer fork). A session id cannot be reused while a process
//! still carries it, so a scan never reaches a stranger.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// Scans of /proc before [`kill_tree`] gives up on finding more (each finds what forked
/// before the previous kills landed).
const MAX_SCANS: usize = 8;

/// How often [`Killed::wait_gone`] looks.
const GONE_POLL: Duration = Duration::from_millis(5);

/// The fields of `/proc/<pid>/stat` used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcStat {
    /// The process id.
    pub pid: i32,
    /// Its parent.
    pub ppid: i32,
    /// Its session.
    pub session: i32,
    /// Its start time (clock ticks after boot): tells a reused pid apart.
    pub start_time: u64,
}

impl ProcStat {
    /// Parses the text of `/proc/<pid>/stat`; the command name may hold spaces and `)`.
    pub(crate) fn parse(text: &str) -> Option<ProcStat> {
        let (head, rest) = text.rsplit_once(')')?;
        let pid = head.split_once(' ')?.0.trim().parse().ok()?;
        // After the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt
        // cmajflt utime stime cutime cstime priority nice threads itrealvalue starttime.
        let f: Vec<&str> = rest.split_whitespace().collect();
        Some(ProcStat {
            pid,
            ppid: f.get(1)?.parse().ok()?,
            session: f.get(3)?.parse().ok()?,
            start_time: f.get(19)?.parse().ok()?,
        })
    }

    /// The process `pid` as /proc shows it now (`None` once it is reaped).
    pub(crate) fn of(pid: i32) -> Option<ProcStat> {
        Self::parse(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
    }
}

/// Every process /proc lists now.
fn scan() -> Vec<ProcStat> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(ProcStat::of)
        .collect()
}

/// The processes [`kill_tree`] signalled.
#[derive(Debug, Default, Clone)]
pub(crate) struct Killed(Vec<ProcStat>);

impl Killed {
    /// How many processes were signalled.
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether every one of them has been reaped (by runc, the pid namespace's init or a
    /// subreaper): no longer in /proc, or its pid now belongs to a newer process.
    pub(crate) fn all_gone(&self) -> bool {
        self.0
            .iter()
            .all(|p| ProcStat::of(p.pid).is_none_or(|now| now.start_time != p.start_time))
    }

    /// Waits (polling, at most `limit`) until [`Killed::all_gone`]; returns whether they are.
    pub(crate) async fn wait_gone(&self, limit: Duration) -> bool {
        let until = Instant::now() + limit;
        loop {
            if self.all_gone() {
                return true;
            }
            if Instant::now() >= until {
                return false;
            }
            tokio::time::sleep(GONE_POLL).await;
        }
    }
}

/// SIGKILLs `leader` (an exec'd process, leader of its own session), its session and its
/// descendants (see the module docs). The caller guarantees `leader` is not reaped yet.
pub(crate) fn kill_tree(leader: i32) -> Killed {
    let mut members: BTreeSet<i32> = BTreeSet::new();
    let mut killed = Vec::new();
    if leader <= 1 {
        return Killed(killed);
    }
    for _ in 0..MAX_SCANS {
        let procs = scan();
        let before = killed.len();
        // Repeated over this scan: a member found late may be the parent of one seen earlier.
        loop {
            let mut grew = false;
            for p in &procs {
                let belongs = p.pid == leader || p.session == leader || members.contains(&p.ppid);
                if belongs && members.insert(p.pid) {
                    super::exec_kill::kill(p.pid, false);
                    killed.push(*p);
                    grew = true;
                }
            }
            if !grew {
                break;
            }
        }
        if killed.len() == before {
            break;
        }
    }
    Killed(killed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_parse_even_with_odd_command_names() {
        let line = "4242 (a b) c) S 17 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 200 18446744073709551615";
        assert_eq!(
            ProcStat::parse(line),
            Some(ProcStat {
                pid: 4242,
                ppid: 17,
                session: 4242,
                start_time: 987654
            })
        );
        assert_eq!(ProcStat::parse("12 (x) S 1"), None);
        assert_eq!(ProcStat::parse(""), None);
        let me = ProcStat::of(std::process::id() as i32).expect("own stat");
        assert_eq!(me.pid, std::process::id() as i32);
    }

    /// Whether `p` has exited (a zombie, or reaped and gone).
    fn dead(p: &ProcStat) -> bool {
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", p.pid)) else {
            return true;
        };
        let zombie = stat
            .rsplit_once(") ")
            .is_some_and(|(_, r)| r.starts_with('Z'));
        zombie || ProcStat::parse(&stat).is_some_and(|now| now.start_time != p.start_time)
    }

    /// A session leader whose shell starts a child that leaves the session (`setsid`), one
    /// that stays and a subshell with a child of its own: all die together.
    #[tokio::test]
    async fn the_session_and_runaway_descendants_die_together() {
        let dir = tempfile::tempdir().expect("tempdir");
        let pids = dir.path().join("pids");
        let script = format!(
            "setsid sleep 1001 & echo $! >> {p}; sleep 1002 & echo $! >> {p}; \
             (sleep 1003 & echo $! >> {p}; wait) & wait",
            p = pids.display()
        );
        // setsid(1) execs in place: our child is not a group leader.
        let mut leader = tokio::process::Command::new("setsid")
            .args(["sh", "-c", &script])
            .spawn()
            .expect("spawn setsid sh");
        let leader_pid = leader.id().expect("pid") as i32;
        let mut others = Vec::new();
        for _ in 0..500 {
            others = std::fs::read_to_string(&pids)
                .unwrap_or_default()
                .lines()
                .filter_map(|l| ProcStat::of(l.parse().ok()?))
                .collect();
            if others.len() == 3 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(others.len(), 3, "the script started its children");
        let killed = kill_tree(leader_pid);
        assert!(killed.len() >= 5, "sh, subshell, 3 sleeps: {killed:?}");
        let status = leader.wait().await.expect("wait");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL)
        );
        // The orphans now belong to init or a subreaper (this machine's init may never reap
        // them): dead is what this test can ask.
        let until = Instant::now() + Duration::from_secs(5);
        while !others.iter().all(dead) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(others.iter().all(dead), "survivors among {others:?}");
        assert!(kill_tree(1).len() == 0, "pid 1 is never a leader");
    }
}
