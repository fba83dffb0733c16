//! Tests of the PodSandboxConfig conversion: validation, namespace modes, carried fields.

use std::collections::HashMap;

use super::assert_invalid;
use super::sandbox::*;
use crate::oci::NamespaceMode;
use crate::proto::runtime::v1 as pb;
use crate::runtime::{Dns, PortMapping};

fn config() -> pb::PodSandboxConfig {
    pb::PodSandboxConfig {
        metadata: Some(pb::PodSandboxMetadata {
            name: "web".into(),
            uid: "u-1".into(),
            namespace: "default".into(),
            attempt: 2,
        }),
        hostname: "web-host".into(),
        log_directory: "/var/log/pods/default_web_u-1".into(),
        dns_config: Some(pb::DnsConfig {
            servers: vec!["10.0.0.10".into()],
            searches: vec!["svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        }),
        port_mappings: vec![pb::PortMapping {
            protocol: pb::Protocol::Udp as i32,
            container_port: 53,
            host_port: 5353,
            host_ip: "127.0.0.1".into(),
        }],
        labels: HashMap::from([("app".into(), "web".into())]),
        annotations: HashMap::from([("note".into(), "x".into())]),
        linux: Some(pb::LinuxPodSandboxConfig {
            cgroup_parent: "/kubepods/pod-u-1".into(),
            security_context: Some(pb::LinuxSandboxSecurityContext {
                namespace_options: Some(pb::NamespaceOption {
                    network: pb::NamespaceMode::Node as i32,
                    pid: pb::NamespaceMode::Container as i32,
                    ipc: pb::NamespaceMode::Pod as i32,
                    ..Default::default()
                }),
                privileged: true,
                ..Default::default()
            }),
            sysctls: HashMap::from([("net.ipv4.ip_forward".into(), "1".into())]),
            ..Default::default()
        }),
        windows: None,
    }
}

#[test]
fn carries_every_field() {
    let r = sandbox_request(Some(config()), "runc").expect("valid");
    assert_eq!(r.pod.name, "web");
    assert_eq!(r.pod.namespace, "default");
    assert_eq!(r.pod.uid, "u-1");
    assert_eq!(r.pod.attempt, 2);
    assert_eq!(r.hostname, "web-host");
    assert_eq!(r.log_directory, "/var/log/pods/default_web_u-1");
    assert_eq!(
        r.dns,
        Some(Dns {
            servers: vec!["10.0.0.10".into()],
            searches: vec!["svc.cluster.local".into()],
            options: vec!["ndots:5".into()],
        })
    );
    assert_eq!(
        r.port_mappings,
        vec![PortMapping {
            protocol: "UDP".into(),
            container_port: 53,
            host_port: 5353,
            host_ip: "127.0.0.1".into(),
        }]
    );
    assert_eq!(r.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(r.annotations.get("note").map(String::as_str), Some("x"));
    assert_eq!(r.runtime_handler, "runc");
    assert_eq!(r.cgroup_parent, "/kubepods/pod-u-1");
    assert_eq!(
        (r.network, r.pid, r.ipc),
        (
            NamespaceMode::Node,
            NamespaceMode::Container,
            NamespaceMode::Pod
        )
    );
    assert_eq!(
        r.sysctls.get("net.ipv4.ip_forward").map(String::as_str),
        Some("1")
    );
    assert!(r.privileged);
}

#[test]
fn minimal_config_defaults() {
    let c = pb::PodSandboxConfig {
        metadata: config().metadata,
        ..Default::default()
    };
    let r = sandbox_request(Some(c), "").expect("valid");
    assert_eq!(r.dns, None, "no dns_config: the host's resolv.conf");
    assert_eq!(r.runtime_handler, "");
    assert_eq!(
        (r.network, r.pid, r.ipc),
        (NamespaceMode::Pod, NamespaceMode::Pod, NamespaceMode::Pod)
    );
    assert!(!r.privileged);
    assert!(r.port_mappings.is_empty() && r.sysctls.is_empty());
}

#[test]
fn validation_errors_name_the_field() {
    type Edit = fn(&mut pb::PodSandboxConfig);
    let cases: [(&str, Edit, &[&str]); 11] = [
        (
            "no metadata",
            |c| c.metadata = None,
            &["metadata is required"],
        ),
        (
            "empty name",
            |c| c.metadata.iter_mut().for_each(|m| m.name.clear()),
            &["metadata.name"],
        ),
        (
            "empty namespace",
            |c| c.metadata.iter_mut().for_each(|m| m.namespace.clear()),
            &["metadata.namespace"],
        ),
        (
            "empty uid",
            |c| c.metadata.iter_mut().for_each(|m| m.uid.clear()),
            &["metadata.uid"],
        ),
        (
            "bad protocol",
            |c| c.port_mappings[0].protocol = 7,
            &["port_mappings[0].protocol", "7"],
        ),
        (
            "bad network mode",
            |c| set_ns(c, |n| n.network = 9),
            &["namespace_options.network", "9"],
        ),
        (
            "bad pid mode",
            |c| set_ns(c, |n| n.pid = -1),
            &["namespace_options.pid"],
        ),
        (
            "user namespace mode CONTAINER",
            |c| set_userns(c, pb::NamespaceMode::Container, 0),
            &["userns_options.mode", "CONTAINER", "POD and NODE"],
        ),
        (
            "user namespace mode TARGET",
            |c| set_userns(c, pb::NamespaceMode::Target, 0),
            &["userns_options.mode", "TARGET"],
        ),
        (
            "host users with mappings",
            |c| set_userns(c, pb::NamespaceMode::Node, 1),
            &["userns_options", "NODE", "no uids/gids"],
        ),
        (
            "bad user namespace mode",
            |c| {
                set_ns(c, |n| {
                    n.userns_options = Some(pb::UserNamespace {
                        mode: 7,
                        ..Default::default()
                    })
                })
            },
            &["userns_options.mode", "7"],
        ),
    ];
    for (what, edit, needles) in cases {
        let mut c = config();
        edit(&mut c);
        println!("case: {what}");
        assert_invalid(sandbox_request(Some(c), "runc"), needles);
    }
    assert_invalid(
        sandbox_request(None, "runc"),
        &["sandbox config is required"],
    );
}

fn set_ns(c: &mut pb::PodSandboxConfig, f: impl FnOnce(&mut pb::NamespaceOption)) {
    let linux = c.linux.get_or_insert_with(Default::default);
    let sc = linux.security_context.get_or_insert_with(Default::default);
    f(sc.namespace_options.get_or_insert_with(Default::default));
}

fn set_userns(c: &mut pb::PodSandboxConfig, mode: pb::NamespaceMode, ranges: usize) {
    let map = vec![
        pb::IdMapping {
            host_id: 65536,
            container_id: 0,
            length: 65536,
        };
        ranges
    ];
    set_ns(c, |n| {
        n.userns_options = Some(pb::UserNamespace {
            mode: mode as i32,
            uids: map.clone(),
            gids: map,
        })
    });
}

#[test]
fn pod_user_namespace_carries_its_mappings() {
    let mut c = config();
    set_userns(&mut c, pb::NamespaceMode::Pod, 1);
    let r = sandbox_request(Some(c), "runc").expect("valid");
    let want = crate::oci::IdMapping {
        container_id: 0,
        host_id: 65536,
        length: 65536,
    };
    let ns = r.userns.expect("a user namespace");
    assert_eq!((ns.uids, ns.gids), (vec![want], vec![want]));
    // The runtime checks the mappings themselves (it knows the field path and the node).
    let mut c = config();
    set_userns(&mut c, pb::NamespaceMode::Pod, 2);
    assert_eq!(
        sandbox_request(Some(c), "runc")
            .expect("converted")
            .userns
            .map(|u| u.uids.len()),
        Some(2)
    );
}

#[test]
fn host_user_namespace_is_accepted() {
    let mut c = config();
    set_ns(&mut c, |n| {
        n.userns_options = Some(pb::UserNamespace {
            mode: pb::NamespaceMode::Node as i32,
            ..Default::default()
        })
    });
    assert!(sandbox_request(Some(c), "runc").is_ok());
}

#[test]
fn namespace_modes_both_ways() {
    let table = [
        (pb::NamespaceMode::Pod, NamespaceMode::Pod),
        (pb::NamespaceMode::Container, NamespaceMode::Container),
        (pb::NamespaceMode::Node, NamespaceMode::Node),
        (pb::NamespaceMode::Target, NamespaceMode::Target),
    ];
    for (wire, domain) in table {
        assert_eq!(namespace_mode("f", wire as i32).ok(), Some(domain));
        assert_eq!(namespace_mode_to_proto(domain), wire);
    }
    assert_invalid(namespace_mode("some.field", 4), &["some.field", "4"]);
}
