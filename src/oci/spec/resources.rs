//! cgroup limits (`linux.resources`) and the cgroups path for either cgroup driver.

use std::collections::HashMap;

use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxResources};

use crate::config::CgroupDriver;
use crate::error::{echo, Error, Result};
use crate::oci::spec::request::Resources;

/// cpu.shares the kernel keeps as written (v1 clamps to 2..=262144 and runc then fails).
pub const SHARES: std::ops::RangeInclusive<u64> = 2..=262_144;
/// CFS period in microseconds: 1 ms to 1 s (the kernel's min and max_cfs_quota_period).
pub const PERIOD: std::ops::RangeInclusive<u64> = 1_000..=1_000_000;
/// CFS quota in microseconds (-1: none): at least 1 ms, at most the kernel's max_cfs_runtime.
pub const QUOTA: std::ops::RangeInclusive<i64> = 1_000..=(1 << 44) - 1;

/// The CPUs and memory nodes this host has online, the values a cpuset may name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostCpus {
    /// Online CPUs, e.g. `0-3` (`/sys/devices/system/cpu/online`).
    pub cpus: String,
    /// Online memory nodes, e.g. `0` (`/sys/devices/system/node/online`; `0` when absent).
    pub mems: String,
}

impl HostCpus {
    /// Reads the online CPUs and memory nodes (two small sysfs files).
    pub fn detect() -> HostCpus {
        let read = |p: &str, default: &str| {
            std::fs::read_to_string(p)
                .map(|s| s.trim().to_string())
                .ok()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| default.to_string())
        };
        HostCpus {
            cpus: read("/sys/devices/system/cpu/online", "0"),
            mems: read("/sys/devices/system/node/online", "0"),
        }
    }
}

/// A cpuset list (`0-3,6`): the numbers it names, or why it is malformed. At most 1 << 16
/// numbers (the kernel's NR_CPUS is lower still).
pub fn parse_cpuset(list: &str) -> std::result::Result<Vec<u32>, String> {
    let mut out = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        let num = |s: &str| {
            s.parse::<u32>()
                .ok()
                .filter(|_| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()))
                .ok_or_else(|| format!("{:?} is not a number", echo(s)))
        };
        let (lo, hi) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let n = num(part)?;
                (n, n)
            }
        };
        if lo > hi {
            return Err(format!("range {:?} goes backwards", echo(part)));
        }
        if out.len() + (hi - lo) as usize >= 1 << 16 {
            return Err("more than 65536 entries".into());
        }
        out.extend(lo..=hi);
    }
    Ok(out)
}

/// The limits the kernel and runc accept, so that a caller's mistake is InvalidArgument
/// naming the field and the range here rather than runc's error at create or update time.
/// Zero and "" mean unset (the CRI's convention) and pass. cpusets must name online CPUs and
/// nodes of `host` when it is given (the runtime checks before it creates or updates
/// anything; [`apply`] checks the rest again without reading the host).
pub fn validate(r: &Resources, host: Option<&HostCpus>) -> Result<()> {
    let range = |field: &str, v: String, allowed: String| {
        Error::invalid(format!("{field}: {v} is out of range ({allowed})"))
    };
    if let Some(s) = r.cpu_shares.filter(|s| *s != 0 && !SHARES.contains(s)) {
        let allowed = format!("{}-{}, or 0 for the default", SHARES.start(), SHARES.end());
        return Err(range("cpu_shares", s.to_string(), allowed));
    }
    if let Some(p) = r.cpu_period.filter(|p| *p != 0 && !PERIOD.contains(p)) {
        let allowed = format!(
            "{}-{} µs, or 0 for the default",
            PERIOD.start(),
            PERIOD.end()
        );
        return Err(range("cpu_period", p.to_string(), allowed));
    }
    if let Some(q) = r
        .cpu_quota
        .filter(|q| *q != 0 && *q != -1 && !QUOTA.contains(q))
    {
        let allowed = format!("{}-{} µs, -1 for none", QUOTA.start(), QUOTA.end());
        return Err(range("cpu_quota", q.to_string(), allowed));
    }
    let bytes = |field: &str, v: Option<i64>| match v {
        Some(v) if v < -1 => Err(range(field, v.to_string(), "bytes, -1 for none".into())),
        _ => Ok(v.filter(|v| *v > 0)),
    };
    let memory = bytes("memory_limit_in_bytes", r.memory_limit_in_bytes)?;
    let swap = bytes("memory_swap_limit_in_bytes", r.memory_swap_limit_in_bytes)?;
    if let (Some(m), Some(s)) = (memory, swap) {
        if s < m {
            return Err(Error::invalid(format!(
                "memory_swap_limit_in_bytes: {s} is below memory_limit_in_bytes {m} (it limits \
                 memory + swap)"
            )));
        }
    }
    if let Some(o) = r.oom_score_adj.filter(|o| !(-1000..=1000).contains(o)) {
        return Err(range("oom_score_adj", o.to_string(), "-1000-1000".into()));
    }
    for (field, list, online) in [
        ("cpuset_cpus", &r.cpuset_cpus, host.map(|h| h.cpus.as_str())),
        ("cpuset_mems", &r.cpuset_mems, host.map(|h| h.mems.as_str())),
    ] {
        let Some(list) = list.as_deref().filter(|l| !l.is_empty()) else {
            continue;
        };
        let wanted = parse_cpuset(list)
            .map_err(|why| Error::invalid(format!("{field} {:?}: {why}", echo(list))))?;
        let Some(online) = online else {
            continue;
        };
        let have = parse_cpuset(online).unwrap_or_default();
        if let Some(n) = wanted.iter().find(|n| !have.contains(n)) {
            return Err(Error::invalid(format!(
                "{field} {:?}: {n} is not online on this host (online: {online})",
                echo(list)
            )));
        }
    }
    for (i, h) in r.hugepage_limits.iter().enumerate() {
        let size = h.page_size.strip_suffix("B").unwrap_or_default();
        let digits = size.trim_end_matches(['K', 'M', 'G']);
        let ok = size.len() == digits.len() + 1
            && !digits.is_empty()
            && digits.bytes().all(|b| b.is_ascii_digit());
        if !ok {
            return Err(Error::invalid(format!(
                "hugepage_limits[{i}].page_size {:?}: not a page size such as 2MB or 1GB",
                echo(&h.page_size)
            )));
        }
    }
    for (k, v) in &r.unified {
        if k.is_empty() || k.contains(['/', '\0']) || k.starts_with('.') || v.contains('\0') {
            return Err(Error::invalid(format!(
                "unified {:?}: not a cgroup file name (or its value holds NUL)",
                echo(k)
            )));
        }
    }
    Ok(())
}

/// What the host's cgroup setup supports, for the limits that depend on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CgroupSupport {
    /// cgroup v2 unified hierarchy.
    pub unified: bool,
    /// The memory controller accounts swap (v1 `memory.memsw.*`, v2 `memory.swap.max`).
    pub swap: bool,
    /// The hugetlb controller is present.
    pub hugetlb: bool,
}

/// Applies the request's limits onto `res` the way containerd's WithResources does
/// (internal/cri/opts/spec_linux_opts.go): zero means unset; with a memory limit and no swap
/// limit, swap is set equal to the limit (no swapping) when swap is accounted; huge page limits
/// are skipped with a warning when the controller is absent (containerd's default
/// `tolerate_missing_hugetlb_controller`); unified files need cgroup v2.
pub fn apply(
    container: &str,
    r: &Resources,
    support: CgroupSupport,
    res: &mut LinuxResources,
) -> Result<()> {
    validate(r, None).map_err(|e| e.context(format!("container {container}")))?;
    let mut cpu = LinuxCpu::default();
    cpu.set_period(r.cpu_period.filter(|p| *p != 0));
    cpu.set_quota(r.cpu_quota.filter(|q| *q != 0));
    cpu.set_shares(r.cpu_shares.filter(|s| *s != 0));
    cpu.set_cpus(r.cpuset_cpus.clone().filter(|s| !s.is_empty()));
    cpu.set_mems(r.cpuset_mems.clone().filter(|s| !s.is_empty()));
    if cpu != LinuxCpu::default() {
        res.set_cpu(Some(cpu));
    }

    let mut mem = LinuxMemory::default();
    let limit = r.memory_limit_in_bytes.filter(|l| *l != 0);
    let swap = r.memory_swap_limit_in_bytes.filter(|s| *s != 0);
    if let Some(l) = limit {
        mem.set_limit(Some(l));
        if swap.is_none() && support.swap {
            mem.set_swap(Some(l));
        }
    }
    if let Some(s) = swap {
        if support.swap {
            mem.set_swap(Some(s));
        } else {
            tracing::debug!(
                container,
                "swap is not accounted on this host: swap limit ignored"
            );
        }
    }
    if mem != LinuxMemory::default() {
        res.set_memory(Some(mem));
    }

    if !r.hugepage_limits.is_empty() {
        if support.hugetlb {
            let limits = r
                .hugepage_limits
                .iter()
                .map(|h| {
                    let mut l = LinuxHugepageLimit::default();
                    l.set_page_size(h.page_size.clone());
                    l.set_limit(i64::try_from(h.limit).unwrap_or(i64::MAX));
                    l
                })
                .collect();
            res.set_hugepage_limits(Some(limits));
        } else {
            tracing::warn!(
                container,
                "hugetlb cgroup controller is absent: huge page limits skipped"
            );
        }
    }

    if !r.unified.is_empty() {
        if !support.unified {
            return Err(Error::invalid(format!(
                "container {container}: linux.resources.unified needs cgroup v2 (this host has v1)"
            )));
        }
        let unified: HashMap<String, String> = r
            .unified
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        res.set_unified(Some(unified));
    }
    Ok(())
}

/// The cgroups path for a container under `parent`, in the form runc expects for `driver`:
/// cgroupfs `<parent>/<id>`; systemd `<slice>:bosun:<id>` (containerd's getCgroupsPath uses
/// `cri-containerd` as the prefix).
pub fn cgroups_path(driver: CgroupDriver, parent: &str, id: &str) -> String {
    match driver {
        CgroupDriver::Systemd => {
            let slice = std::path::Path::new(parent)
                .file_name()
                .map(|s| s.to_string_lossy().into_owned())
                .filter(|s| s.ends_with(".slice"))
                .unwrap_or_else(|| "system.slice".to_string());
            format!("{slice}:bosun:{id}")
        }
        CgroupDriver::Cgroupfs => {
            let parent = if parent.is_empty() { "/bosun" } else { parent };
            format!("{}/{id}", parent.trim_end_matches('/'))
        }
    }
}

/// Checks that `path` has the shape runc expects for `driver`.
pub fn check_cgroups_path(driver: CgroupDriver, path: &str) -> Result<()> {
    let ok = match driver {
        CgroupDriver::Cgroupfs => path.starts_with('/') && !path.contains(':'),
        CgroupDriver::Systemd => {
            let parts: Vec<&str> = path.split(':').collect();
            parts.len() == 3 && parts[0].ends_with(".slice") && !parts[2].is_empty()
        }
    };
    if ok {
        Ok(())
    } else {
        Err(Error::internal(format!(
            "cgroups path {path:?} does not suit the {driver:?} cgroup driver"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;
    use crate::oci::spec::request::HugepageLimit;

    fn v1() -> CgroupSupport {
        CgroupSupport {
            unified: false,
            swap: true,
            hugetlb: true,
        }
    }

    fn apply_to(r: &Resources, support: CgroupSupport) -> Result<LinuxResources> {
        let mut res = LinuxResources::default();
        apply("c", r, support, &mut res)?;
        Ok(res)
    }

    #[test]
    fn unset_fields_leave_the_sections_out() {
        let res = apply_to(&Resources::default(), v1()).expect("apply");
        assert_eq!(res, LinuxResources::default());
        let zeros = Resources {
            cpu_period: Some(0),
            cpu_quota: Some(0),
            memory_limit_in_bytes: Some(0),
            cpuset_cpus: Some(String::new()),
            ..Default::default()
        };
        assert_eq!(
            apply_to(&zeros, v1()).expect("zeros"),
            LinuxResources::default()
        );
    }

    #[test]
    fn cpu_and_memory_map_through() {
        let r = Resources {
            cpu_period: Some(100_000),
            cpu_quota: Some(50_000),
            cpu_shares: Some(512),
            cpuset_cpus: Some("0-1".into()),
            cpuset_mems: Some("0".into()),
            memory_limit_in_bytes: Some(64 << 20),
            ..Default::default()
        };
        let res = apply_to(&r, v1()).expect("apply");
        let cpu = res.cpu().clone().expect("cpu");
        assert_eq!(
            (cpu.period(), cpu.quota(), cpu.shares()),
            (Some(100_000), Some(50_000), Some(512))
        );
        assert_eq!(
            (cpu.cpus().as_deref(), cpu.mems().as_deref()),
            (Some("0-1"), Some("0"))
        );
        let mem = res.memory().expect("memory");
        assert_eq!((mem.limit(), mem.swap()), (Some(64 << 20), Some(64 << 20)));
    }

    #[test]
    fn swap_follows_the_controller() {
        let r = Resources {
            memory_limit_in_bytes: Some(100),
            memory_swap_limit_in_bytes: Some(300),
            ..Default::default()
        };
        let mem = apply_to(&r, v1()).expect("apply").memory().expect("mem");
        assert_eq!((mem.limit(), mem.swap()), (Some(100), Some(300)));
        let no_swap = CgroupSupport {
            swap: false,
            ..v1()
        };
        let mem = apply_to(&r, no_swap).expect("apply").memory().expect("mem");
        assert_eq!((mem.limit(), mem.swap()), (Some(100), None));
        let bad = Resources {
            memory_limit_in_bytes: Some(-5),
            ..Default::default()
        };
        assert_eq!(
            apply_to(&bad, v1()).expect_err("neg").kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn hugepages_are_skipped_without_the_controller_and_unified_needs_v2() {
        let r = Resources {
            hugepage_limits: vec![HugepageLimit {
                page_size: "2MB".into(),
                limit: 4 << 20,
            }],
            ..Default::default()
        };
        let res = apply_to(&r, v1()).expect("apply");
        assert_eq!(res.hugepage_limits().as_ref().map(|h| h.len()), Some(1));
        let no_hugetlb = CgroupSupport {
            hugetlb: false,
            ..v1()
        };
        assert!(apply_to(&r, no_hugetlb)
            .expect("skip")
            .hugepage_limits()
            .is_none());

        let r = Resources {
            unified: [("memory.high".to_string(), "1000000".to_string())].into(),
            ..Default::default()
        };
        let err = apply_to(&r, v1()).expect_err("v1");
        assert!(err.message().contains("cgroup v2"), "{err}");
        let v2 = CgroupSupport {
            unified: true,
            ..v1()
        };
        let res = apply_to(&r, v2).expect("v2");
        assert_eq!(res.unified().as_ref().map(|u| u.len()), Some(1));
    }

    #[test]
    fn out_of_range_limits_are_invalid_naming_field_and_range() {
        let host = HostCpus {
            cpus: "0-1".into(),
            mems: "0".into(),
        };
        let check = |r: Resources| validate(&r, Some(&host));
        check(Resources {
            cpu_shares: Some(1024),
            cpu_period: Some(100_000),
            cpu_quota: Some(-1),
            cpuset_cpus: Some("0-1".into()),
            cpuset_mems: Some("0".into()),
            memory_limit_in_bytes: Some(64 << 20),
            memory_swap_limit_in_bytes: Some(-1),
            oom_score_adj: Some(-999),
            ..Default::default()
        })
        .expect("what the kubelet sends");
        let max = i64::MAX as u64;
        for (r, needles) in [
            (
                Resources {
                    cpu_shares: Some(max),
                    ..Default::default()
                },
                ["cpu_shares", "2-262144"],
            ),
            (
                Resources {
                    cpu_shares: Some(1),
                    ..Default::default()
                },
                ["cpu_shares", "2-262144"],
            ),
            (
                Resources {
                    cpu_quota: Some(i64::MAX),
                    ..Default::default()
                },
                ["cpu_quota", "-1"],
            ),
            (
                Resources {
                    cpu_quota: Some(-5),
                    ..Default::default()
                },
                ["cpu_quota", "1000-"],
            ),
            (
                Resources {
                    cpu_period: Some(1_000_000_000_000),
                    ..Default::default()
                },
                ["cpu_period", "1000-1000000"],
            ),
            (
                Resources {
                    cpuset_cpus: Some("9999".into()),
                    ..Default::default()
                },
                ["cpuset_cpus", "9999 is not online"],
            ),
            (
                Resources {
                    cpuset_cpus: Some("garbage".into()),
                    ..Default::default()
                },
                ["cpuset_cpus", "not a number"],
            ),
            (
                Resources {
                    cpuset_cpus: Some("1-0".into()),
                    ..Default::default()
                },
                ["cpuset_cpus", "backwards"],
            ),
            (
                Resources {
                    cpuset_mems: Some("3".into()),
                    ..Default::default()
                },
                ["cpuset_mems", "not online"],
            ),
            (
                Resources {
                    memory_swap_limit_in_bytes: Some(-5),
                    ..Default::default()
                },
                ["memory_swap_limit_in_bytes", "-5"],
            ),
            (
                Resources {
                    memory_limit_in_bytes: Some(100),
                    memory_swap_limit_in_bytes: Some(50),
                    ..Default::default()
                },
                ["memory_swap_limit_in_bytes", "below"],
            ),
            (
                Resources {
                    oom_score_adj: Some(5000),
                    ..Default::default()
                },
                ["oom_score_adj", "-1000-1000"],
            ),
        ] {
            let e = check(r).expect_err("out of range");
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
            for n in needles {
                assert!(e.message().contains(n), "{e} does not mention {n:?}");
            }
        }
        let huge = "0-".to_string() + &u32::MAX.to_string();
        assert!(parse_cpuset(&huge).is_err(), "a list too long to expand");
        assert_eq!(parse_cpuset("0-2,5").expect("list"), vec![0, 1, 2, 5]);
    }

    #[test]
    fn cgroups_paths_per_driver() {
        assert_eq!(
            cgroups_path(CgroupDriver::Cgroupfs, "/kubepods/pod1", "c1"),
            "/kubepods/pod1/c1"
        );
        assert_eq!(cgroups_path(CgroupDriver::Cgroupfs, "", "c1"), "/bosun/c1");
        assert_eq!(
            cgroups_path(
                CgroupDriver::Systemd,
                "/kubepods.slice/kubepods-pod1.slice",
                "c1"
            ),
            "kubepods-pod1.slice:bosun:c1"
        );
        assert_eq!(
            cgroups_path(CgroupDriver::Systemd, "", "c1"),
            "system.slice:bosun:c1"
        );
        check_cgroups_path(CgroupDriver::Cgroupfs, "/bosun-test/x").expect("cgroupfs");
        check_cgroups_path(CgroupDriver::Systemd, "a.slice:bosun:x").expect("systemd");
        assert!(check_cgroups_path(CgroupDriver::Cgroupfs, "a.slice:bosun:x").is_err());
        assert!(check_cgroups_path(CgroupDriver::Systemd, "/bosun/x").is_err());
    }
}
