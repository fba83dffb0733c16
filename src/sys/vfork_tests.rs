//! Unit tests for spawning through posix_spawn: descriptors, signals, exit status, kill on drop.

use super::*;
use std::io::Read;
use std::time::{Duration, Instant};

fn sh(script: &str) -> Vec<OsString> {
    vec!["-c".into(), script.into()]
}

/// Runs `sh -c script` with its stdout on a pipe; returns (exit status, output).
async fn output(script: &str) -> (ExitStatus, String) {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).expect("pipe");
    let setup = Setup {
        null: vec![0],
        dup: vec![(std::os::fd::AsFd::as_fd(&write), 1)],
    };
    let mut child = spawn(Path::new("/bin/sh"), &sh(script), &setup).expect("spawn");
    drop(write);
    let status = child.wait().await.expect("wait");
    let mut text = String::new();
    std::fs::File::from(read)
        .read_to_string(&mut text)
        .expect("read");
    (status, text)
}

#[tokio::test]
async fn exit_status_and_descriptors_reach_the_parent() {
    let (status, text) = output("echo out; read x; echo \"in=[$x]\"; exit 7").await;
    assert_eq!(status.code(), Some(7));
    assert_eq!(text, "out\nin=[]\n");
}

#[tokio::test]
async fn a_blocked_or_ignored_signal_of_the_parent_is_not_the_childs() {
    // The mask is per thread (this test's only); the child inherits the spawning thread's.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: a zeroed set filled by sigemptyset/sigaddset, applied to this thread only.
    unsafe {
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGUSR2);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    let (status, text) = output("grep -E 'SigBlk|SigIgn' /proc/self/status").await;
    // SAFETY: undoes the block above on this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    assert!(status.success(), "{status:?} {text}");
    let field = |name: &str| {
        let line = text
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{name} in {text}"));
        u64::from_str_radix(line.split_whitespace().nth(1).unwrap_or(""), 16).expect("hex")
    };
    assert_eq!(field("SigBlk:"), 0, "{text}");
    // Rust ignores SIGPIPE in this process; only glibc's own 32 and 33 may stay ignored.
    assert_eq!(field("SigIgn:") & !0x1_8000_0000, 0, "{text}");
}

#[test]
fn a_program_that_cannot_be_run_is_the_spawns_error() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let err = spawn(Path::new("/nonexistent/bosun"), &[], &Setup::default())
        .expect_err("no such program");
    assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");
}

#[tokio::test]
async fn a_child_dropped_unwaited_is_killed_and_reaped() {
    let child = spawn(Path::new("/bin/sleep"), &["100".into()], &Setup::default()).expect("spawn");
    let pid = child.id();
    let t = Instant::now();
    drop(child);
    // Reaped (not a zombie): its /proc entry goes away.
    while Path::new(&format!("/proc/{pid}")).exists() {
        assert!(t.elapsed() < Duration::from_secs(5), "{pid} still there");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
