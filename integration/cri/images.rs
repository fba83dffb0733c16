//! Images and containers together: an image removed while a container uses it keeps the container whole.

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::Scenario;
use crate::support::{trial, wait_until};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::images::removing_an_image_in_use_keeps_its_container_whole",
        NEEDS,
        removed_in_use,
    )]
}

/// The snapshot directories of the daemon's store.
fn snapshots(d: &crate::support::Daemon) -> Vec<String> {
    cri::entries(&d.root().join("snapshots"))
        .into_iter()
        .filter(|e| e.len() == 64 && e.bytes().all(|b| b.is_ascii_hexdigit()))
        .collect()
}

fn removed_in_use() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let mut images = d.images().await?;
        let before = snapshots(d);
        ensure!(!before.is_empty(), "no snapshots after import");
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "img")).await?;
        let c = cri::sh_config(&pod, "user", &busybox, "echo up; exec sleep 1000");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let spec = pb::ImageSpec {
            image: busybox.clone(),
            ..Default::default()
        };
        images
            .remove_image(pb::RemoveImageRequest {
                image: Some(spec.clone()),
            })
            .await?;
        let gone = images
            .image_status(pb::ImageStatusRequest {
                image: Some(spec),
                verbose: false,
            })
            .await?
            .into_inner();
        ensure!(gone.image.is_none(), "the image is still listed");
        // GC runs in the background: give it time to (wrongly) take the layers.
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        ensure!(
            snapshots(d) == before,
            "a leased snapshot was collected: {:?} -> {:?}",
            before,
            snapshots(d)
        );
        let r = cri::exec(
            &mut rt,
            &id,
            &["sh", "-c", "ls /bin/busybox && echo ok"],
            10,
        )
        .await?;
        ensure!(
            r.exit_code == 0 && String::from_utf8_lossy(&r.stdout).contains("ok"),
            "exec in the container after its image was removed: {} {:?}",
            r.exit_code,
            String::from_utf8_lossy(&r.stderr)
        );
        let s = cri::status(&mut rt, &id).await?;
        ensure!(
            cri::state_of(&s) == pb::ContainerState::ContainerRunning,
            "state {:?}",
            cri::state_of(&s)
        );
        // Once the last user is gone, the layers go too (the lease is released; the next
        // GC, triggered by any removal, collects them).
        cri::remove_pod(&mut rt, &pod.id).await?;
        cri::import(d, "nonroot")?;
        images
            .remove_image(pb::RemoveImageRequest {
                image: Some(pb::ImageSpec {
                    image: "bosun.test/nonroot:latest".into(),
                    ..Default::default()
                }),
            })
            .await?;
        let freed = wait_until(10, || {
            let now = snapshots(d);
            before.iter().all(|s| !now.contains(s))
        });
        ensure!(
            freed,
            "layers of the removed image outlive their last container: {:?}",
            snapshots(d)
        );
        Ok(())
    })
}
