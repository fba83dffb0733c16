//! GetContainerEvents over a real daemon: a full pod lifecycle in order, with statuses, while an idle subscriber lags.

use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use pb::ContainerEventType as T;

use crate::support::cri::{self, NEEDS};
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::events::a_pod_lifecycle_in_order_with_statuses",
        NEEDS,
        lifecycle,
    )]
}

type Events = tonic::Streaming<pb::ContainerEventResponse>;

async fn subscribe(rt: &mut cri::Rt) -> Result<Events> {
    Ok(rt
        .get_container_events(pb::GetEventsRequest {})
        .await
        .context("GetContainerEvents")?
        .into_inner())
}

/// The next event, within 10 s.
async fn next(events: &mut Events) -> Result<pb::ContainerEventResponse> {
    match tokio::time::timeout(Duration::from_secs(10), events.message()).await {
        Ok(Ok(Some(ev))) => Ok(ev),
        Ok(Ok(None)) => bail!("the event stream ended"),
        Ok(Err(e)) => bail!("event stream: {e}"),
        Err(_) => bail!("no event within 10 s"),
    }
}

/// The next event, checked to be `want` for `id`.
async fn expect(events: &mut Events, id: &str, want: T) -> Result<pb::ContainerEventResponse> {
    let ev = next(events).await?;
    ensure!(
        ev.container_id == id && ev.container_event_type == want as i32,
        "wanted {want:?} for {id}, got {:?} for {}",
        T::try_from(ev.container_event_type),
        ev.container_id
    );
    ensure!(
        (cri::now_ns() - ev.created_at).abs() < 60_000_000_000,
        "event time {} is not now",
        ev.created_at
    );
    Ok(ev)
}

fn lifecycle() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut events = subscribe(&mut rt).await?;
            // A subscriber that never reads must not hold the runtime back.
            let mut idle_rt = cri::client(&d).await?;
            let _idle = subscribe(&mut idle_rt).await?;

            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "events")).await?;
            let ev = expect(&mut events, &pod.id, T::ContainerCreatedEvent).await?;
            let ps = ev
                .pod_sandbox_status
                .context("CREATED without a sandbox status")?;
            ensure!(ps.id == pod.id, "sandbox status of {}", ps.id);
            expect(&mut events, &pod.id, T::ContainerStartedEvent).await?;

            let c = cri::sh_config(&pod, "quits", &busybox, "exit 3");
            let id = cri::create(&mut rt, &pod, &c).await?;
            let ev = expect(&mut events, &id, T::ContainerCreatedEvent).await?;
            let mine = ev.containers_statuses.iter().find(|s| s.id == id);
            ensure!(
                mine.is_some_and(|s| s.state == pb::ContainerState::ContainerCreated as i32),
                "CREATED event statuses: {:?}",
                ev.containers_statuses
            );
            cri::start(&mut rt, &id).await?;
            expect(&mut events, &id, T::ContainerStartedEvent).await?;
            let ev = expect(&mut events, &id, T::ContainerStoppedEvent).await?;
            let mine = ev
                .containers_statuses
                .iter()
                .find(|s| s.id == id)
                .context("STOPPED event without the container's status")?;
            ensure!(
                mine.state == pb::ContainerState::ContainerExited as i32 && mine.exit_code == 3,
                "STOPPED event status: {mine:?}"
            );

            // Churn past the idle subscriber's backlog would take long; a few hundred
            // status reads and one more container are enough to show nothing waits on it.
            for _ in 0..200 {
                cri::status(&mut rt, &id).await?;
            }
            cri::remove(&mut rt, &id).await?;
            let ev = expect(&mut events, &id, T::ContainerDeletedEvent).await?;
            ensure!(
                ev.containers_statuses.iter().all(|s| s.id != id),
                "DELETED event still lists the container"
            );
            ensure!(
                ev.pod_sandbox_status.is_some(),
                "DELETED event lost the pod status"
            );

            cri::remove_pod(&mut rt, &pod.id).await?;
            let ev = expect(&mut events, &pod.id, T::ContainerStoppedEvent).await?;
            let ps = ev
                .pod_sandbox_status
                .context("STOPPED without a sandbox status")?;
            ensure!(
                ps.state == pb::PodSandboxState::SandboxNotready as i32,
                "pod STOPPED event: state {}",
                ps.state
            );
            let ev = expect(&mut events, &pod.id, T::ContainerDeletedEvent).await?;
            ensure!(
                ev.pod_sandbox_status.is_none() && ev.containers_statuses.is_empty(),
                "pod DELETED event still carries state: {ev:?}"
            );

            // Every subscriber gets every event: a second one opened now sees the next pod.
            let mut late = subscribe(&mut rt).await?;
            let pod2 = cri::run_pod(&mut rt, cri::pod_config(&d, "events2")).await?;
            expect(&mut events, &pod2.id, T::ContainerCreatedEvent).await?;
            expect(&mut late, &pod2.id, T::ContainerCreatedEvent).await?;
            cri::remove_pod(&mut rt, &pod2.id).await?;
            Ok(())
        }),
    )
}
