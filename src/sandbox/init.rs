//! `bosun pod-init --dir DIR`: PID 1 of a pod's pid namespace; reaps zombies until told to stop.

use std::ffi::OsString;

use rustix::io::Errno;
use rustix::process::{wait, WaitOptions};

use super::sys::{Sig, SignalWait};

/// `bosun pod-init ARGS…`: returns the exit status. `--dir` only labels the process (so the
/// daemon can recognise it after a restart); SIGTERM/SIGINT/SIGHUP end it with status 0.
pub fn main(args: Vec<OsString>) -> i32 {
    if args.first().and_then(|a| a.to_str()) != Some("--dir") || args.len() != 2 {
        eprintln!("bosun pod-init: usage: bosun pod-init --dir DIR");
        return 2;
    }
    // Signals first: until they are blocked, a SIGTERM to a namespace init is simply dropped.
    let signals = match SignalWait::new() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("bosun pod-init: block signals: {e}");
            return 1;
        }
    };
    // Own session: no terminal or process group ties to whoever started us.
    let _ = rustix::process::setsid();
    loop {
        reap_all();
        match signals.wait() {
            Ok(Sig::Child) => continue,
            Ok(Sig::Stop) => return 0,
            Err(e) => {
                eprintln!("bosun pod-init: wait for signals: {e}");
                return 1;
            }
        }
    }
}

/// Starts `bosun pod-init --dir DIR` (this executable) with no stdio, in `/`: PID 1 of a new
/// pid namespace when the caller has just unshared one.
pub fn spawn(dir: &std::path::Path) -> std::io::Result<std::process::Child> {
    use std::process::Stdio;
    std::process::Command::new("/proc/self/exe")
        .arg("pod-init")
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .current_dir("/")
        .spawn()
}

/// Reaps every exited child without blocking.
fn reap_all() {
    loop {
        match wait(WaitOptions::NOHANG) {
            Ok(Some(_)) => continue,
            Ok(None) | Err(Errno::CHILD) => return,
            Err(Errno::INTR) => continue,
            Err(_) => return,
        }
    }
}
