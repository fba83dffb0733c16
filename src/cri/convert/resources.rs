//! LinuxContainerResources ⇄ `oci::Resources` (CRI's 0 / "" mean unset), for Create and Update.

use crate::error::{Error, Result};
use crate::oci::{HugepageLimit, Resources};
use crate::proto::runtime::v1 as pb;

use super::sandbox::{sorted, unsorted};

/// `Some(v)` unless `v` is zero.
fn nonzero(v: i64) -> Option<i64> {
    (v != 0).then_some(v)
}

/// `Some(v)` unless `v` is zero; negative values are InvalidArgument naming `field`.
fn positive(field: &str, v: i64) -> Result<Option<u64>> {
    match u64::try_from(v) {
        Ok(0) => Ok(None),
        Ok(v) => Ok(Some(v)),
        Err(_) => Err(Error::invalid(format!(
            "linux resources: {field}: {v} must not be negative"
        ))),
    }
}

/// `Some(s)` unless `s` is empty.
fn nonempty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

/// The proto resources → the domain's; zero and "" become `None`, except `oom_score_adj`, which
/// is always kept (0 is a real value and the kubelet always sets it).
pub fn resources(r: pb::LinuxContainerResources) -> Result<Resources> {
    Ok(Resources {
        cpu_period: positive("cpu_period", r.cpu_period)?,
        cpu_quota: nonzero(r.cpu_quota),
        cpu_shares: positive("cpu_shares", r.cpu_shares)?,
        memory_limit_in_bytes: nonzero(r.memory_limit_in_bytes),
        memory_swap_limit_in_bytes: nonzero(r.memory_swap_limit_in_bytes),
        oom_score_adj: Some(r.oom_score_adj),
        cpuset_cpus: nonempty(r.cpuset_cpus),
        cpuset_mems: nonempty(r.cpuset_mems),
        hugepage_limits: r
            .hugepage_limits
            .into_iter()
            .map(|h| HugepageLimit {
                page_size: h.page_size,
                limit: h.limit,
            })
            .collect(),
        unified: sorted(r.unified),
    })
}

/// The domain resources → the proto's (`None` back to 0 / "").
pub fn resources_to_proto(r: &Resources) -> pb::LinuxContainerResources {
    let wide = |v: Option<u64>| v.map_or(0, |v| i64::try_from(v).unwrap_or(i64::MAX));
    pb::LinuxContainerResources {
        cpu_period: wide(r.cpu_period),
        cpu_quota: r.cpu_quota.unwrap_or(0),
        cpu_shares: wide(r.cpu_shares),
        memory_limit_in_bytes: r.memory_limit_in_bytes.unwrap_or(0),
        oom_score_adj: r.oom_score_adj.unwrap_or(0),
        cpuset_cpus: r.cpuset_cpus.clone().unwrap_or_default(),
        cpuset_mems: r.cpuset_mems.clone().unwrap_or_default(),
        hugepage_limits: r
            .hugepage_limits
            .iter()
            .map(|h| pb::HugepageLimit {
                page_size: h.page_size.clone(),
                limit: h.limit,
            })
            .collect(),
        unified: unsorted(&r.unified),
        memory_swap_limit_in_bytes: r.memory_swap_limit_in_bytes.unwrap_or(0),
    }
}

/// UpdateContainerResources' `linux` field: required (a missing message is refused rather than
/// recorded as "no limits").
pub fn update_resources(linux: Option<pb::LinuxContainerResources>) -> Result<Resources> {
    let linux = linux.ok_or_else(|| {
        Error::invalid("update container resources: linux resources are required")
    })?;
    resources(linux)
}
