//! UpdatePodSandboxResources: recorded, shown in the verbose status, kept across a restart.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::pods::update_pod_sandbox_resources_is_recorded",
        NEEDS,
        update_resources,
    )]
}

/// UpdatePodSandboxResources: recorded and shown in the verbose status, kept across a daemon
/// restart; an unknown pod is NotFound.
fn update_resources() -> Result<()> {
    let mut d = cri::daemon()?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "resize")).await?;
        let limits = pb::LinuxContainerResources {
            cpu_quota: 50_000,
            cpu_period: 100_000,
            memory_limit_in_bytes: 256 << 20,
            ..Default::default()
        };
        rt.update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
            pod_sandbox_id: pod.id.clone(),
            overhead: None,
            resources: Some(limits),
        })
        .await
        .context("UpdatePodSandboxResources")?;
        let err = rt
            .update_pod_sandbox_resources(pb::UpdatePodSandboxResourcesRequest {
                pod_sandbox_id: "0123456789ab".into(),
                ..Default::default()
            })
            .await
            .err()
            .context("an unknown pod was updated")?;
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        Ok::<_, anyhow::Error>(pod)
    });
    let pod = cri::with_log(&d, r)?;
    d.restart()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let info = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.id.clone(),
                    verbose: true,
                })
                .await?
                .into_inner()
                .info;
            let info: serde_json::Value =
                serde_json::from_str(info.get("info").context("no verbose info")?)?;
            let res = &info["status"]["resources"];
            ensure!(
                res["cpu_quota"] == 50_000 && res["memory_limit_in_bytes"] == 256 << 20,
                "recorded resources: {res}"
            );
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )
}
