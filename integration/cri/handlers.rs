//! Runtime handlers over CRI with real runc: an unknown handler refused naming the configured ones, "runc" by name, a second handler on runc with a root of its own (through kill -9 and restart), Status's list, crun refused where it cannot run.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::{runc_bin, trial, Scenario, Scene};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::handlers::unknown_handler_is_invalid_naming_the_configured_ones",
            NEEDS,
            unknown,
        ),
        trial(
            "cri::handlers::a_second_handler_uses_its_own_root_through_kill9",
            NEEDS,
            second_root,
        ),
        super::handlers_crun::skip_with(
            trial(
                "cri::handlers::crun_on_cgroup_v1_is_failed_precondition",
                NEEDS,
                crun_v1,
            ),
            v1_missing().as_deref(),
        ),
    ]
}

/// `runc --root ROOT list -q`: the container ids under `root`.
pub(crate) fn listed(root: &Path) -> Result<Vec<String>> {
    let runc = runc_bin().context("runc")?;
    let out = std::process::Command::new(runc)
        .arg("--root")
        .arg(root)
        .args(["list", "-q"])
        .output()?;
    ensure!(out.status.success(), "runc list: {out:?}");
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// RunPodSandbox on `handler`, which must fail: its gRPC status.
async fn refused(s: &Scene, handler: &str) -> Result<tonic::Status> {
    let config = s.pod_config(&format!("on-{handler}")).into();
    match cri::run_pod_on(&mut s.rt.clone(), handler, config).await {
        Ok(pod) => anyhow::bail!("a pod ran on {handler}: {}", pod.id),
        Err(e) => e
            .downcast_ref::<tonic::Status>()
            .cloned()
            .context("a gRPC status"),
    }
}

fn unknown() -> Result<()> {
    Scenario::new().run(async |s| {
        let status = refused(s, "kata").await?;
        ensure!(
            status.code() == tonic::Code::InvalidArgument
                && status.message().contains("\"kata\"")
                && status.message().contains("crun, runc"),
            "{status:?}"
        );
        // "runc" by name runs a container as "" does.
        let pod = s.pod_on("runc", s.pod_config("named")).await?;
        ensure!(s.pod_status(&pod.id).await?.runtime_handler == "runc");
        let c = pod.container("hi", &s.image("busybox")).sh("echo hi");
        let id = s.create_start(&pod, &c).await?;
        cri::check_exit(&s.wait_exited(&id, 10).await?, 0, "Completed")
    })
}

fn second_root() -> Result<()> {
    let runc = runc_bin().context("runc")?;
    let config = format!(
        "[runtimes.alt]\nbinary = {:?}\nroot = \"@DIR@/alt-root\"\n",
        runc.display().to_string()
    );
    Scenario::new().config(&config).run(async |s| {
        let root = s.daemon.dir().join("alt-root");
        let st =
            s.rt.clone()
                .status(pb::StatusRequest { verbose: true })
                .await?
                .into_inner();
        let names: Vec<&str> = st
            .runtime_handlers
            .iter()
            .map(|h| h.name.as_str())
            .collect();
        ensure!(
            names.starts_with(&["", "alt"]) && names.contains(&"runc"),
            "Status runtime_handlers: {names:?}"
        );
        ensure!(
            st.runtime_handlers.iter().all(|h| h.features.is_some()),
            "{st:?}"
        );
        let info = st.info.get("runtimeHandlers").context("verbose info")?;
        ensure!(info.contains("alt-root"), "{info}");
        let pod = s.pod_on("alt", s.pod_config("alt")).await?;
        let c = pod
            .container("loop", &s.image("busybox"))
            .sh("trap 'exit 7' TERM; echo ready; while :; do sleep 0.1; done");
        let id = s.ready(&pod, &c).await?;
        ensure!(listed(&root)?.contains(&id), "not under {}", root.display());
        let default_root = s.daemon.dir().join("state/runc");
        ensure!(
            !std::fs::read_dir(&default_root).is_ok_and(
                |mut d| d.any(|e| e.is_ok_and(|e| e.file_name().to_string_lossy() == id))
            ),
            "also under the default root"
        );
        s.restart().await?;
        ensure!(
            s.pod_status(&pod.id).await?.runtime_handler == "alt",
            "handler lost over the restart"
        );
        let out = s.exec(&id, &["echo", "still"], 10).await?;
        ensure!(
            String::from_utf8_lossy(&out.stdout).contains("still"),
            "{out:?}"
        );
        s.stop(&id, 10).await?;
        cri::check_exit(&s.status(&id).await?, 7, "Error")?;
        s.remove(&id).await?;
        ensure!(listed(&root)?.is_empty(), "left under {}", root.display());
        Ok(())
    })
}

/// Why crun on cgroup v1 cannot be tried here, if it cannot.
fn v1_missing() -> Option<String> {
    if super::handlers_crun::crun_missing().is_none() {
        return Some(
            "cgroup v2 here: crun works (see crun_runs_exec_update_stats_stop_and_oom)".into(),
        );
    }
    if bosun::oci::host::find_in_path("crun").is_none() {
        return Some("no crun in PATH (hack/setup.sh installs it)".into());
    }
    None
}

fn crun_v1() -> Result<()> {
    Scenario::new().run(async |s| {
        let status = refused(s, "crun").await?;
        ensure!(
            status.code() == tonic::Code::FailedPrecondition
                && status.message().contains("cgroup v2"),
            "{status:?}"
        );
        let st =
            s.rt.clone()
                .status(pb::StatusRequest { verbose: true })
                .await?
                .into_inner();
        ensure!(
            !st.runtime_handlers.iter().any(|h| h.name == "crun"),
            "an unusable handler is listed"
        );
        let info = st.info.get("runtimeHandlers").context("verbose info")?;
        ensure!(info.contains("cgroup v2"), "{info}");
        Ok(())
    })
}
