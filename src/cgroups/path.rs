//! Where a container's or pod's cgroup lives in the hierarchy, for the cgroupfs and systemd drivers.

use crate::config::CgroupDriver;

/// The cgroup directory of a container created with `linux.cgroupsPath` `cgroups_path`
/// (see [`crate::oci::cgroups_path`]): cgroupfs paths are used as they are; systemd's
/// `<slice>:<prefix>:<name>` is the scope `<prefix>-<name>.scope` under the expanded slice, as
/// runc's systemd driver creates it. `None` for a path of the wrong shape.
pub fn container_dir(driver: CgroupDriver, cgroups_path: &str) -> Option<String> {
    match driver {
        CgroupDriver::Cgroupfs => plain(cgroups_path),
        CgroupDriver::Systemd => {
            let mut parts = cgroups_path.split(':');
            let (slice, prefix, name) = (parts.next()?, parts.next()?, parts.next()?);
            if parts.next().is_some() || name.is_empty() || name.contains('/') {
                return None;
            }
            let slice = expand_slice(if slice.is_empty() {
                "system.slice"
            } else {
                slice
            })?;
            let unit = if name.ends_with(".slice") || name.ends_with(".scope") {
                name.to_string()
            } else if prefix.is_empty() {
                format!("{name}.scope")
            } else {
                format!("{prefix}-{name}.scope")
            };
            Some(join(&slice, &unit))
        }
    }
}

/// The cgroup directory of a pod's `cgroup_parent`: a cgroupfs path, or for systemd a slice
/// name such as the kubelet's `kubepods-burstable-pod<uid>.slice` (a path is taken as is).
pub fn parent_dir(driver: CgroupDriver, parent: &str) -> Option<String> {
    if parent.is_empty() {
        return None;
    }
    match driver {
        CgroupDriver::Systemd if !parent.contains('/') => expand_slice(parent),
        _ => plain(parent),
    }
}

/// `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice` (systemd's slice nesting); `-.slice` is
/// the root. `None` for a malformed name.
pub fn expand_slice(slice: &str) -> Option<String> {
    let base = slice.strip_suffix(".slice")?;
    if base == "-" {
        return Some("/".to_string());
    }
    if base.is_empty() || base.contains('/') || base.starts_with('-') || base.ends_with('-') {
        return None;
    }
    if base.contains("--") {
        return None;
    }
    let mut out = String::new();
    let mut prefix = String::new();
    for (i, part) in base.split('-').enumerate() {
        if i > 0 {
            prefix.push('-');
        }
        prefix.push_str(part);
        out.push('/');
        out.push_str(&prefix);
        out.push_str(".slice");
    }
    Some(out)
}

/// A cgroupfs path made absolute; `None` if it climbs (`..`).
fn plain(path: &str) -> Option<String> {
    if path.split('/').any(|c| c == "..") {
        return None;
    }
    let trimmed = path.trim_end_matches('/');
    Some(if trimmed.starts_with('/') {
        trimmed.to_string()
    } else {
        format!("/{trimmed}")
    })
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroupfs_paths_are_used_as_given() {
        let d = CgroupDriver::Cgroupfs;
        assert_eq!(
            container_dir(d, "/bosun/abc").as_deref(),
            Some("/bosun/abc")
        );
        assert_eq!(
            container_dir(d, "kubepods/x/").as_deref(),
            Some("/kubepods/x")
        );
        assert_eq!(container_dir(d, "/a/../etc"), None);
        assert_eq!(
            parent_dir(d, "/kubepods/burstable/pod1").as_deref(),
            Some("/kubepods/burstable/pod1")
        );
        assert_eq!(parent_dir(d, ""), None);
    }

    #[test]
    fn systemd_scopes_sit_under_the_expanded_slice() {
        let d = CgroupDriver::Systemd;
        assert_eq!(
            container_dir(d, "kubepods-burstable-pod12.slice:bosun:abc").as_deref(),
            Some("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12.slice/bosun-abc.scope")
        );
        assert_eq!(
            container_dir(d, "system.slice:bosun:abc").as_deref(),
            Some("/system.slice/bosun-abc.scope")
        );
        assert_eq!(
            container_dir(d, ":bosun:abc").as_deref(),
            Some("/system.slice/bosun-abc.scope")
        );
        assert_eq!(container_dir(d, "/bosun/abc"), None);
        assert_eq!(container_dir(d, "a.slice:b"), None);
        assert_eq!(
            parent_dir(d, "kubepods-besteffort-pod9.slice").as_deref(),
            Some("/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod9.slice")
        );
        assert_eq!(
            parent_dir(d, "/custom/path").as_deref(),
            Some("/custom/path")
        );
    }

    #[test]
    fn malformed_slices_are_refused() {
        assert_eq!(expand_slice("-.slice").as_deref(), Some("/"));
        assert_eq!(expand_slice("a.slice").as_deref(), Some("/a.slice"));
        for bad in [
            "a",
            "-a.slice",
            "a-.slice",
            "a--b.slice",
            "a/b.slice",
            ".slice",
        ] {
            assert_eq!(expand_slice(bad), None, "{bad}");
        }
    }
}
