//! UpdateContainerResources reaching the container's cgroup, and ContainerStatus showing it.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cgroup;
use crate::support::cri::{self, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::containers::update_container_resources_reaches_the_cgroup",
        NEEDS,
        update_resources,
    )]
}

fn update_resources() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let parent = d.cgroup_parent();
        let read = |controller: &str, id: &str, file: &str| -> String {
            cgroup::read(&cgroup::container_dir(&parent, id), controller, file).unwrap_or_default()
        };
        // What the cgroup files say: v1 (memory limit, shares, quota, period) or v2 (memory.max,
        // cpu.weight converted from the shares as runc does, cpu.max).
        let limits = |id: &str| -> Vec<String> {
            if cgroup::unified() {
                vec![
                    read("memory", id, "memory.max"),
                    read("cpu", id, "cpu.weight"),
                    read("cpu", id, "cpu.max"),
                ]
            } else {
                vec![
                    read("memory", id, "memory.limit_in_bytes"),
                    read("cpu", id, "cpu.shares"),
                    format!(
                        "{} {}",
                        read("cpu", id, "cpu.cfs_quota_us"),
                        read("cpu", id, "cpu.cfs_period_us")
                    ),
                ]
            }
        };
        let (shares_512, shares_1024, no_quota) = if cgroup::unified() {
            ("20", "39", "max 100000")
        } else {
            ("512", "1024", "-1 100000")
        };
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "update")).await?;
        let mut c = cri::sh_config(&pod, "limited", &busybox, "exec sleep 1000");
        {
            let r = cri::resources(&mut c);
            r.memory_limit_in_bytes = 64 << 20;
            r.cpu_shares = 512;
        }
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_state(&mut rt, &id, pb::ContainerState::ContainerRunning, 10).await?;
        let initial = limits(&id);
        ensure!(
            initial
                == [
                    (64u64 << 20).to_string(),
                    shares_512.into(),
                    no_quota.into()
                ],
            "initial limits (memory, cpu weight, quota): {initial:?}"
        );
        let new = pb::LinuxContainerResources {
            memory_limit_in_bytes: 128 << 20,
            cpu_shares: 1024,
            cpu_period: 100_000,
            cpu_quota: 50_000,
            ..Default::default()
        };
        rt.update_container_resources(pb::UpdateContainerResourcesRequest {
            container_id: id.clone(),
            linux: Some(new.clone()),
            ..Default::default()
        })
        .await
        .context("UpdateContainerResources")?;
        let got = limits(&id);
        ensure!(
            got == [
                (128u64 << 20).to_string(),
                shares_1024.into(),
                "50000 100000".into()
            ],
            "cgroup after update (memory, cpu weight, quota): {got:?}"
        );
        let s = cri::status(&mut rt, &id).await?;
        let linux = s
            .resources
            .and_then(|r| r.linux)
            .context("no resources in status")?;
        ensure!(
            linux.memory_limit_in_bytes == new.memory_limit_in_bytes
                && linux.cpu_shares == new.cpu_shares
                && linux.cpu_quota == new.cpu_quota
                && linux.cpu_period == new.cpu_period,
            "ContainerStatus.resources after update: {linux:?}"
        );
        // Updated while created (no cgroup yet, issue 13): the start applies the update.
        let mut early = c.clone();
        if let Some(m) = early.metadata.as_mut() {
            m.name = "updated-before-start".into();
        }
        let created = cri::create(&mut rt, &pod, &early).await?;
        rt.update_container_resources(pb::UpdateContainerResourcesRequest {
            container_id: created.clone(),
            linux: Some(new.clone()),
            ..Default::default()
        })
        .await
        .context("UpdateContainerResources of a created container")?;
        cri::start(&mut rt, &created).await?;
        let got = limits(&created);
        ensure!(
            got == [
                (128u64 << 20).to_string(),
                shares_1024.into(),
                "50000 100000".into()
            ],
            "cgroup of a container updated before its start: {got:?}"
        );
        let s = cri::status(&mut rt, &created).await?;
        let memory = s
            .resources
            .and_then(|r| r.linux)
            .map(|l| l.memory_limit_in_bytes);
        ensure!(memory == Some(128 << 20), "status resources: {memory:?}");
        cri::stop(&mut rt, &created, 0).await?;
        cri::stop(&mut rt, &id, 0).await?;
        let err = rt
            .update_container_resources(pb::UpdateContainerResourcesRequest {
                container_id: id.clone(),
                linux: Some(new),
                ..Default::default()
            })
            .await
            .err()
            .context("UpdateContainerResources of an exited container succeeded")?;
        eprintln!("update of an exited container: {err:?}");
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
