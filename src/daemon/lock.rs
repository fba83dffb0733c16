//! One daemon per root and per state directory: an exclusive flock on `<dir>/bosun.lock` with our pid.
//!
//! The kernel drops the lock when the holder's last thread has exited, which is not when it
//! was SIGKILLed: a thread in uninterruptible sleep (a write to a frozen or stalled file
//! system, a slow fsync or unmount) keeps a killed daemon, its open files and so this lock
//! until the kernel lets the thread go, and even an ordinary exit takes some milliseconds after
//! the signal. A daemon started in that window waits for the killed one, saying so, instead
//! of failing (issue 16); a live holder is refused at once.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::fs::{flock, FlockOperation};

use crate::error::{Error, ErrorKind, Result, ResultExt};

/// How often a waiting daemon tries the lock again.
const RETRY: Duration = Duration::from_millis(50);
/// How often it says that it is still waiting.
const NOTE_EVERY: Duration = Duration::from_secs(10);
/// How long a lock held by no process we can see (a holder just gone, a child between fork
/// and exec) is retried before the daemon gives up, counted from when it was first unseen.
const UNSEEN_HOLDER: Duration = Duration::from_secs(2);

/// Held for the daemon's lifetime; the kernel drops the lock if the process dies.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

/// The process named in a held lock file.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Holder {
    /// Running normally: another daemon.
    Running,
    /// Killed (SIGKILL pending) or exiting with threads left: what keeps it.
    Exiting(String),
    /// Not there (or no pid in the file).
    Unseen,
}

/// `Key:\tvalue` of a `/proc/<pid>/status` text.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .map(str::trim)
}

/// Whether a `/proc/<pid>/status` text is that of a killed or exiting process: SIGKILL
/// pending for the group, or a zombie leader (its other threads not yet exited, or all gone
/// and the lock about to be free: never a running daemon either way).
fn is_exiting(status: &str) -> bool {
    let sigkill = 1u64 << (libc::SIGKILL - 1);
    let pending = status_field(status, "ShdPnd")
        .and_then(|v| u64::from_str_radix(v, 16).ok())
        .is_some_and(|set| set & sigkill != 0);
    let zombie = status_field(status, "State").is_some_and(|s| s.starts_with('Z'));
    pending || zombie
}

/// What the threads of `pid` that are still in the kernel are waiting on.
fn stuck_threads(pid: i32) -> String {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return String::new();
    };
    let mut out = Vec::new();
    for t in rd.flatten() {
        let tid = t.file_name().to_string_lossy().into_owned();
        let stat = std::fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .unwrap_or("?");
        if state == "Z" {
            continue;
        }
        let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
        let what = if state == "D" {
            "in uninterruptible sleep"
        } else {
            "exiting"
        };
        out.push(format!("thread {tid} {what} ({})", wchan.trim()));
    }
    out.join(", ")
}

fn holder(pid: &str) -> Holder {
    let Ok(pid) = pid.trim().parse::<i32>() else {
        return Holder::Unseen;
    };
    match std::fs::read_to_string(format!("/proc/{pid}/status")) {
        Ok(status) if is_exiting(&status) => Holder::Exiting(stuck_threads(pid)),
        Ok(_) => Holder::Running,
        Err(_) => Holder::Unseen,
    }
}

impl StateLock {
    /// Takes the lock on `dir` (the daemon's `what`: "root" or "state"), waiting while the
    /// holder is a killed daemon that has not finished exiting; fails naming a running
    /// daemon's pid.
    pub async fn acquire(dir: &Path, what: &str) -> Result<StateLock> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {what} dir {}", dir.display()))?;
        let path = dir.join("bosun.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        let started = Instant::now();
        let mut noted: Option<Instant> = None;
        // A holder that exits between a failed flock and the look at /proc is unseen for a
        // moment, however long it took to exit (a killed daemon stuck on a frozen fs for
        // minutes): the grace runs from then, not from the start of the wait.
        let mut unseen_since: Option<Instant> = None;
        while flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut pid = String::new();
            let _ = file.rewind().and_then(|_| file.read_to_string(&mut pid));
            let pid = pid.trim().to_string();
            let seen = holder(&pid);
            if seen != Holder::Unseen {
                unseen_since = None;
            }
            match seen {
                Holder::Running => return Err(busy(&pid, what, dir)),
                Holder::Unseen => {
                    let since = *unseen_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > UNSEEN_HOLDER {
                        return Err(busy(&pid, what, dir));
                    }
                }
                Holder::Exiting(stuck) => {
                    if noted.is_none_or(|t| t.elapsed() >= NOTE_EVERY) {
                        noted = Some(Instant::now());
                        tracing::warn!(
                            pid = %pid,
                            lock = %path.display(),
                            waited_s = started.elapsed().as_secs(),
                            "the previous bosun daemon was killed but has not exited yet \
                             (its lock goes with its last thread: {stuck}); waiting for it"
                        );
                    }
                }
            }
            tokio::time::sleep(RETRY).await;
        }
        if noted.is_some() {
            tracing::info!(
                waited_ms = started.elapsed().as_millis() as u64,
                "the previous bosun daemon has exited; {what} lock taken"
            );
        }
        file.set_len(0)
            .ctx(|| format!("truncate {}", path.display()))?;
        file.rewind().ctx(|| format!("rewind {}", path.display()))?;
        write!(file, "{}", std::process::id()).ctx(|| format!("write {}", path.display()))?;
        Ok(StateLock { _file: file })
    }
}

fn busy(pid: &str, what: &str, dir: &Path) -> Error {
    Error::new(
        ErrorKind::FailedPrecondition,
        format!(
            "another bosun daemon (pid {pid}) is running with {what} dir {}; stop it or use another --{what}",
            dir.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn second_lock_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = StateLock::acquire(dir.path(), "root").await.expect("first");
        let err = StateLock::acquire(dir.path(), "root")
            .await
            .expect_err("second must fail");
        assert!(
            err.to_string().contains(&std::process::id().to_string()),
            "{err}"
        );
        drop(first);
        StateLock::acquire(dir.path(), "root")
            .await
            .expect("free again after drop");
    }

    #[test]
    fn a_killed_or_exiting_holder_is_told_from_a_running_one() {
        let status = |state: &str, threads: u32, shdpnd: &str| {
            format!("Name:\tbosun\nState:\t{state}\nThreads:\t{threads}\nSigPnd:\t0000000000000000\nShdPnd:\t{shdpnd}\n")
        };
        // What /proc showed of a daemon SIGKILLed with a thread in mkdir on a frozen fs.
        assert!(is_exiting(&status("Z (zombie)", 2, "0000000000000100")));
        assert!(is_exiting(&status("S (sleeping)", 9, "0000000000000100")));
        assert!(is_exiting(&status("Z (zombie)", 2, "0000000000000000")));
        // Its last thread gone, not yet reaped: the lock is being released.
        assert!(is_exiting(&status("Z (zombie)", 1, "0000000000000000")));
        assert!(!is_exiting(&status("S (sleeping)", 9, "0000000000000000")));
        assert!(!is_exiting(&status("S (sleeping)", 9, "0000000000004000")));
        assert_eq!(holder(&std::process::id().to_string()), Holder::Running);
        assert_eq!(holder("not-a-pid"), Holder::Unseen);
    }

    /// `State` of process `pid` (`None` once it is reaped).
    fn state_of(pid: u32) -> Option<String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status_field(&status, "State").map(str::to_string)
    }

    /// A killed daemon that takes longer than UNSEEN_HOLDER to go (a zombie here), then is
    /// reaped a moment before the kernel drops its lock: the next daemon waits it out (issue
    /// 15: under qemu TCG the unseen moment was reached after 3 s of waiting and refused).
    #[tokio::test]
    async fn a_holder_gone_after_a_long_exit_is_waited_for() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut child = std::process::Command::new("true").spawn().expect("spawn");
        let pid = child.id();
        for _ in 0..500 {
            if state_of(pid).is_some_and(|s| s.starts_with('Z')) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            state_of(pid).is_some_and(|s| s.starts_with('Z')),
            "no zombie"
        );
        // The zombie's lock, held on another open file of this process.
        let mut held = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.path().join("bosun.lock"))
            .expect("open");
        flock(&held, FlockOperation::NonBlockingLockExclusive).expect("flock");
        write!(held, "{pid}").expect("write pid");
        let path = dir.path().to_path_buf();
        let waiter = tokio::spawn(async move { StateLock::acquire(&path, "root").await });
        tokio::time::sleep(UNSEEN_HOLDER + Duration::from_millis(500)).await;
        assert!(!waiter.is_finished(), "gave up on an exiting holder");
        child.wait().expect("reap");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "gave up on a holder just gone");
        drop(held);
        waiter
            .await
            .expect("join")
            .expect("the lock is taken once the holder is gone");
    }
}
