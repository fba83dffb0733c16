//! Tests of the domain checks of sandbox and container requests.

use super::state::meta::{NewContainer, PodName, PortMapping, SandboxMeta, SandboxRequest};
use super::validate::{container, log_path, name, path, sandbox, NAME_MAX, UID_MAX};
use crate::config::CgroupDriver;
use crate::error::{ErrorKind, Result};
use crate::oci::resources::HostCpus;

/// An edit of a good request that makes it bad.
type Change<T> = Box<dyn Fn(&mut T)>;

fn invalid(r: Result<()>, needles: &[&str]) {
    let e = r.expect_err("an InvalidArgument error");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "{e} does not mention {n:?}");
    }
    assert!(e.message().len() < 1024, "{} bytes: {e}", e.message().len());
}

fn pod() -> SandboxRequest {
    SandboxRequest {
        pod: PodName {
            name: "web-0".into(),
            namespace: "default".into(),
            uid: "0b5d3f4e-8a0c-4a57-9d3a-1f2e3d4c5b6a".into(),
            attempt: 0,
        },
        log_directory: "/var/log/pods/default_web-0_0b5d".into(),
        ..Default::default()
    }
}

fn check(req: &SandboxRequest) -> Result<()> {
    sandbox(req, CgroupDriver::Cgroupfs)
}

#[test]
fn kubelet_and_critest_metadata_pass() {
    check(&pod()).expect("kubelet-shaped pod");
    let mut critest = pod();
    critest.pod.name = format!("create-PodSandbox-for-container-{}", "a".repeat(36));
    critest.pod.uid = format!("cri-test-uid{}", "0".repeat(36));
    critest.pod.namespace = format!("cri-test-namespace{}", "1".repeat(36));
    critest.hostname = "critest".into();
    check(&critest).expect("critest-shaped pod");
}

#[test]
fn oversized_or_odd_metadata_is_refused_by_field() {
    for (field, value) in [
        ("metadata.name", "x".repeat(NAME_MAX + 1)),
        ("metadata.name", "a;K8S_POD_NAMESPACE=kube-system".into()),
        ("metadata.namespace", "n".repeat(64)),
        ("metadata.uid", "u".repeat(UID_MAX + 1)),
        ("metadata.uid", "a\0b".into()),
        ("metadata.name", String::new()),
    ] {
        let mut p = pod();
        match field {
            "metadata.name" => p.pod.name = value,
            "metadata.namespace" => p.pod.namespace = value,
            _ => p.pod.uid = value,
        }
        invalid(check(&p), &[field]);
    }
    let mut p = pod();
    p.pod.name = "x".repeat(64 << 10);
    invalid(check(&p), &["metadata.name", "more bytes]", "at most 253"]);
}

#[test]
fn sandbox_fields_are_checked_before_anything_is_made() {
    let cases: Vec<(&str, Change<SandboxRequest>)> = vec![
        (
            "log_directory",
            Box::new(|p| p.log_directory = "logs/here".into()),
        ),
        ("hostname", Box::new(|p| p.hostname = "bad_host".into())),
        (
            "hostname (from metadata.name)",
            Box::new(|p| p.pod.name = "...".into()),
        ),
        (
            "port_mappings[0].container_port",
            Box::new(|p| {
                p.port_mappings = vec![PortMapping {
                    container_port: 70000,
                    ..Default::default()
                }]
            }),
        ),
        (
            "port_mappings[0].host_port",
            Box::new(|p| {
                p.port_mappings = vec![PortMapping {
                    container_port: 80,
                    host_port: -1,
                    ..Default::default()
                }]
            }),
        ),
        (
            "port_mappings[0].host_ip",
            Box::new(|p| {
                p.port_mappings = vec![PortMapping {
                    container_port: 80,
                    host_ip: "garbage".into(),
                    ..Default::default()
                }]
            }),
        ),
        (
            "kernel.panic",
            Box::new(|p| p.sysctls = [("kernel.panic".to_string(), "1".to_string())].into()),
        ),
        (
            "cgroup_parent",
            Box::new(|p| p.cgroup_parent = "/kubepods/../../x".into()),
        ),
        (
            "cgroup_parent",
            Box::new(|p| p.cgroup_parent = "relative".into()),
        ),
        (
            "annotations",
            Box::new(|p| p.annotations = [("a".to_string(), "v".repeat(1 << 20))].into()),
        ),
    ];
    for (needle, change) in cases {
        let mut p = pod();
        change(&mut p);
        invalid(check(&p), &[needle]);
    }
    let mut host_net = pod();
    host_net.network = crate::oci::NamespaceMode::Node;
    host_net.pod.name = "...".into();
    check(&host_net).expect("no hostname is derived for host-network pods");
    let mut cut = pod();
    // critest: a prefix and a UUID, cut at 63 bytes right after one of the UUID's dashes.
    cut.pod.name = format!(
        "{}-{}",
        "p".repeat(54),
        "0b5d3f4e-8a0c-4a57-9d3a-1f2e3d4c5b6a"
    );
    cut.pod.name.replace_range(62..63, "-");
    check(&cut).expect("the derived hostname drops a trailing '-'");
    let mut underscore = pod();
    underscore.pod.name = "web_0".into();
    check(&underscore).expect("'_' becomes '-' in a derived hostname");
    let mut systemd = pod();
    systemd.cgroup_parent = "kubepods-burstable.slice".into();
    sandbox(&systemd, CgroupDriver::Systemd).expect("a slice name for the systemd driver");
}

#[test]
fn log_paths_stay_inside_the_log_directory() {
    let dir = "/var/log/pods/ns_pod_uid";
    for good in ["c/0.log", "c.log", "./c/1.log"] {
        log_path("c", dir, good).expect(good);
    }
    let sixteen_up = format!("{}etc/passwd", "../".repeat(16));
    for bad in [
        "../../etc/passwd",
        &sixteen_up,
        "/etc/passwd",
        "c/../../x.log",
        ".",
        "a\0b",
    ] {
        invalid(log_path("container config \"c\"", dir, bad), &["log_path"]);
    }
    log_path("c", "", "/var/log/c.log").expect("absolute without a directory");
    invalid(
        log_path("c", "", "c.log"),
        &["log_path", "no log_directory"],
    );
    invalid(
        log_path("c", dir, &"x".repeat(256)),
        &["log_path", "at most 255"],
    );
    invalid(
        log_path("c", dir, &"x/".repeat(32 << 10)),
        &["log_path", "at most 4095"],
    );
}

#[test]
fn paths_and_names_follow_the_kernel_limits() {
    path("f", &format!("/{}", "x".repeat(255))).expect("255-byte component");
    invalid(
        path("f", &format!("/{}", "x".repeat(256))),
        &["f", "256 bytes"],
    );
    invalid(path("f", "/a\0"), &["f", "NUL"]);
    name("n", "Upper-And.dots_1", 253).expect("letters, digits, - . _");
    invalid(name("n", "a b", 253), &["n", "' '"]);
    invalid(name("n", "é", 253), &["n"]);
}

#[test]
fn container_fields_are_checked() {
    let sb = SandboxMeta {
        request: pod(),
        ..Default::default()
    };
    let cpus = HostCpus {
        cpus: "0-1".into(),
        mems: "0".into(),
    };
    let base = || {
        let mut c = NewContainer::default();
        c.request.name = "app".into();
        c.request.image = "busybox".into();
        c.log_path = "app/0.log".into();
        c
    };
    container(&base(), &sb, &cpus).expect("a plain container");
    let cases: Vec<(&str, Change<NewContainer>)> = vec![
        (
            "log_path",
            Box::new(|c| c.log_path = "../../../../etc/shadow".into()),
        ),
        (
            "command[1]",
            Box::new(|c| c.request.command = vec!["sh".into(), "a\0".into()]),
        ),
        (
            "envs[0].key",
            Box::new(|c| c.request.envs = vec![("A=B".into(), b"v".to_vec())]),
        ),
        (
            "envs[0].value",
            Box::new(|c| c.request.envs = vec![("A".into(), b"\0".to_vec())]),
        ),
        (
            "working_dir",
            Box::new(|c| c.request.working_dir = Some("/a\0".into())),
        ),
        (
            "mounts[0].host_path",
            Box::new(|c| {
                c.request.mounts = vec![crate::oci::MountRequest {
                    container_path: "/data".into(),
                    host_path: format!("/{}", "h".repeat(300)),
                    ..Default::default()
                }]
            }),
        ),
        (
            "run_as_user",
            Box::new(|c| c.request.linux.security.run_as_user = Some(-1)),
        ),
        (
            "cpuset_cpus",
            Box::new(|c| c.request.linux.resources.cpuset_cpus = Some("9999".into())),
        ),
        (
            "cpu_shares",
            Box::new(|c| c.request.linux.resources.cpu_shares = Some(i64::MAX as u64)),
        ),
        ("metadata.name", Box::new(|c| c.request.name = "a/b".into())),
    ];
    for (needle, change) in cases {
        let mut c = base();
        change(&mut c);
        invalid(container(&c, &sb, &cpus), &[needle]);
    }
}
