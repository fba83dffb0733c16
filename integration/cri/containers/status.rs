//! ContainerStatus fields through a container's life: image and image ref, labels and
//! annotations, log path, mounts, state and times, exit code and message; NotFound once removed.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, map, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::containers::status_fields_follow_the_lifecycle",
        NEEDS,
        status_fields,
    )]
}

fn status_fields() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let term = d.dir().join("termination-log");
        std::fs::write(&term, "")?;
        let mut rt = s.rt.clone();
        let image = d
            .images()
            .await?
            .image_status(pb::ImageStatusRequest {
                image: Some(pb::ImageSpec {
                    image: busybox.clone(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?
            .into_inner()
            .image
            .context("imported image not found")?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "status")).await?;
        let script = "trap 'echo bye-from-trap > /dev/termination-log; exit 1' TERM; \
        echo started; while :; do sleep 0.1; done";
        let mut c = cri::sh_config(&pod, "status", &busybox, script);
        c.labels = map(&[("io.kubernetes.container.name", "status"), ("x", "y")]);
        c.annotations = map(&[
            ("io.kubernetes.container.restartCount", "0"),
            (
                "io.kubernetes.container.terminationMessagePath",
                "/dev/termination-log",
            ),
            ("bosun.test/note", "kept verbatim: {\"json\": true}"),
        ]);
        c.mounts = vec![pb::Mount {
            container_path: "/dev/termination-log".into(),
            host_path: term.display().to_string(),
            ..Default::default()
        }];
        let t0 = cri::now_ns();
        let id = cri::create(&mut rt, &pod, &c).await?;
        let created = cri::status(&mut rt, &id).await?;
        let check_common = |s: &pb::ContainerStatus| -> Result<()> {
            ensure!(s.id == id, "id {}", s.id);
            ensure!(s.metadata == c.metadata, "metadata {:?}", s.metadata);
            ensure!(
                s.image.as_ref().map(|i| i.image.as_str()) == Some(busybox.as_str())
                    || s.image.as_ref().map(|i| i.image.as_str()) == Some(image.id.as_str()),
                "image {:?} (want {busybox} or {})",
                s.image,
                image.id
            );
            ensure!(
                s.image_ref == image.id || image.repo_digests.contains(&s.image_ref),
                "image_ref {:?}: not the image id {} nor a repo digest {:?}",
                s.image_ref,
                image.id,
                image.repo_digests
            );
            ensure!(s.labels == c.labels, "labels {:?}", s.labels);
            ensure!(
                s.annotations == c.annotations,
                "annotations {:?}",
                s.annotations
            );
            ensure!(
                s.log_path == pod.log_of(&c).display().to_string(),
                "log_path {:?}",
                s.log_path
            );
            ensure!(
                s.mounts
                    .iter()
                    .any(|m| m.container_path == "/dev/termination-log"
                        && m.host_path == term.display().to_string()),
                "mounts {:?}",
                s.mounts
            );
            Ok(())
        };
        ensure!(
            cri::state_of(&created) == pb::ContainerState::ContainerCreated,
            "after create: {created:?}"
        );
        ensure!(
            created.created_at >= t0
                && created.created_at <= cri::now_ns()
                && created.started_at == 0
                && created.finished_at == 0,
            "created timestamps: {} {} {}",
            created.created_at,
            created.started_at,
            created.finished_at
        );
        check_common(&created)?;
        let listed = cri::list_containers(&mut rt, None).await?;
        let item = listed.first().context("not listed")?;
        ensure!(
            listed.len() == 1
                && item.id == id
                && item.pod_sandbox_id == pod.id
                && item.metadata == c.metadata
                && item.state == pb::ContainerState::ContainerCreated as i32
                && item.created_at == created.created_at
                && item.labels == c.labels
                && item.annotations == c.annotations
                && item.image_ref == created.image_ref
                && item.image == created.image,
            "listed {item:?} vs status {created:?}"
        );

        cri::start(&mut rt, &id).await?;
        let running = cri::status(&mut rt, &id).await?;
        ensure!(
            cri::state_of(&running) == pb::ContainerState::ContainerRunning
                && running.started_at >= running.created_at
                && running.created_at == created.created_at
                && running.finished_at == 0,
            "after start: {running:?}"
        );
        check_common(&running)?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "started")).await?;

        let took = cri::stop(&mut rt, &id, 10).await?;
        let exited = cri::status(&mut rt, &id).await?;
        cri::check_exit(&exited, 1, "Error")?;
        ensure!(
            took.as_secs_f64() < 5.0,
            "TERM-honouring stop took {took:?}"
        );
        ensure!(
            exited.created_at == created.created_at
                && exited.started_at == running.started_at
                && exited.finished_at >= exited.started_at
                && exited.finished_at <= cri::now_ns(),
            "timestamps after exit: created {} started {} finished {}",
            exited.created_at,
            exited.started_at,
            exited.finished_at
        );
        // The kubelet reads the termination-message file itself and appends it to this
        // message: the runtime reporting it too shows "bye-from-trap: bye-from-trap".
        ensure!(
            exited.message.is_empty()
                && std::fs::read_to_string(&term)?.trim_end() == "bye-from-trap",
            "ContainerStatus.message {:?} (must not carry the termination message)",
            exited.message
        );
        check_common(&exited)?;
        let again = cri::status(&mut rt, &id).await?;
        ensure!(
            again == exited,
            "status changed by itself: {again:?} vs {exited:?}"
        );

        cri::remove(&mut rt, &id).await?;
        let gone = cri::status(&mut rt, &id)
            .await
            .err()
            .context("status after remove")?;
        ensure!(
            gone.chain()
                .find_map(|e| e.downcast_ref::<tonic::Status>())
                .is_some_and(|s| s.code() == tonic::Code::NotFound),
            "{gone:#}"
        );
        cri::remove(&mut rt, &id)
            .await
            .context("second RemoveContainer")?;
        ensure!(pod.log_of(&c).exists(), "RemoveContainer must keep the log");
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
