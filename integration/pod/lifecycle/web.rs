//! The web example: an init container fills an emptyDir, the app serves it, readiness makes
//! the pod Ready; what CRI (kubelet labels, the verbose pod status) and the CLI show of it.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use k8s_openapi::api::core::v1 as k;

use crate::support::manifest::{busybox, PodManifest, ProbeManifest};
use crate::support::pods;
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "pod::lifecycle::web_pod_init_probes_ready_cri_labels_and_cli",
        NEEDS,
        web_pod,
    )]
}

fn web_yaml(name: &str) -> String {
    let field = |name: &str, path: &str| k::EnvVar {
        name: name.into(),
        value_from: Some(k::EnvVarSource {
            field_ref: Some(k::ObjectFieldSelector {
                field_path: path.into(),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    PodManifest::new(name)
        .label("app", "web")
        .grace(3)
        .init_container(
            busybox("setup")
                .sh(&format!(
                    "echo hello-from-{name} > /www/index.html; echo setup-done"
                ))
                .mount("www", "/www"),
        )
        .container(
            busybox("web")
                .sh("echo serving $(MY_POD) on $(POD_IP); exec httpd -f -p 8080 -h /www")
                .with(|c| {
                    c.env = Some(vec![
                        field("MY_POD", "metadata.name"),
                        field("POD_IP", "status.podIP"),
                    ]);
                    c.ports = Some(vec![k::ContainerPort {
                        name: Some("http".into()),
                        container_port: 8080,
                        ..Default::default()
                    }]);
                })
                .mount("www", "/www")
                .readiness(ProbeManifest::http("/index.html", "http").period(1))
                .liveness(ProbeManifest::tcp(8080).period(1)),
        )
        .empty_dir("www")
        .yaml()
}

/// The web example: the init container fills an emptyDir, the app serves it, readiness makes
/// the pod Ready; CRI shows kubelet labels and the pod status; the CLI shows all of it.
fn web_pod() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let out = pods::apply(&d, &web_yaml("web"))?;
    ensure!(out.trim() == "pod/web created", "apply said {out:?}");
    let p = pods::wait_for(&d, "web", 30, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    ensure!(pods::phase(&p) == "Running", "phase {}", pods::phase(&p));
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
    ] {
        ensure!(pods::condition(&p, c) == "True", "{c} not True");
    }
    let setup = pods::container(&p, "setup").context("setup status")?;
    let t = setup
        .state
        .and_then(|s| s.terminated)
        .context("setup not terminated")?;
    ensure!(
        t.exit_code == 0 && t.reason.as_deref() == Some("Completed"),
        "{t:?}"
    );
    let ip = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("no pod IP")?;
    ensure!(d.net().contains(&ip), "pod IP {ip} not in the test network");
    // The page the init container wrote, served from the pod IP.
    let body = block_on(async {
        let resp = reqwest::Client::builder()
            .no_proxy()
            .build()?
            .get(format!("http://{ip}:8080/index.html"))
            .send()
            .await?;
        anyhow::Ok(resp.text().await?)
    })?;
    ensure!(body.trim() == "hello-from-web", "served {body:?}");

    // CRI: kubelet labels and annotations, the pod status in the sandbox's verbose info.
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let list = rt
                .list_containers(pb::ListContainersRequest { filter: None })
                .await?
                .into_inner()
                .containers;
            let web = list
                .iter()
                .find(|c| {
                    c.labels
                        .get("io.kubernetes.container.name")
                        .map(String::as_str)
                        == Some("web")
                })
                .context("no container labelled web")?;
            ensure!(web.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("web"));
            ensure!(
                web.labels
                    .get("io.kubernetes.pod.namespace")
                    .map(String::as_str)
                    == Some("default")
            );
            ensure!(web.annotations.contains_key("io.kubernetes.container.hash"));
            ensure!(
                web.annotations
                    .get("io.kubernetes.container.restartCount")
                    .map(String::as_str)
                    == Some("0")
            );
            ensure!(
                web.annotations
                    .get("io.kubernetes.container.terminationMessagePath")
                    .map(String::as_str)
                    == Some("/dev/termination-log")
            );
            let st = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: web.pod_sandbox_id.clone(),
                    verbose: true,
                })
                .await?
                .into_inner();
            let pod = st.info.get("pod").context("no verbose info \"pod\"")?;
            let v: serde_json::Value = serde_json::from_str(pod)?;
            ensure!(v["status"]["phase"] == "Running", "verbose pod: {pod}");
            Ok(())
        }),
    )?;

    // CLI views.
    let table = pods::cli(&d, &["get"])?;
    ensure!(
        table.starts_with("NAME   READY   STATUS    RESTARTS   AGE")
            && table.contains("web    1/1     Running   0"),
        "get:\n{table}"
    );
    let describe = pods::cli(&d, &["describe", "web"])?;
    for want in [
        "Init Containers:",
        "Readiness:",
        "Last result: Success",
        "Ready                       True",
    ] {
        ensure!(
            describe.contains(want),
            "describe lacks {want:?}:\n{describe}"
        );
    }
    let logs = pods::cli(&d, &["logs", "web"])?;
    ensure!(
        logs.trim() == format!("serving web on {ip}"),
        "logs {logs:?}"
    );
    let setup_logs = pods::cli(&d, &["logs", "web", "-c", "setup"])?;
    ensure!(
        setup_logs.trim() == "setup-done",
        "setup logs {setup_logs:?}"
    );
    let events = pods::events(&d, "web")?;
    ensure!(
        events.contains("Started") && events.contains("Created container web"),
        "{events}"
    );
    pods::delete_and_check(&d, "web")
}
