//! A full disk (issue 28 item 4): PullImage, CreateContainer and RunPodSandbox on a full small
//! root answer ResourceExhausted naming the file system, leave nothing and work once space is
//! freed (the small disks and their checks: support/disk.rs).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri;
use crate::support::disk::{
    journal_leases, small_root_daemon, torn_files, LEASES_ON_ROOT, NEEDS, ROOT_MIB,
};
use crate::support::{block_on, trial, wait_until, Daemon, Need, Registry};

const PULL_NEEDS: &[Need] = &[Need::Root, Need::Registry, Need::Images, Need::Freeze];

/// Free bytes left by each fill of the creation tests: nothing, then a KiB more each time
/// up to four blocks, then more: each step of a creation (lease, record, status, writable
/// layer) meets the full disk in one of them.
const STEPS: [u64; 19] = {
    let mut steps = [0; 19];
    let mut i = 0;
    while i < 17 {
        steps[i] = (i as u64) << 10;
        i += 1;
    }
    steps[17] = 24 << 10;
    steps[18] = 48 << 10;
    steps
};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "disk::pull_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            PULL_NEEDS,
            pull_on_a_full_root,
        ),
        trial(
            "disk::create_container_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            NEEDS,
            create_on_a_full_root,
        ),
        trial(
            "disk::run_pod_sandbox_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            NEEDS,
            run_pod_on_a_full_root,
        ),
    ]
}

/// `r` failed with ResourceExhausted, saying the device is full and naming the file system
/// mounted at `fs` (the answer is printed: what the disk tests show).
pub fn full_disk_refusal<T: std::fmt::Debug>(
    what: &str,
    r: std::result::Result<T, tonic::Status>,
    fs: &Path,
) -> Result<()> {
    let r = r.inspect_err(|s| println!("{what}: {:?} {}", s.code(), s.message()));
    let fs = format!("file system {}", fs.display());
    cri::refused(
        what,
        r,
        tonic::Code::ResourceExhausted,
        &["no space left on device", &fs],
    )
}

/// What a refused creation may not leave: objects of `kinds`, their directories and mounts
/// (the trash is given 10 s), temps or torn records on the root, leases of containers.
fn nothing_left(d: &Daemon, kinds: &[&str]) -> Result<()> {
    let leftovers = || -> Vec<String> {
        let mut left = torn_files(&d.root());
        for base in [d.root(), d.state()] {
            for dir in kinds
                .iter()
                .map(|k| base.join(k))
                .chain([base.join("trash")])
            {
                left.extend(
                    cri::entries(&dir)
                        .iter()
                        .map(|e| format!("dir {}/{e}", dir.display())),
                );
            }
        }
        let leases = cri::entries(&d.root().join("leases"));
        left.extend(leases.iter().map(|l| format!("image lease {l}")));
        for kind in kinds {
            for (mp, fs) in cri::mounts_under(&d.state().join(kind)) {
                left.push(format!("mount {} ({fs})", mp.display()));
            }
        }
        left
    };
    wait_until(10, || leftovers().is_empty());
    let left = leftovers();
    ensure!(left.is_empty(), "left behind:\n  {}", left.join("\n  "));
    Ok(())
}

async fn pull(d: &Daemon, image: &str) -> std::result::Result<String, tonic::Status> {
    let mut c = d
        .images()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    c.pull_image(pb::PullImageRequest {
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn images(d: &Daemon) -> Result<Vec<pb::Image>> {
    Ok(d.images()
        .await?
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images)
}

/// PullImage on a full root, then with room for the manifest but not the layer, then for the
/// layer's blob but not its unpacked files: ResourceExhausted naming the root's file system
/// each time, no image, no ingest, snapshot temp or record left; once freed the pull works.
fn pull_on_a_full_root() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let (disk, d) = small_root_daemon(ROOT_MIB, "")?;
    let image = reg.image("busybox");
    let r = block_on(async {
        for keep in [0, 64 << 10, 1600 << 10] {
            disk.fill(keep)?;
            let what = format!("PullImage with {} KiB free", disk.avail() >> 10);
            full_disk_refusal(&what, pull(&d, &image).await, &d.root())?;
            ensure!(images(&d).await?.is_empty(), "{what}: an image is listed");
            nothing_left(&d, &[])?;
            disk.free()?;
        }
        let r = pull(&d, &image).await.context("PullImage once freed")?;
        ensure!(
            images(&d).await?.iter().any(|i| i.id == r),
            "pulled image {r} not listed"
        );
        Ok(())
    });
    cri::with_log(&d, r)
}

/// CreateContainer with the root full, or nearly (each of [`STEPS`]): ResourceExhausted
/// naming the root's file system, or a whole container (removed again); nothing left of a
/// refused one. Once freed, the same config creates and runs.
fn create_on_a_full_root() -> Result<()> {
    let (disk, d) = small_root_daemon(ROOT_MIB, "")?;
    let image = cri::import(&d, "busybox")?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "full")).await?;
        let c = cri::sh_config(&pod, "c", &image, "echo hello; sleep 1000");
        let mut refused = 0;
        for keep in STEPS {
            disk.fill(keep)?;
            let what = format!("CreateContainer with {} KiB free", disk.avail() >> 10);
            let created = cri::try_create(&mut rt, &pod, &c).await;
            if let Ok(id) = &created {
                println!("{what}: created");
                cri::remove(&mut rt, id).await?;
            } else {
                full_disk_refusal(&what, created, &d.root())?;
                refused += 1;
                let listed = cri::list_containers(&mut rt, None).await?;
                ensure!(listed.is_empty(), "{what}: listed {listed:?}");
                nothing_left(&d, &["containers"])?;
            }
            disk.free()?;
        }
        ensure!(refused > 0, "no CreateContainer was refused");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 20, |l| l.iter().any(|x| x == "hello")).await?;
        cri::stop(&mut rt, &id, 0).await?;
        cri::remove_pod(&mut rt, &pod.id).await
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}

/// RunPodSandbox with the root (which holds the lease journal too) full, or nearly: refused
/// with ResourceExhausted naming the root's file system, or a whole pod (removed again);
/// nothing left of a refused one, no lease held, no torn journal line. Once freed, the same
/// config (a kubelet's retry) runs.
fn run_pod_on_a_full_root() -> Result<()> {
    let (disk, d) = small_root_daemon(ROOT_MIB, LEASES_ON_ROOT)?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let config = cri::pod_config(&d, "full");
        let mut refused = 0;
        for keep in STEPS {
            disk.fill(keep)?;
            let what = format!("RunPodSandbox with {} KiB free", disk.avail() >> 10);
            let ran = rt
                .run_pod_sandbox(pb::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await
                .map(|r| r.into_inner().pod_sandbox_id);
            if let Ok(id) = &ran {
                println!("{what}: ran");
                cri::remove_pod(&mut rt, id).await?;
            } else {
                full_disk_refusal(&what, ran, &d.root())?;
                refused += 1;
                let listed = cri::list_pods(&mut rt, None).await?;
                ensure!(listed.is_empty(), "{what}: listed {listed:?}");
                let left = cri::leftovers(&d);
                ensure!(left.is_empty(), "{what}: left {left:?}");
                nothing_left(&d, &["sandboxes"])?;
            }
            let held = journal_leases(&d)?;
            ensure!(held.is_empty(), "leases held after the pod went: {held:?}");
            disk.free()?;
        }
        ensure!(refused > 0, "no RunPodSandbox was refused");
        let pod = cri::run_pod(&mut rt, config).await?;
        ensure!(
            journal_leases(&d)? == vec![pod.id.clone()],
            "the pod's lease"
        );
        cri::remove_pod(&mut rt, &pod.id).await
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}
