//! Checkpoint and restore on the crun handler (VM lane, where crun runs and CRIU works): a crun built without CRIU (Debian 12's 1.8.1) refuses both before anything is made, naming the handler and why, and Status says so per handler.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use tonic::Code;

use super::checkpoint::{checkpoint, refused, COUNTER, NEEDS_CRIU};
use super::checkpoint_restore::{
    config_dump, create_from, dir_names, left_nothing, spec_dump, write_members,
};
use super::handlers_crun::{crun_missing, skip_with};
use crate::support::cri;
use crate::support::{scratch, trial, Scenario};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let why = crun_missing().or_else(crun_has_criu);
    vec![skip_with(
        trial(
            "cri::checkpoint::crun_without_criu_refuses_checkpoint_and_restore",
            NEEDS_CRIU,
            refused_on_crun,
        ),
        why.as_deref(),
    )]
}

/// Why the refusal cannot be seen here: this crun was built with CRIU.
fn crun_has_criu() -> Option<String> {
    let out = std::process::Command::new("crun")
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().any(|w| w == "+CRIU").then(|| {
        "this crun is built with CRIU (+CRIU), so it is not refused; checkpoint and restore \
         on crun are untested (docs/checkpoint.md)"
            .into()
    })
}

/// Status's `runtimeHandlers` entry of `name`.
async fn handler_info(rt: &mut cri::Rt, name: &str) -> Result<serde_json::Value> {
    let list = cri::status_info(rt, "runtimeHandlers").await?;
    list.as_array()
        .into_iter()
        .flatten()
        .find(|h| h["name"] == name)
        .cloned()
        .with_context(|| format!("no handler {name} in Status runtimeHandlers: {list}"))
}

fn refused_on_crun() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let mut rt = s.rt.clone();
        let crun = handler_info(&mut rt, "crun").await?;
        let reason = crun["checkpointReason"].as_str().unwrap_or_default();
        ensure!(
            crun["checkpoint"] == false && reason.contains("+CRIU"),
            "Status runtimeHandlers crun: {crun}"
        );
        let runc = handler_info(&mut rt, "runc").await?;
        ensure!(
            runc["checkpoint"] == true,
            "Status runtimeHandlers runc: {runc}"
        );

        let pod = s.pod_on("crun", s.pod_config("ck-crun")).await?;
        let busybox = s.image("busybox");
        let id = s
            .ready(&pod, &pod.container("counter", &busybox).sh(COUNTER))
            .await?;
        let at = dir.path().join("ck.tar");
        let err = refused(checkpoint(&mut rt, &id, &at).await)?;
        ensure!(
            err.code() == Code::FailedPrecondition
                && err.message().contains("\"crun\"")
                && err.message().contains("+CRIU"),
            "checkpoint on crun: {err:?}"
        );
        ensure!(
            dir_names(dir.path()).is_empty(),
            "files left: {:?}",
            dir_names(dir.path())
        );
        let st = s.status(&id).await?;
        ensure!(
            st.state == pb::ContainerState::ContainerRunning as i32,
            "the refused checkpoint touched the container: {st:?}"
        );

        // A checkpoint made by crun (hand-made: this crun makes none) into a crun pod.
        let before = s.list_containers(None).await?.len();
        let root = s.daemon.root();
        let containers_before = dir_names(&root.join("containers"));
        let archive = dir.path().join("crun.tar");
        let members = vec![
            ("config.dump".to_string(), config_dump("crun", &busybox)),
            ("spec.dump".to_string(), spec_dump(&[], false)),
            (
                "checkpoint/inventory.img".to_string(),
                b"inventory".to_vec(),
            ),
        ];
        write_members(&archive, &members)?;
        let err = create_from(s, &pod, &archive).await?;
        ensure!(
            err.code() == Code::FailedPrecondition
                && err.message().contains("\"crun\"")
                && err.message().contains("+CRIU"),
            "restore into a crun pod: {err:?}"
        );
        left_nothing(s, before, &root, &containers_before, "crun restore").await?;
        Ok(())
    })
}
