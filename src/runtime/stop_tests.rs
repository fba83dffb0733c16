//! The stop sequence with a fake runc and a paused clock: signal choice, deadlines that only shorten, callers that go away.

use std::time::Duration;

use tokio::time::Instant;

use super::state::meta::ContainerMeta;
use super::state::status::{now_ns, ContainerState, ContainerStatus};
use super::test_fixture::{fixture, Fixture};
use crate::monitor::exit_record::ExitRecord;
use crate::oci::runc::fake::Call;
use crate::oci::{ContainerExit, ContainerRequest};

/// A RUNNING container record with the given CRI and image stop signals.
fn running(fx: &Fixture, name: &str, cri: Option<i32>, image: Option<i32>) -> String {
    let meta = ContainerMeta {
        sandbox_id: "sb".into(),
        pod_key: "pod_ns_uid_0".into(),
        request: ContainerRequest {
            name: name.into(),
            stop_signal: cri,
            ..ContainerRequest::default()
        },
        image_stop_signal: image,
        ..ContainerMeta::default()
    };
    let containers = &fx.rt.state.containers;
    let res = containers.reserve(&format!("{name}_pod")).expect("reserve");
    let id = res.id().to_string();
    let mut status = ContainerStatus::created(now_ns());
    status.start(now_ns(), 4242).expect("start");
    containers.create(res, meta, status).expect("create");
    fx.runc.add_created(&id, 4242);
    id
}

/// Stands in for the monitor: when the fake runc gets a SIGKILL (or `signal` if it is the
/// one the container honours), records the exit; returns when it happened (paused clock).
fn exit_on(fx: &Fixture, id: &str, honours: Option<i32>) -> tokio::task::JoinHandle<Instant> {
    let (rt, runc, id) = (fx.rt.clone(), fx.runc.clone(), id.to_string());
    tokio::spawn(async move {
        loop {
            let hit = runc.calls().iter().any(|c| match c {
                Call::Kill(k, sig, _) => {
                    k == &id && (*sig == libc::SIGKILL || Some(*sig) == honours)
                }
                _ => false,
            });
            if hit {
                let at = Instant::now();
                let record = ExitRecord {
                    pid: 4242,
                    exit_code: 137,
                    signal: Some(9),
                    oom_killed: false,
                    started_at_ns: 1,
                    finished_at_ns: now_ns(),
                };
                rt.record_exit(&id, ContainerExit::Recorded(record)).await;
                return at;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
}

fn kills(fx: &Fixture, id: &str) -> Vec<(i32, bool)> {
    fx.runc
        .calls()
        .into_iter()
        .filter_map(|c| match c {
            Call::Kill(k, sig, all) if k == id => Some((sig, all)),
            _ => None,
        })
        .collect()
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

#[tokio::test(start_paused = true)]
async fn term_ignored_means_sigkill_of_everything_at_the_deadline() {
    let fx = fixture();
    let id = running(&fx, "web", None, None);
    let t0 = Instant::now();
    let exited = exit_on(&fx, &id, None);
    fx.rt.stop_container(&id, 10).await.expect("stop");
    let at = exited.await.expect("exit task");
    assert!(
        (secs(at - t0) - 10.0).abs() < 0.05,
        "killed at {:?}",
        at - t0
    );
    assert_eq!(
        kills(&fx, &id),
        vec![(libc::SIGTERM, false), (libc::SIGKILL, true)]
    );
    let st = fx.rt.container(&id).expect("entry").status();
    assert_eq!(st.state(), ContainerState::Exited);
    assert_eq!(st.exit_code, 137);
}

/// Issue 16: a timeout of i64::MAX seconds (a caller's "never") overflowed the deadline and
/// panicked the stop task; it now waits like any long grace, and a later stop shortens it.
#[tokio::test(start_paused = true)]
async fn an_endless_timeout_is_a_long_grace_not_a_panic() {
    let fx = fixture();
    let id = running(&fx, "web", None, None);
    let exited = exit_on(&fx, &id, None);
    let rt = fx.rt.clone();
    let id2 = id.clone();
    let endless = tokio::spawn(async move { rt.stop_container(&id2, i64::MAX).await });
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!endless.is_finished(), "the stop ended early");
    fx.rt.stop_container(&id, 0).await.expect("stop now");
    exited.await.expect("exit task");
    endless.await.expect("no panic").expect("stop");
    assert_eq!(kills(&fx, &id).first(), Some(&(libc::SIGTERM, false)));
}

#[tokio::test(start_paused = true)]
async fn honoured_signal_ends_it_without_a_kill() {
    let fx = fixture();
    let id = running(&fx, "web", None, Some(libc::SIGUSR1));
    let t0 = Instant::now();
    let exited = exit_on(&fx, &id, Some(libc::SIGUSR1));
    fx.rt.stop_container(&id, 30).await.expect("stop");
    let at = exited.await.expect("exit task");
    assert!(secs(at - t0) < 0.1, "exit at {:?}", at - t0);
    assert_eq!(
        kills(&fx, &id),
        vec![(libc::SIGUSR1, false)],
        "image STOPSIGNAL"
    );
    // Stopping again is a no-op.
    fx.rt.stop_container(&id, 30).await.expect("second stop");
    fx.rt.stop_container("ffff", 30).await.expect("unknown id");
    assert_eq!(kills(&fx, &id).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn cri_stop_signal_beats_the_image_one() {
    let fx = fixture();
    let id = running(&fx, "web", Some(libc::SIGINT), Some(libc::SIGUSR1));
    let exited = exit_on(&fx, &id, Some(libc::SIGINT));
    fx.rt.stop_container(&id, 30).await.expect("stop");
    exited.await.expect("exit task");
    assert_eq!(kills(&fx, &id), vec![(libc::SIGINT, false)]);
}

#[tokio::test(start_paused = true)]
async fn zero_timeout_kills_at_once_without_the_signal() {
    let fx = fixture();
    let id = running(&fx, "web", None, None);
    let t0 = Instant::now();
    let exited = exit_on(&fx, &id, None);
    fx.rt.stop_container(&id, 0).await.expect("stop");
    let at = exited.await.expect("exit task");
    assert!(secs(at - t0) < 0.05);
    assert_eq!(kills(&fx, &id), vec![(libc::SIGKILL, true)]);
}

#[tokio::test(start_paused = true)]
async fn a_shorter_second_stop_wins_a_longer_one_does_not_extend() {
    let fx = fixture();
    let id = running(&fx, "web", None, None);
    let t0 = Instant::now();
    let exited = exit_on(&fx, &id, None);
    let first = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.stop_container(&id, 30).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let second = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.stop_container(&id, 2).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let third = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.stop_container(&id, 60).await }
    });
    let at = exited.await.expect("exit task");
    for h in [first, second, third] {
        h.await.expect("join").expect("stop");
    }
    assert!(
        (secs(at - t0) - 3.0).abs() < 0.05,
        "killed at {:?}",
        at - t0
    );
    assert_eq!(
        kills(&fx, &id),
        vec![(libc::SIGTERM, false), (libc::SIGKILL, true)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_caller_that_goes_away_does_not_kill_early() {
    let fx = fixture();
    let id = running(&fx, "web", None, None);
    let t0 = Instant::now();
    let exited = exit_on(&fx, &id, None);
    let call = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.stop_container(&id, 5).await }
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    call.abort();
    let at = exited.await.expect("exit task");
    assert!(
        (secs(at - t0) - 5.0).abs() < 0.05,
        "killed at {:?}",
        at - t0
    );
    assert_eq!(
        kills(&fx, &id),
        vec![(libc::SIGTERM, false), (libc::SIGKILL, true)]
    );
}
