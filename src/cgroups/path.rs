//! Where a container's or pod's cgroup lives in the hierarchy, for the cgroupfs and systemd drivers.

use crate::cgroups::CgroupDriver;

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

/// The cgroup parent of pods that name none when the config names none either: a cgroup of
/// bosun's own beside the kubelet's (`/bosun`), or its own slice under systemd.
pub fn default_parent(driver: CgroupDriver) -> &'static str {
    match driver {
        CgroupDriver::Cgroupfs => "/bosun",
        CgroupDriver::Systemd => "bosun.slice",
    }
}

/// Checks a pod's cgroup parent against the driver, as the kubelet sends it in either form:
/// cgroupfs wants an absolute path (`/kubepods/burstable/pod<uid>`) that does not climb;
/// systemd a slice name (`kubepods-burstable-pod<uid>.slice`) or that slice's expanded path
/// (`/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid>.slice`, what the
/// kubelet's systemd cgroup manager names). Empty is accepted (the default parent). The error
/// says what is wrong, quoting at most a short prefix of `parent`.
pub fn check_parent(driver: CgroupDriver, parent: &str) -> Result<(), String> {
    if parent.is_empty() {
        return Ok(());
    }
    let shown = prefix(parent);
    if parent.len() > MAX_PARENT || parent.chars().any(|c| c.is_control()) {
        return Err(format!(
            "{shown:?} is not a cgroup path (at most {MAX_PARENT} printable characters)"
        ));
    }
    match driver {
        CgroupDriver::Cgroupfs => {
            if !parent.starts_with('/') || parent.contains(':') {
                return Err(format!(
                    "{shown:?}: the cgroupfs driver needs an absolute path such as \
                     /kubepods/pod<uid> (is the kubelet's cgroupDriver systemd? this runtime's \
                     is cgroupfs)"
                ));
            }
            if parent.split('/').any(|c| c == ".." || c == ".") {
                return Err(format!(
                    "{shown:?}: a cgroup path may not contain '.' or '..'"
                ));
            }
            Ok(())
        }
        CgroupDriver::Systemd => {
            let name = parent.rsplit('/').next().unwrap_or_default();
            let Some(expanded) = expand_slice(name).filter(|_| name != "-.slice") else {
                return Err(format!(
                    "{shown:?}: the systemd driver needs a slice such as \
                     kubepods-burstable-pod<uid>.slice (is the kubelet's cgroupDriver cgroupfs? \
                     this runtime's is systemd)"
                ));
            };
            if parent.contains('/') && parent.trim_end_matches('/') != expanded {
                return Err(format!(
                    "{shown:?}: not where systemd puts slice {name} (that is {expanded})"
                ));
            }
            Ok(())
        }
    }
}

/// At most the first 64 characters of `s` (errors echo no more of what they were sent).
fn prefix(s: &str) -> String {
    match s.char_indices().nth(64) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

/// Longest cgroup parent accepted (PATH_MAX less room for the container's own name).
const MAX_PARENT: usize = 2048;

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
    fn cgroupfs_parents_are_absolute_paths_that_do_not_climb() {
        let d = CgroupDriver::Cgroupfs;
        for ok in ["", "/kubepods/burstable/pod1", "/bosun", "/a.slice"] {
            assert_eq!(check_parent(d, ok), Ok(()), "{ok}");
        }
        for bad in [
            "kubepods",
            "kubepods-pod1.slice",
            "/a/../b",
            "/a/./b",
            "/a:b",
            "/a\nb",
        ] {
            assert!(check_parent(d, bad).is_err(), "{bad}");
        }
        let e = check_parent(d, "kubepods-burstable-pod1.slice").expect_err("slice");
        assert!(e.contains("cgroupfs"), "{e}");
        let long = format!("/{}", "x".repeat(5000));
        let e = check_parent(d, &long).expect_err("long");
        assert!(e.len() < 200, "errors echo a short prefix: {e}");
    }

    #[test]
    fn systemd_parents_are_slices_by_name_or_by_their_path() {
        let d = CgroupDriver::Systemd;
        for ok in [
            "",
            "kubepods-burstable-pod1.slice",
            "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1.slice",
            "system.slice",
            "/system.slice",
        ] {
            assert_eq!(check_parent(d, ok), Ok(()), "{ok}");
        }
        for bad in [
            "/kubepods/burstable/pod1",
            "kubepods",
            "-.slice",
            "a--b.slice",
            "/kubepods.slice/kubepods-burstable-pod1.slice",
        ] {
            assert!(check_parent(d, bad).is_err(), "{bad}");
        }
        let e = check_parent(d, "/x.slice/y.slice").expect_err("mismatch");
        assert!(e.contains("/y.slice"), "{e}");
        let e = check_parent(d, "/kubepods/pod1").expect_err("path");
        assert!(e.contains("systemd"), "{e}");
    }

    #[test]
    fn each_driver_has_a_default_parent_it_accepts() {
        for d in [CgroupDriver::Cgroupfs, CgroupDriver::Systemd] {
            assert_eq!(check_parent(d, default_parent(d)), Ok(()));
        }
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
