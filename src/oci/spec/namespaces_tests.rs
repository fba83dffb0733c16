//! Unit tests for namespace selection and sysctl validation.

use super::*;
use crate::error::ErrorKind;

fn pod() -> SandboxContext {
    SandboxContext {
        id: "sb".into(),
        net_ns: Some("/run/bosun/netns/sb".into()),
        ipc_ns: Some("/run/bosun/ipcns/sb".into()),
        uts_ns: Some("/run/bosun/utsns/sb".into()),
        pid_ns_holder: Some(4242),
        target_pid: Some(777),
        ..Default::default()
    }
}

fn list(v: &[LinuxNamespace]) -> Vec<(String, Option<String>)> {
    v.iter()
        .map(|n| {
            (
                n.typ().to_string(),
                n.path().as_ref().map(|p| p.display().to_string()),
            )
        })
        .collect()
}

fn s(t: &str, p: Option<&str>) -> (String, Option<String>) {
    (t.to_string(), p.map(String::from))
}

#[test]
fn pod_mode_joins_the_pods_namespaces() {
    let got = namespaces("c", &NamespaceOptions::default(), &pod(), false, false).expect("ns");
    assert_eq!(
        list(&got),
        [
            s("mnt", None),
            s("net", Some("/run/bosun/netns/sb")),
            s("uts", Some("/run/bosun/utsns/sb")),
            s("ipc", Some("/run/bosun/ipcns/sb")),
            s("pid", Some("/proc/4242/ns/pid")),
        ]
    );
}

#[test]
fn pid_modes() {
    let mut o = NamespaceOptions {
        pid: NamespaceMode::Container,
        ..Default::default()
    };
    let pid =
        |o: &NamespaceOptions, sb: &SandboxContext| -> Result<Option<(String, Option<String>)>> {
            let got = namespaces("c", o, sb, false, false)?;
            Ok(list(&got).into_iter().find(|(t, _)| t == "pid"))
        };
    assert_eq!(pid(&o, &pod()).expect("container"), Some(s("pid", None)));
    o.pid = NamespaceMode::Target;
    o.target_id = "other".into();
    assert_eq!(
        pid(&o, &pod()).expect("target"),
        Some(s("pid", Some("/proc/777/ns/pid")))
    );
    let no_target = SandboxContext {
        target_pid: None,
        ..pod()
    };
    let err = pid(&o, &no_target).expect_err("no target");
    assert!(err.message().contains("\"other\""), "{err}");
    o.pid = NamespaceMode::Node;
    assert_eq!(
        pid(&o, &pod()).expect_err("node").kind(),
        ErrorKind::InvalidArgument
    );
    let host = SandboxContext {
        host_pid: true,
        ..pod()
    };
    assert_eq!(pid(&o, &host).expect("node on host pod"), None);
    o.pid = NamespaceMode::Pod;
    assert_eq!(pid(&o, &host).expect("pod on host pod"), None);
    let no_holder = SandboxContext {
        pid_ns_holder: None,
        ..pod()
    };
    assert_eq!(
        pid(&o, &no_holder).expect_err("holder").kind(),
        ErrorKind::FailedPrecondition
    );
}

#[test]
fn host_network_drops_net_and_uts_and_host_ipc_drops_ipc() {
    let host = SandboxContext {
        host_network: true,
        host_ipc: true,
        ..pod()
    };
    let o = NamespaceOptions {
        network: NamespaceMode::Node,
        ipc: NamespaceMode::Node,
        ..Default::default()
    };
    let got = namespaces("c", &o, &host, false, false).expect("ns");
    assert_eq!(
        list(&got),
        [s("mnt", None), s("pid", Some("/proc/4242/ns/pid"))]
    );
    let o = NamespaceOptions {
        network: NamespaceMode::Node,
        ..Default::default()
    };
    let err = namespaces("c", &o, &pod(), false, false).expect_err("node net in pod");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let o = NamespaceOptions {
        ipc: NamespaceMode::Container,
        ..Default::default()
    };
    assert!(namespaces("c", &o, &pod(), false, false).is_err());
    let missing = SandboxContext {
        net_ns: None,
        ..pod()
    };
    let err = namespaces("c", &NamespaceOptions::default(), &missing, false, false)
        .expect_err("no netns");
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
}

#[test]
fn cgroup_namespace_only_on_v2_and_not_privileged() {
    let has = |unified, privileged| {
        namespaces(
            "c",
            &NamespaceOptions::default(),
            &pod(),
            unified,
            privileged,
        )
        .expect("ns")
        .iter()
        .any(|n| n.typ() == LinuxNamespaceType::Cgroup)
    };
    assert!(!has(false, false));
    assert!(has(true, false));
    assert!(!has(true, true));
}

#[test]
fn only_namespaced_sysctls_in_owned_namespaces_pass() {
    let with = |pairs: &[(&str, &str)], host_net: bool, host_ipc: bool| {
        let sb = SandboxContext {
            sysctls: pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            host_network: host_net,
            host_ipc,
            ..pod()
        };
        sysctls("c", &sb)
    };
    assert_eq!(with(&[], false, false).expect("none"), None);
    let ok = with(
        &[
            ("kernel.shm_rmid_forced", "1"),
            ("kernel.msgmax", "65536"),
            ("kernel.sem", "250 32000 100 128"),
            ("fs.mqueue.msg_max", "10"),
            ("net.ipv4.ip_local_port_range", "1024 65000"),
            ("net/ipv4/conf/eth0.100/forwarding", "1"),
        ],
        false,
        false,
    )
    .expect("namespaced")
    .expect("some");
    assert_eq!(ok.len(), 6);
    assert_eq!(
        ok.get("net.ipv4.conf.eth0/100.forwarding")
            .map(String::as_str),
        Some("1")
    );

    for (name, host_net, host_ipc) in [
        ("kernel.hostname", false, false),
        ("vm.swappiness", false, false),
        ("kernel.semx", false, false),
        ("net.core.somaxconn", true, false),
        ("kernel.shmmax", false, true),
    ] {
        let err = with(&[(name, "1")], host_net, host_ipc).expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains(name), "{err}");
    }
}
