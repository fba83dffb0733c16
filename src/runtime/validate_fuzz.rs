//! Property-based fuzzing of the request validators (proptest): on any input they answer
//! without panicking, refuse with InvalidArgument and a bounded message, and what they accept
//! keeps their promises (log files inside the log directory, names the kubelet could send,
//! limits the kernel takes).
//!
//! CI runs the default 256 cases per property (seconds). A longer run:
//! `PROPTEST_CASES=200000 cargo test --lib validate_fuzz` (see docs/testing.md).

use std::path::{Component, Path};

use proptest::prelude::*;

use super::state::meta::{NewContainer, PodName, PortMapping, SandboxRequest};
use super::validate::{self, COMPONENT_MAX, PATH_MAX};
use crate::config::CgroupDriver;
use crate::cri::convert::{container::new_container, sandbox::sandbox_request};
use crate::error::{ErrorKind, Result};
use crate::oci::resources::{self, HostCpus};
use crate::oci::Resources;
use crate::proto::runtime::v1 as pb;

/// The longest message a validator may produce (echoed values are cut to 256 bytes).
const MESSAGE_BOUND: usize = 1024;

/// Strings a hostile caller sends: anything printable, path-like pieces, separators, NULs,
/// long runs.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9._-]{0,80}",
        "[./a-z\\x00;= \\n]{0,40}",
        "(\\.\\./|/|[a-z]{1,8}/|\\./){0,20}[a-z.]{0,12}",
        ("[a-z/]{1,3}", 200usize..6000).prop_map(|(s, n)| s.repeat(n / s.len().max(1))),
    ]
}

fn refused_well(r: &Result<()>) -> std::result::Result<(), TestCaseError> {
    if let Err(e) = r {
        prop_assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{}", e);
        prop_assert!(
            e.message().len() <= MESSAGE_BOUND,
            "{} bytes",
            e.message().len()
        );
    }
    Ok(())
}

fn host() -> HostCpus {
    HostCpus {
        cpus: "0-3".into(),
        mems: "0".into(),
    }
}

proptest! {
    #[test]
    fn names_accepted_are_short_and_plain(v in hostile(), max in 1usize..300) {
        let r = validate::name("metadata.name", &v, max);
        refused_well(&r)?;
        if r.is_ok() {
            prop_assert!(!v.is_empty() && v.len() <= max);
            prop_assert!(v.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._".contains(&b)));
        } else {
            let msg = r.expect_err("refused").to_string();
            prop_assert!(msg.contains("metadata.name"), "{}", msg);
        }
    }

    #[test]
    fn accepted_log_paths_stay_in_the_log_directory(dir in hostile(), p in hostile()) {
        let dir = format!("/var/log/pods/{}", dir.replace('\0', ""));
        let r = validate::log_path("c", &dir, &p);
        refused_well(&r)?;
        if r.is_ok() && !p.is_empty() {
            let rel = Path::new(&p);
            prop_assert!(!rel.is_absolute());
            prop_assert!(rel.components().all(|c| matches!(c, Component::Normal(_) | Component::CurDir)));
            let joined = Path::new(&dir).join(rel);
            prop_assert!(joined.starts_with(&dir));
            prop_assert!(!p.contains('\0') && joined.as_os_str().len() <= PATH_MAX);
            prop_assert!(p.split('/').all(|c| c.len() <= COMPONENT_MAX));
        }
    }

    #[test]
    fn accepted_resources_are_within_the_kernel_ranges(
        shares in prop_oneof![Just(0i64), any::<i64>(), 0i64..300_000],
        period in prop_oneof![Just(0i64), any::<i64>(), 0i64..2_000_000],
        quota in prop_oneof![Just(0i64), Just(-1i64), any::<i64>()],
        memory in prop_oneof![Just(0i64), Just(-1i64), any::<i64>()],
        swap in prop_oneof![Just(0i64), Just(-1i64), any::<i64>()],
        oom in any::<i64>(),
        cpus in prop_oneof![hostile(), "[0-9,-]{0,12}"],
        mems in prop_oneof![hostile(), "[0-9,-]{0,6}"],
    ) {
        let proto = pb::LinuxContainerResources {
            cpu_shares: shares,
            cpu_period: period,
            cpu_quota: quota,
            memory_limit_in_bytes: memory,
            memory_swap_limit_in_bytes: swap,
            oom_score_adj: oom,
            cpuset_cpus: cpus,
            cpuset_mems: mems,
            ..Default::default()
        };
        let r: Result<Resources> = crate::cri::convert::resources::resources(proto);
        let r = r.and_then(|r| resources::validate(&r, Some(&host())).map(|()| r));
        refused_well(&r.as_ref().map(drop).map_err(Clone::clone))?;
        if let Ok(r) = r {
            prop_assert!(r.cpu_shares.is_none_or(|s| resources::SHARES.contains(&s)));
            prop_assert!(r.cpu_period.is_none_or(|p| resources::PERIOD.contains(&p)));
            prop_assert!(r.cpu_quota.is_none_or(|q| q == -1 || resources::QUOTA.contains(&q)));
            prop_assert!((-1000..=1000).contains(&r.oom_score_adj.unwrap_or(0)));
            for list in [&r.cpuset_cpus, &r.cpuset_mems].into_iter().flatten() {
                let n = resources::parse_cpuset(list).expect("accepted lists parse");
                prop_assert!(n.iter().all(|c| *c <= 3));
            }
        }
    }

    #[test]
    fn sandbox_requests_never_panic_and_refuse_by_field(
        name in hostile(), namespace in hostile(), uid in hostile(),
        hostname in hostile(), log_dir in hostile(), cgroup in hostile(),
        port in any::<i32>(), host_port in any::<i32>(), host_ip in hostile(),
        server in hostile(), sysctl in hostile(), handler in prop_oneof![Just(String::new()), hostile()],
    ) {
        let config = pb::PodSandboxConfig {
            metadata: Some(pb::PodSandboxMetadata { name, namespace, uid, attempt: 0 }),
            hostname,
            log_directory: log_dir,
            port_mappings: vec![pb::PortMapping {
                container_port: port,
                host_port,
                host_ip,
                ..Default::default()
            }],
            dns_config: Some(pb::DnsConfig { servers: vec![server], ..Default::default() }),
            linux: Some(pb::LinuxPodSandboxConfig {
                cgroup_parent: cgroup,
                sysctls: [(sysctl, "1".to_string())].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let r = sandbox_request(Some(config), &handler)
            .and_then(|req| validate::sandbox(&req, CgroupDriver::Cgroupfs).map(|()| req));
        refused_well(&r.as_ref().map(drop).map_err(Clone::clone))?;
        if let Ok(req) = r {
            let p = &req.pod;
            for v in [&p.name, &p.namespace, &p.uid] {
                prop_assert!(!v.contains([';', '=', '\0', '/']));
            }
            prop_assert!(req.port_mappings.iter().all(|m| (1..=65535).contains(&m.container_port)));
        }
    }

    #[test]
    fn container_requests_never_panic_and_refuse_by_field(
        name in hostile(), log_path in hostile(), arg in hostile(), key in hostile(),
        value in hostile(), host_path in hostile(), container_path in hostile(),
    ) {
        let config = pb::ContainerConfig {
            metadata: Some(pb::ContainerMetadata { name, attempt: 0 }),
            image: Some(pb::ImageSpec { image: "busybox".into(), ..Default::default() }),
            command: vec![arg],
            envs: vec![pb::KeyValue { key, value: value.into_bytes() }],
            mounts: vec![pb::Mount { host_path, container_path, ..Default::default() }],
            log_path,
            ..Default::default()
        };
        let sb = super::state::meta::SandboxMeta {
            request: SandboxRequest {
                pod: PodName { name: "p".into(), namespace: "n".into(), uid: "u".into(), attempt: 0 },
                log_directory: "/var/log/pods/n_p_u".into(),
                port_mappings: Vec::<PortMapping>::new(),
                ..Default::default()
            },
            ..Default::default()
        };
        let r = new_container(Some(config))
            .and_then(|c: NewContainer| validate::container(&c, &sb, &host()));
        refused_well(&r)?;
    }
}
