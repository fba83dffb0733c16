//! Unit tests for the whole spec: defaults, privileged, read-only rootfs, JSON shape.

use std::path::PathBuf;

use super::*;
use crate::error::ErrorKind;
use crate::oci::spec::request::{CapabilityEdits, SecurityProfile};

struct Fixture {
    _dir: tempfile::TempDir,
    rootfs: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let rootfs = dir.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).expect("etc");
    std::fs::write(
        rootfs.join("etc/passwd"),
        "root:x:0:0::/root:/bin/sh\napp:x:1000:1000::/:/bin/sh\n",
    )
    .expect("passwd");
    std::fs::write(
        rootfs.join("etc/group"),
        "root:x:0:\naudio:x:29:app\napp:x:1000:\n",
    )
    .expect("group");
    Fixture { _dir: dir, rootfs }
}

fn request() -> ContainerRequest {
    ContainerRequest {
        name: "web".into(),
        image: "busybox:latest".into(),
        command: vec!["sleep".into(), "1".into()],
        ..Default::default()
    }
}

fn pod() -> SandboxContext {
    SandboxContext {
        id: "sb1".into(),
        hostname: "pod-a".into(),
        net_ns: Some("/run/netns/a".into()),
        ipc_ns: Some("/run/ipcns/a".into()),
        uts_ns: Some("/run/utsns/a".into()),
        pid_ns_holder: Some(1),
        ..Default::default()
    }
}

fn options() -> SpecOptions {
    SpecOptions {
        cgroup_driver: CgroupDriver::Cgroupfs,
        cgroups_path: "/bosun-test/web".into(),
        host: HostFacts::default(),
    }
}

fn no_mountinfo() -> Result<String> {
    Err(Error::internal("mountinfo is not expected here"))
}

fn build_with(req: &ContainerRequest, sb: &SandboxContext, opts: &SpecOptions) -> Result<Spec> {
    let f = fixture();
    build(
        req,
        sb,
        &RunConfig::default(),
        &f.rootfs,
        opts,
        Path::new("/dev"),
        &no_mountinfo,
    )
}

fn caps_of(spec: &Spec) -> usize {
    spec.process()
        .as_ref()
        .and_then(|p| p.capabilities().clone())
        .and_then(|c| c.bounding().clone())
        .map_or(0, |b| b.len())
}

#[test]
fn a_plain_container_gets_containerds_defaults() {
    let spec = build_with(&request(), &pod(), &options()).expect("spec");
    let p = spec.process().clone().expect("process");
    assert_eq!(p.args().clone().unwrap_or_default(), ["sleep", "1"]);
    assert_eq!(p.cwd(), Path::new("/"));
    assert_eq!(p.terminal(), Some(false));
    assert_eq!(p.no_new_privileges(), Some(false));
    assert!(p.rlimits().is_none());
    assert!(p.apparmor_profile().is_none());
    assert!(p.oom_score_adj().is_none());
    assert!(p
        .env()
        .clone()
        .unwrap_or_default()
        .contains(&"HOSTNAME=pod-a".to_string()));
    assert_eq!((p.user().uid(), p.user().gid()), (0, 0));
    assert_eq!(caps_of(&spec), 14);
    assert!(spec.hostname().is_none());
    assert_eq!(spec.version(), OCI_VERSION);
    let root = spec.root().clone().expect("root");
    assert_eq!(root.readonly(), Some(false));

    let linux = spec.linux().clone().expect("linux");
    assert_eq!(
        linux.cgroups_path().clone(),
        Some(PathBuf::from("/bosun-test/web"))
    );
    assert_eq!(linux.masked_paths().as_ref().map(|m| m.len()), Some(11));
    assert_eq!(linux.readonly_paths().as_ref().map(|m| m.len()), Some(5));
    assert!(linux.seccomp().is_none(), "unset seccomp is unconfined");
    assert_eq!(linux.namespaces().as_ref().map(|n| n.len()), Some(5));
    assert!(linux.devices().is_none());
    let rules = linux
        .resources()
        .clone()
        .and_then(|r| r.devices().clone())
        .expect("rules");
    assert_eq!(rules.len(), 1);
    assert!(!rules[0].allow());

    let ann = spec.annotations().clone().unwrap_or_default();
    assert_eq!(
        ann.get("io.kubernetes.cri.sandbox-id").map(String::as_str),
        Some("sb1")
    );
    assert_eq!(
        ann.get("io.kubernetes.cri.container-name")
            .map(String::as_str),
        Some("web")
    );
}

#[test]
fn the_spec_round_trips_through_config_json() {
    let mut req = request();
    req.linux.security.seccomp = SecurityProfile::RuntimeDefault;
    req.linux.resources.memory_limit_in_bytes = Some(64 << 20);
    let spec = build_with(&req, &pod(), &options()).expect("spec");
    let json = serde_json::to_string_pretty(&spec).expect("serialise");
    for needle in [
        "\"ociVersion\": \"1.0.2-dev\"",
        "\"cgroupsPath\"",
        "\"maskedPaths\"",
        "\"type\": \"network\"",
        "\"path\": \"/run/netns/a\"",
    ] {
        assert!(json.contains(needle), "{needle} missing from\n{json}");
    }
    assert!(
        !json.contains("\"hostname\""),
        "no hostname in a shared UTS namespace"
    );
    let back: Spec = serde_json::from_str(&json).expect("parse back");
    assert_eq!(back, spec);
}

#[test]
fn privileged_needs_a_privileged_pod_and_opens_everything() {
    let mut req = request();
    req.linux.security.privileged = true;
    req.linux.security.seccomp = SecurityProfile::RuntimeDefault;
    let err = build_with(&req, &pod(), &options()).expect_err("pod not privileged");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("web"), "{err}");

    let sb = SandboxContext {
        privileged: true,
        ..pod()
    };
    let mut opts = options();
    opts.host.capabilities.retain(|c| c != "CAP_SYS_RESOURCE");
    let spec = build_with(&req, &sb, &opts).expect("spec");
    assert_eq!(
        caps_of(&spec),
        40,
        "the daemon's capabilities, not every known one"
    );
    let linux = spec.linux().clone().expect("linux");
    assert_eq!(linux.masked_paths().clone(), Some(Vec::new()));
    assert_eq!(linux.readonly_paths().clone(), Some(Vec::new()));
    assert!(linux.seccomp().is_none());
    assert!(linux
        .devices()
        .iter()
        .flatten()
        .any(|d| d.path() == Path::new("/dev/null")));
    let rules = linux
        .resources()
        .clone()
        .and_then(|r| r.devices().clone())
        .expect("rules");
    assert!(rules.len() == 1 && rules[0].allow());
    let sys = spec
        .mounts()
        .iter()
        .flatten()
        .find(|m| m.destination() == Path::new("/sys"))
        .and_then(|m| m.options().clone())
        .unwrap_or_default();
    assert!(sys.contains(&"rw".to_string()), "{sys:?}");
}

#[test]
fn security_context_fields_reach_the_spec() {
    let mut req = request();
    let sec = &mut req.linux.security;
    sec.readonly_rootfs = true;
    sec.no_new_privs = true;
    sec.run_as_username = Some("app".into());
    sec.capabilities = CapabilityEdits {
        add: vec!["NET_ADMIN".into()],
        drop: vec!["CAP_KILL".into()],
        add_ambient: Vec::new(),
    };
    sec.seccomp = SecurityProfile::RuntimeDefault;
    req.linux.resources.oom_score_adj = Some(-999);
    req.tty = true;
    let mut opts = options();
    opts.host.oom_score_adj = -500;
    let spec = build_with(&req, &pod(), &opts).expect("spec");
    let p = spec.process().clone().expect("process");
    assert_eq!(p.no_new_privileges(), Some(true));
    assert_eq!(p.terminal(), Some(true));
    assert_eq!(p.oom_score_adj(), Some(-500));
    assert_eq!((p.user().uid(), p.user().gid()), (1000, 1000));
    assert_eq!(p.user().additional_gids().clone(), Some(vec![29, 1000]));
    assert_eq!(caps_of(&spec), 14);
    assert_eq!(spec.root().clone().and_then(|r| r.readonly()), Some(true));
    let seccomp = spec
        .linux()
        .clone()
        .and_then(|l| l.seccomp().clone())
        .expect("seccomp");
    assert!(seccomp.syscalls().as_ref().is_some_and(|s| !s.is_empty()));
}

#[test]
fn errors_name_the_container_and_keep_their_kind() {
    let cases: Vec<(ContainerRequest, SpecOptions, ErrorKind, &str)> = vec![
        (
            ContainerRequest {
                command: Vec::new(),
                ..request()
            },
            options(),
            ErrorKind::InvalidArgument,
            "no command specified",
        ),
        (
            {
                let mut r = request();
                r.linux.security.capabilities.add = vec!["WIZARDRY".into()];
                r
            },
            options(),
            ErrorKind::InvalidArgument,
            "WIZARDRY",
        ),
        (
            {
                let mut r = request();
                r.linux.security.run_as_username = Some("ghost".into());
                r
            },
            options(),
            ErrorKind::InvalidArgument,
            "ghost",
        ),
        (
            request(),
            SpecOptions {
                cgroups_path: "x.slice:bosun:web".into(),
                ..options()
            },
            ErrorKind::Internal,
            "cgroup driver",
        ),
    ];
    for (req, opts, kind, needle) in cases {
        let err = build_with(&req, &pod(), &opts).expect_err(needle);
        assert_eq!(err.kind(), kind, "{err}");
        assert!(
            err.message().contains(needle) && err.message().contains("web"),
            "{err}"
        );
    }
    let f = fixture();
    let err = build(
        &request(),
        &pod(),
        &RunConfig::default(),
        Path::new("rootfs"),
        &options(),
        Path::new("/dev"),
        &no_mountinfo,
    )
    .expect_err("relative rootfs");
    assert_eq!(err.kind(), ErrorKind::Internal);
    drop(f);
}
