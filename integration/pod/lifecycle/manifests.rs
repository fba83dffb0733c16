//! Where pods come from: invalid manifests rejected whole, static pod files creating,
//! replacing and deleting pods, CRI-made pods left alone (and a reapply unchanged), the
//! examples reaching their documented states.

use std::time::Duration;

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::manifest::{busybox, PodManifest};
use crate::support::pods::{self, BUSYBOX};
use crate::support::Scenario;
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::lifecycle::invalid_manifests_are_rejected_whole",
            NEEDS,
            invalid_manifests,
        ),
        trial(
            "pod::lifecycle::static_pod_files_create_replace_and_delete_pods",
            NEEDS,
            static_pods,
        ),
        trial(
            "pod::lifecycle::cri_made_pods_are_left_alone_and_reapply_is_unchanged",
            NEEDS,
            cri_pods_untouched,
        ),
        trial(
            "pod::lifecycle::the_examples_reach_their_documented_states",
            NEEDS,
            examples,
        ),
    ]
}

/// One bad document rejects the whole text: every error with its field path, nothing created.
fn invalid_manifests() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: fine}}
spec:
  containers: [{{name: a, image: {BUSYBOX}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: Bad_Name}}
spec:
  restartPolicy: Sometimes
  containers:
  - name: a
    image: {BUSYBOX}
    livenessProbe: {{periodSeconds: 0}}
  - {{name: a, image: {BUSYBOX}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: dep}}
"#
    );
    let f = pods::manifest_file(&d, &yaml)?;
    let err = pods::cli_fails(&d, &["apply", "-f", &f.to_string_lossy()])?;
    for want in [
        "metadata.name",
        "spec.restartPolicy",
        "spec.containers[0].livenessProbe",
        "spec.containers[1].name",
        "Deployment",
    ] {
        ensure!(err.contains(want), "error lacks {want:?}:\n{err}");
    }
    let list = pods::cli(&d, &["get", "-A", "-o", "name"])?;
    ensure!(list.trim().is_empty(), "something was created: {list}");
    cri::assert_clean(&d)
}

/// Files in `[pod] manifest_dir` are pods: added → created, changed → replaced (new uid),
/// removed → deleted.
fn static_pods() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        let dir = d.dir().join("manifests");
        std::fs::create_dir_all(&dir)?;
        let yaml = |cmd: &str| {
            PodManifest::new("static")
                .grace(1)
                .container(busybox("a").sh(cmd))
                .yaml()
        };
        std::fs::write(dir.join("static.yaml"), yaml("sleep 1000"))?;
        let p = pods::wait_for(d, "static", 30, "running", |p| pods::running(p, "a"))?;
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let source = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("kubernetes.io/config.source").cloned());
        ensure!(
            source.as_deref() == Some("file"),
            "config.source {source:?}"
        );
        std::fs::write(dir.join("static.yaml"), yaml("sleep 2000"))?;
        pods::wait_for(d, "static", 30, "replaced with a new uid", |p| {
            p.metadata.uid.as_deref().is_some_and(|u| u != uid) && pods::running(p, "a")
        })?;
        std::fs::remove_file(dir.join("static.yaml"))?;
        pods::wait_gone(d, "static", 30)?;
        Ok(())
    })
}

/// A sandbox made over CRI (as a kubelet would) survives the supervisor's resyncs; applying
/// the same manifest twice is `unchanged`.
fn cri_pods_untouched() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = pods::one_shot("again", "Always", 0).replace("sleep 0.5; ", "sleep 1000; ");
    pods::apply(&d, &yaml)?;
    let out = pods::apply(&d, &yaml)?;
    ensure!(
        out.trim() == "pod/again unchanged",
        "second apply said {out:?}"
    );
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "kubelet-made")).await?;
            // Longer than the supervisor's 5 s resync.
            tokio::time::sleep(Duration::from_secs(7)).await;
            let st = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.id.clone(),
                    verbose: false,
                })
                .await?
                .into_inner();
            ensure!(
                st.status.map(|s| s.state) == Some(pb::PodSandboxState::SandboxReady as i32),
                "the CRI pod was touched"
            );
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(())
        }),
    )?;
    pods::delete_and_check(&d, "again")
}

/// Every manifest in examples/ does what its comment says: web, sidecar and grpc become Ready,
/// crashloop crash-loops.
fn examples() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        cri::import(d, "grpc-health")?;
        let dir = crate::support::repo_root().join("examples");
        let out = pods::cli(d, &["apply", "-f", &dir.to_string_lossy()])?;
        for name in ["crashloop", "grpc", "sidecar", "web"] {
            ensure!(
                out.contains(&format!("pod/{name} created")),
                "apply said:\n{out}"
            );
        }
        for name in ["web", "sidecar", "grpc"] {
            pods::wait_for(d, name, 40, "Ready", |p| {
                pods::condition(p, "Ready") == "True"
            })?;
        }
        let p = pods::wait_for(d, "crashloop", 40, "CrashLoopBackOff", |p| {
            pods::restarts(p, "flaky") >= 1
                && pods::waiting_reason(p, "flaky") == "CrashLoopBackOff"
        })?;
        ensure!(
            pods::phase(&p) == "Running",
            "crashloop phase {}",
            pods::phase(&p)
        );
        let previous = pods::cli(d, &["logs", "crashloop", "--previous"])?;
        ensure!(
            previous.contains("starting") && previous.contains("giving up"),
            "{previous:?}"
        );
        let table = pods::cli(d, &["get"])?;
        let row: Vec<&str> = table
            .lines()
            .find(|l| l.starts_with("sidecar "))
            .map(|l| l.split_whitespace().collect())
            .unwrap_or_default();
        ensure!(row.get(1..3) == Some(&["2/2", "Running"][..]), "{table}");
        for name in ["crashloop", "grpc", "sidecar", "web"] {
            pods::cli(d, &["delete", name, "--grace-period", "2", "--wait=false"])?;
        }
        for name in ["crashloop", "grpc", "sidecar", "web"] {
            pods::wait_gone(d, name, 30)?;
        }
        Ok(())
    })
}
