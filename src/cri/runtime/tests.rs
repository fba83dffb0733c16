//! RuntimeService handlers over a fake OCI runtime: codes and messages of bad and unknown requests.

use tonic::{Code, Status};

use super::*;
use crate::image::service::Images;
use crate::oci::{FakeLauncher, FakeRuntime, HostFacts};

fn service() -> (tempfile::TempDir, CriRuntime) {
    let dir = tempfile::tempdir().expect("tmp");
    let config = Arc::new(Config {
        root: dir.path().join("root"),
        state: dir.path().join("state"),
        ..Config::default()
    });
    let images = Images::open(&config).expect("images");
    let runtime = Runtime::with_parts(
        config.clone(),
        images,
        Arc::new(FakeRuntime::new()),
        Arc::new(FakeLauncher::default()),
        HostFacts::default(),
    )
    .expect("runtime");
    (dir, CriRuntime::new(config, runtime))
}

fn assert_code<T: std::fmt::Debug>(r: Result<T, Status>, code: Code, needle: &str) {
    let s = r.expect_err("an error status");
    assert_eq!(s.code(), code, "{s:?}");
    assert!(
        s.message().contains(needle),
        "{s:?} does not mention {needle:?}"
    );
}

#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let (_dir, cri) = service();
    let r = cri.run_pod_sandbox(Request::new(pb::RunPodSandboxRequest::default()));
    assert_code(r.await, Code::InvalidArgument, "sandbox config is required");
    let r = cri.create_container(Request::new(pb::CreateContainerRequest {
        pod_sandbox_id: "sb".into(),
        config: Some(pb::ContainerConfig::default()),
        sandbox_config: None,
    }));
    assert_code(r.await, Code::InvalidArgument, "metadata is required");
    let r = cri.exec_sync(Request::new(pb::ExecSyncRequest {
        container_id: "c".into(),
        ..Default::default()
    }));
    assert_code(r.await, Code::InvalidArgument, "cmd is required");
    let r = cri.update_container_resources(Request::new(pb::UpdateContainerResourcesRequest {
        container_id: "c".into(),
        ..Default::default()
    }));
    assert_code(r.await, Code::InvalidArgument, "linux resources");
    let r = cri.list_containers(Request::new(pb::ListContainersRequest {
        filter: Some(pb::ContainerFilter {
            state: Some(pb::ContainerStateValue { state: 9 }),
            ..Default::default()
        }),
    }));
    assert_code(r.await, Code::InvalidArgument, "state");
}

#[tokio::test]
async fn unknown_ids_are_not_found_and_lists_start_empty() {
    let (_dir, cri) = service();
    let r = cri.container_status(Request::new(pb::ContainerStatusRequest {
        container_id: "feed".into(),
        verbose: true,
    }));
    assert_code(r.await, Code::NotFound, "feed");
    let r = cri.pod_sandbox_status(Request::new(pb::PodSandboxStatusRequest {
        pod_sandbox_id: "beef".into(),
        verbose: false,
    }));
    assert_code(r.await, Code::NotFound, "beef");
    let r = cri.list_pod_sandbox(Request::new(pb::ListPodSandboxRequest::default()));
    assert!(r.await.expect("list").into_inner().items.is_empty());
    let r = cri.list_containers(Request::new(pb::ListContainersRequest::default()));
    assert!(r.await.expect("list").into_inner().containers.is_empty());
    let r = cri.update_pod_sandbox_resources(Request::new(pb::UpdatePodSandboxResourcesRequest {
        pod_sandbox_id: "cafe".into(),
        ..Default::default()
    }));
    assert_code(r.await, Code::NotFound, "cafe");
}

#[tokio::test]
async fn checkpoint_of_an_unknown_container_is_not_found() {
    let (_dir, cri) = service();
    let r = cri.checkpoint_container(Request::new(pb::CheckpointContainerRequest {
        container_id: "feed".into(),
        location: "/tmp/feed.tar".into(),
        ..Default::default()
    }));
    assert_code(r.await, Code::NotFound, "feed");
}

#[tokio::test]
async fn update_runtime_config_records_the_pod_cidr_and_refuses_junk() {
    let (_dir, cri) = service();
    let req = |cidr: &str| {
        Request::new(pb::UpdateRuntimeConfigRequest {
            runtime_config: Some(pb::RuntimeConfig {
                network_config: Some(pb::NetworkConfig {
                    pod_cidr: cidr.into(),
                }),
            }),
        })
    };
    cri.update_runtime_config(req("10.244.1.0/24"))
        .await
        .expect("valid CIDR");
    let r = cri.update_runtime_config(req("10.244.1.0/99")).await;
    assert_code(r, Code::InvalidArgument, "10.244.1.0/99");
    let st = cri
        .status(Request::new(pb::StatusRequest { verbose: false }))
        .await
        .expect("status")
        .into_inner();
    let conds = st.status.expect("status").conditions;
    let net = conds
        .iter()
        .find(|c| c.r#type == "NetworkReady")
        .expect("NetworkReady");
    assert!(net.status, "{net:?}");
}

#[tokio::test]
async fn verbose_status_says_what_apparmor_gives_containers() {
    let (_dir, cri) = service();
    let st = cri
        .status(Request::new(pb::StatusRequest { verbose: true }))
        .await
        .expect("status")
        .into_inner();
    let info = st.info.get("apparmor").expect("apparmor in verbose info");
    let v: serde_json::Value = serde_json::from_str(info).expect("JSON");
    assert_eq!(v["enabled"], false, "{v}");
    assert_eq!(v["defaultProfile"], "", "{v}");
    assert!(v["message"].is_string(), "{v}");
}
