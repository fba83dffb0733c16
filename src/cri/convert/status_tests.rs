//! Tests of the domain → proto answers: states, round trips from the create requests, info JSON.

use super::container::new_container;
use super::container_tests::config as container_config;
use super::sandbox::sandbox_request;
use super::status::*;
use crate::oci::Resources;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{
    ContainerMeta, ContainerState, ContainerStatus, SandboxMeta, SandboxState, SandboxStatus,
};

fn sandbox_status_at(created: i64, ready: i64, stopped: i64, unknown: bool) -> SandboxStatus {
    SandboxStatus {
        created_ns: created,
        ready_ns: ready,
        stopped_ns: stopped,
        unknown,
        pid: 42,
        ..Default::default()
    }
}

#[test]
fn sandbox_states_ready_only_when_ready() {
    let table = [
        (
            sandbox_status_at(1, 0, 0, false),
            SandboxState::Created,
            pb::PodSandboxState::SandboxNotready,
        ),
        (
            sandbox_status_at(1, 2, 0, false),
            SandboxState::Ready,
            pb::PodSandboxState::SandboxReady,
        ),
        (
            sandbox_status_at(1, 2, 3, false),
            SandboxState::NotReady,
            pb::PodSandboxState::SandboxNotready,
        ),
        (
            sandbox_status_at(1, 2, 0, true),
            SandboxState::Unknown,
            pb::PodSandboxState::SandboxNotready,
        ),
    ];
    for (status, domain, wire) in table {
        assert_eq!(status.state(), domain);
        assert_eq!(sandbox_state_to_proto(domain), wire, "{domain:?}");
    }
}

fn container_status_at(
    created: i64,
    started: i64,
    finished: i64,
    unknown: bool,
) -> ContainerStatus {
    ContainerStatus {
        created_ns: created,
        started_ns: started,
        finished_ns: finished,
        unknown,
        ..Default::default()
    }
}

#[test]
fn container_states() {
    let table = [
        (
            container_status_at(1, 0, 0, false),
            ContainerState::Created,
            pb::ContainerState::ContainerCreated,
        ),
        (
            container_status_at(1, 2, 0, false),
            ContainerState::Running,
            pb::ContainerState::ContainerRunning,
        ),
        (
            container_status_at(1, 2, 3, false),
            ContainerState::Exited,
            pb::ContainerState::ContainerExited,
        ),
        (
            container_status_at(1, 2, 0, true),
            ContainerState::Unknown,
            pb::ContainerState::ContainerUnknown,
        ),
    ];
    for (status, domain, wire) in table {
        assert_eq!(status.state(), domain);
        assert_eq!(container_state_to_proto(domain), wire, "{domain:?}");
    }
}

fn sandbox_config() -> pb::PodSandboxConfig {
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: "web".into(),
            uid: "u-1".into(),
            namespace: "default".into(),
            attempt: 1,
        }),
        labels: [("app".to_string(), "web".to_string())].into(),
        annotations: [("a".to_string(), "b".to_string())].into(),
        linux: Some(pb::LinuxPodSandboxConfig {
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    network: pb::NamespaceMode::Node as i32,
                    pid: pb::NamespaceMode::Container as i32,
                    ipc: pb::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn sandbox_round_trip() {
    let config = sandbox_config();
    let meta = SandboxMeta {
        request: sandbox_request(Some(config.clone()), "runc").expect("valid"),
        ..Default::default()
    };
    let status = sandbox_status_at(100, 200, 0, false);
    let s = sandbox_status("sb1", &meta, &status);
    assert_eq!(s.id, "sb1");
    assert_eq!(s.metadata, config.metadata);
    assert_eq!(s.state, pb::PodSandboxState::SandboxReady as i32);
    assert_eq!(s.created_at, 100);
    assert_eq!(s.network.map(|n| n.ip), Some(String::new()));
    let ns = s.linux.and_then(|l| l.namespaces).and_then(|n| n.options);
    let sent = config
        .linux
        .and_then(|l| l.security_context)
        .and_then(|s| s.namespace_options);
    assert_eq!(ns, sent, "namespace options as recorded");
    assert_eq!(s.labels, config.labels);
    assert_eq!(s.annotations, config.annotations);
    assert_eq!(s.runtime_handler, "runc");

    let item = sandbox_item("sb1", &meta, &status);
    assert_eq!(
        (item.id.as_str(), item.metadata, item.state, item.created_at),
        ("sb1", s.metadata, s.state, 100)
    );
    assert_eq!((item.labels, item.annotations), (s.labels, s.annotations));
    assert_eq!(item.runtime_handler, "runc");

    let info = sandbox_info("sb1", &meta, &status);
    let v: serde_json::Value = serde_json::from_str(&info["info"]).expect("JSON");
    assert_eq!(v["id"], "sb1");
    assert_eq!(v["pid"], 42);
    assert_eq!(v["state"], "Ready");
    assert_eq!(v["meta"]["request"]["pod"]["name"], "web");
    assert_eq!(v["status"]["ready_ns"], 200);
}

fn container_meta(config: pb::ContainerConfig) -> ContainerMeta {
    let new = new_container(Some(config)).expect("valid");
    ContainerMeta {
        sandbox_id: "sb1".into(),
        attempt: new.attempt,
        request: new.request,
        image_id: "sha256:1111".into(),
        image_ref: "docker.io/library/busybox@sha256:2222".into(),
        log_path: "/var/log/pods/x/app/3.log".into(),
        ..Default::default()
    }
}

#[test]
fn container_round_trip() {
    let mut config = container_config();
    config.linux = Some(pb::LinuxContainerConfig {
        resources: Some(pb::LinuxContainerResources {
            cpu_shares: 256,
            memory_limit_in_bytes: 1 << 30,
            oom_score_adj: 5,
            ..Default::default()
        }),
        security_context: None,
    });
    let meta = container_meta(config.clone());
    let status = ContainerStatus {
        exit_code: 143,
        reason: "Error".into(),
        message: "bye".into(),
        pid: 7,
        ..container_status_at(10, 20, 30, false)
    };
    let s = container_status("c1", &meta, &status);
    assert_eq!(s.id, "c1");
    assert_eq!(s.metadata, config.metadata);
    assert_eq!(s.state, pb::ContainerState::ContainerExited as i32);
    assert_eq!((s.created_at, s.started_at, s.finished_at), (10, 20, 30));
    assert_eq!(s.exit_code, 143);
    assert_eq!(
        s.image.as_ref().map(|i| i.image.as_str()),
        Some("docker.io/library/busybox:1.36")
    );
    assert_eq!(s.image_ref, "docker.io/library/busybox@sha256:2222");
    assert_eq!(s.image_id, "sha256:1111");
    assert_eq!((s.reason.as_str(), s.message.as_str()), ("Error", "bye"));
    assert_eq!(s.labels, config.labels, "labels returned unchanged");
    assert_eq!(
        s.annotations, config.annotations,
        "annotations returned unchanged"
    );
    assert_eq!(s.mounts, config.mounts, "mounts as requested");
    assert_eq!(s.log_path, "/var/log/pods/x/app/3.log");
    assert_eq!(
        s.resources.and_then(|r| r.linux),
        config.linux.and_then(|l| l.resources),
        "the create request's resources until an update"
    );
    assert_eq!(s.stop_signal, config.stop_signal);

    let item = container_item("c1", &meta, &status);
    assert_eq!(item.id, "c1");
    assert_eq!(item.pod_sandbox_id, "sb1");
    assert_eq!(item.metadata, s.metadata);
    assert_eq!(item.image, s.image);
    assert_eq!((item.image_ref, item.image_id), (s.image_ref, s.image_id));
    assert_eq!((item.state, item.created_at), (s.state, 10));
    assert_eq!((item.labels, item.annotations), (s.labels, s.annotations));

    let info = container_info("c1", &meta, &status);
    let v: serde_json::Value = serde_json::from_str(&info["info"]).expect("JSON");
    assert_eq!(v["id"], "c1");
    assert_eq!(v["sandboxID"], "sb1");
    assert_eq!(v["pid"], 7);
    assert_eq!(v["state"], "Exited");
    assert_eq!(v["meta"]["request"]["name"], "app");
    assert_eq!(v["meta"]["image_id"], "sha256:1111");
}

#[test]
fn updated_resources_win_over_the_request() {
    let meta = container_meta(container_config());
    let status = ContainerStatus {
        resources: Some(Resources {
            cpu_shares: Some(2048),
            oom_score_adj: Some(-5),
            ..Default::default()
        }),
        ..container_status_at(1, 2, 0, false)
    };
    let r = container_status("c1", &meta, &status)
        .resources
        .and_then(|r| r.linux)
        .expect("resources reported");
    assert_eq!(
        (r.cpu_shares, r.oom_score_adj, r.memory_limit_in_bytes),
        (2048, -5, 0)
    );
}

#[test]
fn status_reports_the_stop_signal_a_stop_would_send() {
    let mut config = container_config();
    config.stop_signal = pb::Signal::RuntimeDefault as i32;
    let mut meta = container_meta(config);
    let s = container_status("c1", &meta, &container_status_at(1, 0, 0, false));
    assert_eq!(s.stop_signal, pb::Signal::Sigterm as i32, "unset: SIGTERM");
    assert_eq!(s.state, pb::ContainerState::ContainerCreated as i32);
    meta.image_stop_signal = Some(libc::SIGUSR1);
    let s = container_status("c1", &meta, &container_status_at(1, 0, 0, false));
    assert_eq!(
        s.stop_signal,
        pb::Signal::Sigusr1 as i32,
        "the image's STOPSIGNAL"
    );
    meta.request.stop_signal = Some(libc::SIGINT);
    let s = container_status("c1", &meta, &container_status_at(1, 0, 0, false));
    assert_eq!(
        s.stop_signal,
        pb::Signal::Sigint as i32,
        "CRI's stop_signal wins"
    );
}

#[test]
fn sandbox_network_reports_ips_only_while_attached() {
    let mut st = sandbox_status_at(1, 2, 0, false);
    st.ips = vec!["10.86.0.5".into(), "fd86::5".into()];
    st.network_attached = true;
    let n = sandbox_network(&st);
    assert_eq!(n.ip, "10.86.0.5");
    assert_eq!(
        n.additional_ips,
        [pb::PodIp {
            ip: "fd86::5".into()
        }]
    );
    st.network_attached = false;
    assert_eq!(sandbox_network(&st), pb::PodSandboxNetworkStatus::default());
}

#[test]
fn network_condition_carries_readiness_reason_and_message() {
    let c = network_condition(&crate::network::NetworkStatus {
        ready: false,
        name: String::new(),
        reason: "NetworkPluginNotReady".into(),
        message: "CNI config /x/10-a.conflist: bad JSON".into(),
    });
    assert_eq!(c.r#type, "NetworkReady");
    assert!(!c.status);
    assert_eq!(c.reason, "NetworkPluginNotReady");
    assert!(c.message.contains("10-a.conflist"));
}
