//! The stop sequence with a fake runc and a paused clock: signal choice, deadlines that only shorten, callers that go away, a stop during a checkpoint.

use std::time::Duration;

use tokio::time::Instant;

use super::state::meta::ContainerMeta;
use super::state::status::{now_ns, ContainerState, ContainerStatus};
use super::test_fixture::{fixture, fixture_on, Fixture};
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

/// A fixture on a host where CRIU works.
fn with_criu() -> Fixture {
    let host = crate::oci::HostFacts {
        criu: Some("/usr/sbin/criu".into()),
        criu_why: String::new(),
        ..crate::oci::HostFacts::default()
    };
    fixture_on(|_| {}, host)
}

/// CheckpointContainer of `id` into `<fixture>/checkpoints/<name>` in its own task; returns
/// the directory.
fn checkpoint(
    fx: &Fixture,
    id: &str,
    name: &str,
) -> (
    std::path::PathBuf,
    tokio::task::JoinHandle<crate::Result<()>>,
) {
    let dir = fx.dir.path().join("checkpoints");
    std::fs::create_dir_all(&dir).expect("test fixture");
    let at = dir.join(name).display().to_string();
    let (rt, id) = (fx.rt.clone(), id.to_string());
    let task = tokio::spawn(async move { rt.checkpoint_container(&id, &at, 0).await });
    (dir, task)
}

fn dumps(fx: &Fixture) -> usize {
    let calls = fx.runc.calls();
    calls
        .iter()
        .filter(|c| matches!(c, Call::Checkpoint(_)))
        .count()
}

fn left_in(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .expect("test fixture")
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .collect()
}

/// Issue 29: a StopContainer during a checkpoint's dump is not held up by it: the signal,
/// SIGKILL at the deadline, the exit; the dump of the killed processes fails and the
/// checkpoint says the container was stopped, leaving nothing behind.
#[tokio::test(start_paused = true)]
async fn a_stop_during_a_checkpoint_keeps_its_deadline_and_the_checkpoint_fails() {
    let fx = with_criu();
    let id = running(&fx, "web", None, None);
    fx.runc.set_dump_time(Duration::from_secs(60));
    let exited = exit_on(&fx, &id, None);
    let (dir, ck) = checkpoint(&fx, &id, "c.tar");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dumps(&fx), 1, "the dump is under way");
    let t0 = Instant::now();
    fx.rt.stop_container(&id, 2).await.expect("stop");
    let took = t0.elapsed();
    assert!((secs(took) - 2.0).abs() < 0.1, "stop took {took:?}");
    exited.await.expect("exit task");
    assert_eq!(
        kills(&fx, &id),
        vec![(libc::SIGTERM, false), (libc::SIGKILL, true)]
    );
    // The dump ends when CRIU notices (here: at its end, 60 s); the stop did not wait for it.
    let e = ck
        .await
        .expect("join")
        .expect_err("the dump of a killed container");
    assert_eq!(e.kind(), crate::error::ErrorKind::FailedPrecondition, "{e}");
    assert!(e.message().contains("stopped during the checkpoint"), "{e}");
    assert!(left_in(&dir).is_empty(), "left: {:?}", left_in(&dir));
    let st = fx.rt.container(&id).expect("entry").status();
    assert_eq!(st.state(), ContainerState::Exited);
}

/// A second checkpoint waits for the first; RemoveContainer during a dump kills the
/// container, waits for the failed dump, then removes it; nothing deadlocks.
#[tokio::test(start_paused = true)]
async fn a_second_checkpoint_waits_and_a_remove_ends_the_dump_first() {
    let fx = with_criu();
    let id = running(&fx, "web", None, None);
    fx.runc.set_dump_time(Duration::from_secs(10));
    let _exited = exit_on(&fx, &id, None);
    let (dir, first) = checkpoint(&fx, &id, "a.tar");
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, second) = checkpoint(&fx, &id, "b.tar");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(dumps(&fx), 1, "the second checkpoint waits");
    let rt = fx.rt.clone();
    let id2 = id.clone();
    let remove = tokio::spawn(async move { rt.remove_container(&id2).await });
    let all = async {
        remove.await.expect("join").expect("remove");
        let a = first.await.expect("join").expect_err("first");
        let b = second.await.expect("join").expect_err("second");
        (a, b)
    };
    let (a, b) = tokio::time::timeout(Duration::from_secs(30), all)
        .await
        .expect("no deadlock");
    assert!(a.message().contains("stopped during the checkpoint"), "{a}");
    assert_eq!(b.kind(), crate::error::ErrorKind::FailedPrecondition, "{b}");
    assert_eq!(dumps(&fx), 1, "{b}");
    assert!(fx.rt.find_container(&id).expect("lookup").is_none());
    assert!(left_in(&dir).is_empty(), "left: {:?}", left_in(&dir));
}

/// A checkpoint asked while a stop's grace runs is refused at once: its dump would be killed.
#[tokio::test(start_paused = true)]
async fn a_checkpoint_during_a_stop_is_refused() {
    let fx = with_criu();
    let id = running(&fx, "web", None, None);
    let exited = exit_on(&fx, &id, None);
    let stop = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.stop_container(&id, 30).await }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (_, ck) = checkpoint(&fx, &id, "c.tar");
    let e = ck.await.expect("join").expect_err("refused");
    assert_eq!(e.kind(), crate::error::ErrorKind::FailedPrecondition, "{e}");
    assert!(e.message().contains("being stopped"), "{e}");
    assert_eq!(dumps(&fx), 0);
    exited.await.expect("exit task");
    stop.await.expect("join").expect("stop");
}
