//! Tests for status state derivation and transitions.

use super::status::*;
use crate::error::ErrorKind;
use ContainerState as C;

fn cs(c: i64, s: i64, f: i64, unknown: bool) -> ContainerStatus {
    ContainerStatus {
        created_ns: c,
        started_ns: s,
        finished_ns: f,
        unknown,
        ..Default::default()
    }
}

#[test]
fn container_state_table() {
    let rows = [
        (cs(1, 0, 0, false), C::Created),
        (cs(1, 2, 0, false), C::Running),
        (cs(1, 2, 3, false), C::Exited),
        (cs(1, 0, 3, false), C::Exited), // failed start
        (cs(1, 2, 3, true), C::Unknown),
        (cs(0, 0, 0, false), C::Unknown),
        (cs(0, 2, 0, false), C::Unknown),
        (cs(1, -2, 0, false), C::Unknown),
        (cs(1, 2, -1, false), C::Unknown),
        (cs(5, 2, 0, false), C::Running), // clock step: not UNKNOWN
    ];
    for (i, (s, want)) in rows.iter().enumerate() {
        assert_eq!(s.state(), *want, "row {i}: {s:?}");
    }
}

#[test]
fn sandbox_state_table() {
    let sb = |c, r, s, unknown| SandboxStatus {
        created_ns: c,
        ready_ns: r,
        stopped_ns: s,
        unknown,
        ..Default::default()
    };
    use SandboxState as S;
    let rows = [
        (sb(1, 0, 0, false), S::Created),
        (sb(1, 2, 0, false), S::Ready),
        (sb(1, 2, 3, false), S::NotReady),
        (sb(1, 0, 3, false), S::NotReady),
        (sb(1, 2, 0, true), S::Unknown),
        (sb(0, 2, 0, false), S::Unknown),
    ];
    for (i, (s, want)) in rows.iter().enumerate() {
        assert_eq!(s.state(), *want, "row {i}");
    }
    assert!(S::Ready.is_ready() && !S::Created.is_ready());
}

#[test]
fn reasons() {
    assert_eq!(reason_for(0, false), "Completed");
    assert_eq!(reason_for(1, false), "Error");
    assert_eq!(reason_for(137, false), "Error");
    assert_eq!(reason_for(137, true), "OOMKilled");
    assert_eq!(reason_for(0, true), "OOMKilled");
}

#[test]
fn container_transitions_validate() {
    let mut s = ContainerStatus::created(10);
    let e = s.exit(20, 0, false).expect_err("exit before start");
    assert_eq!(e.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(
        s,
        ContainerStatus::created(10),
        "failed transition changed state"
    );
    s.start(11, 42).expect("start");
    assert_eq!(s.state(), C::Running);
    assert!(s.start(12, 43).is_err(), "start twice");
    assert!(s.fail_start(12, "x").is_err(), "fail_start after start");
    assert!(s.set_removing().is_err(), "remove while running");
    s.exit(13, 143, false).expect("exit");
    assert_eq!(
        (s.state(), s.exit_code, s.reason.as_str()),
        (C::Exited, 143, "Error")
    );
    assert!(s.exit(14, 0, false).is_err(), "exit twice");
    assert!(s.start(14, 1).is_err(), "restart");
    s.set_removing().expect("remove");
    assert!(s.set_removing().is_err(), "remove twice");
}

#[test]
fn fail_start_is_start_error() {
    let mut s = ContainerStatus::created(10);
    s.fail_start(11, "exec: no such file").expect("fail");
    assert_eq!(s.state(), C::Exited);
    assert_eq!((s.exit_code, s.reason.as_str()), (128, "StartError"));
    assert_eq!(s.message, "exec: no such file");
    let mut r = ContainerStatus::created(10);
    assert!(r.start(0, 1).is_err() && r.start(1, 0).is_err(), "bad args");
}

#[test]
fn unknown_container_can_exit_for_real() {
    let mut s = ContainerStatus::unreadable("corrupt");
    assert_eq!(s.state(), C::Unknown);
    s.exit(50, 0, false).expect("exit from unknown");
    assert_eq!((s.state(), s.reason.as_str()), (C::Exited, "Completed"));
}

#[test]
fn sandbox_transitions_validate() {
    let mut s = SandboxStatus::created(1);
    assert!(
        s.set_removing().is_ok() && s.ready(2, 7).is_err(),
        "ready while removing"
    );
    let mut s = SandboxStatus::created(1);
    s.ready(2, 7).expect("ready");
    assert!(s.ready(3, 7).is_err(), "ready twice");
    assert!(s.set_removing().is_err(), "remove while ready");
    s.stop(4).expect("stop");
    assert_eq!(s.state(), SandboxState::NotReady);
    assert!(s.stop(5).is_err(), "stop twice");
    let mut u = SandboxStatus::unreadable("corrupt");
    u.stop(9).expect("stop unknown");
    assert_eq!(u.state(), SandboxState::NotReady);
}
