//! Tests of the ContainerConfig conversion: required fields, mounts, envs, devices, carried fields.

use std::collections::HashMap;

use super::assert_invalid;
use super::container::*;
use crate::oci::{DeviceRequest, IdMapping, MountRequest, Propagation, Security};
use crate::proto::runtime::v1 as pb;

pub(super) fn config() -> pb::ContainerConfig {
    pb::ContainerConfig {
        metadata: Some(pb::ContainerMetadata {
            name: "app".into(),
            attempt: 3,
        }),
        image: Some(pb::ImageSpec {
            image: "docker.io/library/busybox:1.36".into(),
            ..Default::default()
        }),
        command: vec!["/bin/sh".into()],
        args: vec!["-c".into(), "sleep 1".into()],
        working_dir: "/work".into(),
        envs: vec![
            pb::KeyValue {
                key: "A".into(),
                value: b"1".to_vec(),
            },
            pb::KeyValue {
                key: "BIN".into(),
                value: vec![0xff, 0x00, b'x'],
            },
        ],
        mounts: vec![pb::Mount {
            container_path: "/data".into(),
            host_path: "/var/lib/kubelet/pods/u/volumes/data".into(),
            readonly: true,
            selinux_relabel: true,
            propagation: pb::MountPropagation::PropagationHostToContainer as i32,
            recursive_read_only: true,
            uid_mappings: vec![pb::IdMapping {
                host_id: 65536,
                container_id: 0,
                length: 65536,
            }],
            gid_mappings: vec![pb::IdMapping {
                host_id: 131072,
                container_id: 0,
                length: 1000,
            }],
            ..Default::default()
        }],
        devices: vec![pb::Device {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            permissions: "rwm".into(),
        }],
        labels: HashMap::from([("io.kubernetes.container.name".into(), "app".into())]),
        annotations: HashMap::from([("io.kubernetes.container.restartCount".into(), "3".into())]),
        log_path: "app/3.log".into(),
        stdin: true,
        stdin_once: true,
        tty: true,
        stop_signal: pb::Signal::Sigusr1 as i32,
        ..Default::default()
    }
}

#[test]
fn carries_every_field() {
    let n = new_container(Some(config())).expect("valid");
    assert_eq!(n.attempt, 3);
    assert_eq!(n.log_path, "app/3.log");
    let r = n.request;
    assert_eq!(r.name, "app");
    assert_eq!(r.image, "docker.io/library/busybox:1.36");
    assert_eq!(r.command, ["/bin/sh"]);
    assert_eq!(r.args, ["-c", "sleep 1"]);
    assert_eq!(r.working_dir.as_deref(), Some("/work"));
    assert_eq!(
        r.envs,
        vec![
            ("A".to_string(), b"1".to_vec()),
            ("BIN".to_string(), vec![0xff, 0x00, b'x'])
        ],
        "env values are bytes, kept as sent and in order"
    );
    assert_eq!(
        r.mounts,
        vec![MountRequest {
            container_path: "/data".into(),
            host_path: "/var/lib/kubelet/pods/u/volumes/data".into(),
            readonly: true,
            propagation: Propagation::HostToContainer,
            selinux_relabel: true,
            recursive_read_only: true,
            image: None,
            uid_mappings: vec![IdMapping {
                container_id: 0,
                host_id: 65536,
                length: 65536,
            }],
            gid_mappings: vec![IdMapping {
                container_id: 0,
                host_id: 131072,
                length: 1000,
            }],
        }]
    );
    assert_eq!(
        r.devices,
        vec![DeviceRequest {
            container_path: "/dev/fuse".into(),
            host_path: "/dev/fuse".into(),
            permissions: "rwm".into(),
        }]
    );
    assert_eq!(
        r.labels
            .get("io.kubernetes.container.name")
            .map(String::as_str),
        Some("app")
    );
    assert_eq!(
        r.annotations
            .get("io.kubernetes.container.restartCount")
            .map(String::as_str),
        Some("3")
    );
    assert!(r.tty && r.stdin && r.stdin_once);
    assert_eq!(r.stop_signal, Some(libc::SIGUSR1));
}

#[test]
fn unset_fields_are_none_or_defaults() {
    let c = pb::ContainerConfig {
        metadata: config().metadata,
        image: config().image,
        ..Default::default()
    };
    let r = new_container(Some(c)).expect("valid").request;
    assert_eq!(r.working_dir, None);
    assert_eq!(r.stop_signal, None);
    assert_eq!(r.linux.security, Security::default());
    assert_eq!(
        r.linux.resources.oom_score_adj,
        Some(0),
        "oom_score_adj is always carried"
    );
    assert_eq!(r.linux.resources.memory_limit_in_bytes, None);
}

#[test]
fn validation_errors_name_the_field() {
    type Edit = fn(&mut pb::ContainerConfig);
    let cases: [(&str, Edit, &[&str]); 11] = [
        (
            "no metadata",
            |c| c.metadata = None,
            &["container config: metadata is required"],
        ),
        (
            "empty name",
            |c| c.metadata.iter_mut().for_each(|m| m.name.clear()),
            &["container config: metadata.name is required"],
        ),
        (
            "no image",
            |c| c.image = None,
            &["\"app\"", "image.image is required"],
        ),
        (
            "empty image",
            |c| c.image.iter_mut().for_each(|i| i.image.clear()),
            &["image.image is required"],
        ),
        (
            "relative container path",
            |c| c.mounts[0].container_path = "data".into(),
            &["mounts[0].container_path", "\"data\"", "absolute"],
        ),
        (
            "empty container path",
            |c| c.mounts[0].container_path.clear(),
            &["mounts[0].container_path"],
        ),
        (
            "empty host path",
            |c| c.mounts[0].host_path.clear(),
            &["mounts[0].host_path"],
        ),
        (
            "relative host path",
            |c| c.mounts[0].host_path = "vol".into(),
            &["mounts[0].host_path", "\"vol\""],
        ),
        (
            "bad propagation",
            |c| c.mounts[0].propagation = 5,
            &["mounts[0].propagation", "5"],
        ),
        (
            "CDI device",
            |c| {
                c.cdi_devices = vec![pb::CdiDevice {
                    name: "vendor.com/gpu=0".into(),
                }]
            },
            &["CDI", "vendor.com/gpu=0"],
        ),
        (
            "bad stop signal",
            |c| c.stop_signal = 99,
            &["stop_signal", "99"],
        ),
    ];
    for (what, edit, needles) in cases {
        let mut c = config();
        edit(&mut c);
        println!("case: {what}");
        assert_invalid(new_container(Some(c)), needles);
    }
    assert_invalid(new_container(None), &["container config is required"]);
}

#[test]
fn negative_resources_are_refused_naming_the_container() {
    let mut c = config();
    c.linux = Some(pb::LinuxContainerConfig {
        resources: Some(pb::LinuxContainerResources {
            cpu_shares: -2,
            ..Default::default()
        }),
        security_context: None,
    });
    assert_invalid(new_container(Some(c)), &["\"app\"", "cpu_shares", "-2"]);
}

#[test]
fn image_volume_is_carried_for_the_runtime_to_refuse() {
    let mut c = config();
    c.mounts[0].host_path.clear();
    c.mounts[0].image = Some(pb::ImageSpec {
        image: "registry.example/data:1".into(),
        ..Default::default()
    });
    let r = new_container(Some(c))
        .expect("an image mount converts")
        .request;
    assert_eq!(
        r.mounts[0].image.as_deref(),
        Some("registry.example/data:1")
    );
    assert_eq!(r.mounts[0].host_path, "");
}

#[test]
fn propagation_modes_both_ways() {
    for (wire, domain) in [
        (
            pb::MountPropagation::PropagationPrivate,
            Propagation::Private,
        ),
        (
            pb::MountPropagation::PropagationHostToContainer,
            Propagation::HostToContainer,
        ),
        (
            pb::MountPropagation::PropagationBidirectional,
            Propagation::Bidirectional,
        ),
    ] {
        let mut c = config();
        c.mounts[0].propagation = wire as i32;
        let m = &new_container(Some(c)).expect("valid").request.mounts[0];
        assert_eq!(m.propagation, domain);
        assert_eq!(mount_to_proto(m).propagation, wire as i32);
    }
}

#[test]
fn mounts_round_trip() {
    let c = config();
    let r = new_container(Some(c.clone())).expect("valid").request;
    let back: Vec<pb::Mount> = r.mounts.iter().map(mount_to_proto).collect();
    assert_eq!(back, c.mounts);
}
