//! CNI plugin calls a killed daemon left running: found by the mark in their environment and
//! killed before recovery runs DEL for the same sandboxes (issue 16).
//!
//! Why a mark in the environment: a plugin outlives a SIGKILLed daemon (nothing kills a
//! child when its parent dies), and so do the `iptables` processes it runs. `PR_SET_PDEATHSIG`
//! does not fit: it fires when the *thread* that forked the child exits (tokio's blocking
//! threads come and go, which would kill healthy calls), and it reaches neither the plugin's
//! own children nor a plugin forked in the window before it is set. A pid file written after
//! the spawn misses a daemon killed between the spawn and the write. The environment is
//! inherited by every descendant (Go's `exec.Command` passes it on), costs nothing per call,
//! and identifies a process for sure: the next daemon on the same root finds every one of
//! them in `/proc/*/environ`, and signals each through a pidfd opened before the mark is
//! checked again, so a recycled pid is never hit.

use std::time::{Duration, Instant};

use rustix::process::{pidfd_open, pidfd_send_signal, Pid, PidfdFlags, Signal};

/// The variable every plugin call carries: `BOSUN_CNI_CALLER=<the daemon's CNI state dir>`.
pub const CALLER_ENV: &str = "BOSUN_CNI_CALLER";

/// What [`reap`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Reaped {
    /// Processes killed: `(pid, command line)`.
    pub killed: Vec<(i32, String)>,
    /// Processes still there when the grace ran out (stuck in the kernel).
    pub survivors: Vec<i32>,
}

/// Whether process `pid` carries `BOSUN_CNI_CALLER=<caller>` (false when it is gone).
fn marked(pid: i32, entry: &[u8]) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .is_ok_and(|env| env.split(|b| *b == 0).any(|e| e == entry))
}

/// A live (not zombie) process.
fn alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rfind(')')
            .and_then(|i| stat.get(i + 2..i + 3))
            .is_some_and(|state| state != "Z" && state != "X")
    })
}

/// Live processes other than this one carrying the mark of `caller`.
pub fn find(caller: &str) -> Vec<i32> {
    let entry = format!("{CALLER_ENV}={caller}").into_bytes();
    let me = std::process::id() as i32;
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| *pid != me && marked(*pid, &entry) && alive(*pid))
        .collect()
}

fn cmdline(pid: i32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .map(|b| {
            String::from_utf8_lossy(&b)
                .replace('\0', " ")
                .trim()
                .to_string()
        })
        .unwrap_or_default()
}

/// Kills every process marked with `caller` (SIGKILL through a pidfd, the mark checked after
/// the pidfd is open) until none is left or `grace` has passed. Blocking; call it from a
/// blocking thread.
pub fn reap(caller: &str, grace: Duration) -> Reaped {
    let entry = format!("{CALLER_ENV}={caller}").into_bytes();
    let deadline = Instant::now() + grace;
    let mut out = Reaped::default();
    loop {
        let found = find(caller);
        if found.is_empty() {
            return out;
        }
        for pid in &found {
            let fd = Pid::from_raw(*pid).and_then(|p| pidfd_open(p, PidfdFlags::empty()).ok());
            let Some(fd) = fd else {
                continue;
            };
            // The pidfd pins this very process: if it still has the mark, it is ours.
            if !marked(*pid, &entry) {
                continue;
            }
            let line = cmdline(*pid);
            if pidfd_send_signal(&fd, Signal::KILL).is_ok()
                && !out.killed.iter().any(|(p, _)| p == pid)
            {
                out.killed.push((*pid, line));
            }
        }
        if Instant::now() >= deadline {
            out.survivors = found.into_iter().filter(|p| alive(*p)).collect();
            return out;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    #[test]
    fn marked_processes_and_their_children_are_killed_others_are_not() {
        let caller = format!("/tmp/bosun-orphans-test-{}", std::process::id());
        // A "plugin" whose child (the `sleep`) inherits the mark, like iptables under bridge.
        let mut plugin = Command::new("sh")
            .args(["-c", "sleep 600 & wait"])
            .env(CALLER_ENV, &caller)
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn plugin");
        let mut other = Command::new("sleep")
            .arg("600")
            .env(CALLER_ENV, format!("{caller}-other"))
            .spawn()
            .expect("spawn other");
        let ok = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(10));
            find(&caller).len() == 2
        });
        assert!(ok, "marked: {:?}", find(&caller));
        let reaped = reap(&caller, Duration::from_secs(5));
        assert_eq!(reaped.killed.len(), 2, "{reaped:?}");
        assert!(reaped.survivors.is_empty(), "{reaped:?}");
        let _ = plugin.wait();
        assert!(find(&caller).is_empty());
        assert!(
            other.try_wait().expect("try_wait").is_none(),
            "another caller's process was killed"
        );
        let _ = other.kill();
        let _ = other.wait();
    }
}
