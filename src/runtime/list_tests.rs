//! Lists never miss a live object (issue 28): the interleavings that could run a process for a
//! container no list shows, forced with fakes.

use super::state::meta::{ContainerMeta, SandboxMeta, SandboxRequest};
use super::state::status::{now_ns, ContainerStatus, SandboxStatus};
use super::test_fixture::{fixture, Fixture};
use crate::error::{Error, ErrorKind};
use crate::oci::ContainerRequest;
use crate::runtime::PodName;

/// A READY sandbox and a CREATED (never started) container in it; the container's id.
fn created_container(fx: &Fixture) -> String {
    let req = SandboxRequest {
        pod: PodName {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "uid-web".into(),
            attempt: 0,
        },
        ..SandboxRequest::default()
    };
    let key = req.pod.key();
    let sandboxes = &fx.rt.state.sandboxes;
    let res = sandboxes.reserve(&key).expect("reserve");
    let sid = res.id().to_string();
    let meta = SandboxMeta {
        request: req,
        hostname: "web".into(),
        state_dir: fx.dir.path().join("state/sandboxes").join(&sid),
    };
    let mut status = SandboxStatus::created(now_ns());
    status.ready(now_ns(), 0).expect("ready");
    sandboxes.create(res, meta, status).expect("sandbox");
    let containers = &fx.rt.state.containers;
    let res = containers
        .reserve(&format!("main_{key}_0"))
        .expect("reserve");
    let id = res.id().to_string();
    let meta = ContainerMeta {
        sandbox_id: sid,
        pod_key: key,
        request: ContainerRequest {
            name: "main".into(),
            ..ContainerRequest::default()
        },
        state_dir: fx.rt.layout.container_dir(&id),
        ..ContainerMeta::default()
    };
    let status = ContainerStatus::created(now_ns());
    containers.create(res, meta, status).expect("container");
    id
}

/// Lets every spawned task run until it waits.
async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

#[tokio::test]
async fn a_start_that_waited_for_a_remove_starts_nothing() {
    let fx = fixture();
    let id = created_container(&fx);
    // Should a monitor be launched, its start fails at once (no real process either way).
    fx.launcher
        .push_launch(Err(Error::internal("no monitor in this test")));
    // The remove gets the container's lifecycle lock first, the start queues behind it.
    let handle = fx.rt.handle(&id);
    let held = handle.lifecycle.lock().await;
    let remove = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.remove_container(&id).await }
    });
    settle().await;
    let start = tokio::spawn({
        let (rt, id) = (fx.rt.clone(), id.clone());
        async move { rt.start_container(&id).await }
    });
    settle().await;
    drop(held);
    remove.await.expect("join").expect("remove");
    let started = start.await.expect("join");
    assert!(
        fx.launcher.launched().is_empty(),
        "a monitor was launched for a removed container: {started:?}"
    );
    let e = started.expect_err("nothing to start");
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(fx.rt.list_containers(&Default::default()).is_empty());
}
