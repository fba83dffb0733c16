//! Tests of LinuxContainerResources ⇄ Resources: zero means unset, oom_score_adj always kept.

use std::collections::{BTreeMap, HashMap};

use super::assert_invalid;
use super::resources::*;
use crate::oci::{HugepageLimit, Resources};
use crate::proto::runtime::v1 as pb;

fn full() -> pb::LinuxContainerResources {
    pb::LinuxContainerResources {
        cpu_period: 100_000,
        cpu_quota: 50_000,
        cpu_shares: 512,
        memory_limit_in_bytes: 256 << 20,
        oom_score_adj: 999,
        cpuset_cpus: "0-1".into(),
        cpuset_mems: "0".into(),
        hugepage_limits: vec![pb::HugepageLimit {
            page_size: "2MB".into(),
            limit: 4 << 20,
        }],
        unified: HashMap::from([("memory.high".into(), "200000000".into())]),
        memory_swap_limit_in_bytes: 512 << 20,
    }
}

#[test]
fn zero_and_empty_mean_unset() {
    let r = resources(pb::LinuxContainerResources::default()).expect("valid");
    assert_eq!(
        r,
        Resources {
            oom_score_adj: Some(0),
            ..Resources::default()
        },
        "everything unset except oom_score_adj, where 0 is a real value"
    );
}

#[test]
fn set_values_are_carried() {
    let r = resources(full()).expect("valid");
    assert_eq!(
        r,
        Resources {
            cpu_period: Some(100_000),
            cpu_quota: Some(50_000),
            cpu_shares: Some(512),
            memory_limit_in_bytes: Some(256 << 20),
            memory_swap_limit_in_bytes: Some(512 << 20),
            oom_score_adj: Some(999),
            cpuset_cpus: Some("0-1".into()),
            cpuset_mems: Some("0".into()),
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            unified: BTreeMap::from([("memory.high".into(), "200000000".into())]),
        }
    );
}

#[test]
fn unlimited_quota_and_negative_oom_score_are_kept() {
    let r = resources(pb::LinuxContainerResources {
        cpu_quota: -1,
        oom_score_adj: -997,
        memory_swap_limit_in_bytes: -1,
        ..Default::default()
    })
    .expect("valid");
    assert_eq!(r.cpu_quota, Some(-1));
    assert_eq!(r.oom_score_adj, Some(-997));
    assert_eq!(r.memory_swap_limit_in_bytes, Some(-1));
}

#[test]
fn negative_period_and_shares_are_invalid() {
    assert_invalid(
        resources(pb::LinuxContainerResources {
            cpu_period: -1,
            ..Default::default()
        }),
        &["cpu_period", "-1"],
    );
    assert_invalid(
        resources(pb::LinuxContainerResources {
            cpu_shares: -2,
            ..Default::default()
        }),
        &["cpu_shares", "-2"],
    );
}

#[test]
fn round_trip() {
    for wire in [full(), pb::LinuxContainerResources::default()] {
        let domain = resources(wire.clone()).expect("valid");
        assert_eq!(resources_to_proto(&domain), wire);
    }
}

#[test]
fn update_requires_linux_resources() {
    assert_invalid(update_resources(None), &["linux resources are required"]);
    assert_eq!(
        update_resources(Some(full())).expect("valid").cpu_shares,
        Some(512)
    );
}
