//! cgroup limits (`linux.resources`) and the cgroups path for either cgroup driver.

use std::collections::HashMap;

use oci_spec::runtime::{LinuxCpu, LinuxHugepageLimit, LinuxMemory, LinuxResources};

use crate::config::CgroupDriver;
use crate::error::{Error, Result};
use crate::oci::request::Resources;

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
        if l < 0 && l != -1 {
            return Err(Error::invalid(format!(
                "container {container}: memory_limit_in_bytes {l} is negative"
            )));
        }
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
    use crate::oci::request::HugepageLimit;

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
