//! Device nodes and the device cgroup: requested devices, and every host device when privileged.

use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxDevice, LinuxDeviceCgroup, LinuxDeviceType};
use rustix::fs::FileType;

use crate::error::{Error, Result};
use crate::oci::spec::request::DeviceRequest;

/// The nodes to create and the cgroup rules, in order (the first rule denies everything;
/// runc appends its own defaults for /dev/null, /dev/zero, ... after these).
#[derive(Debug, Clone, Default)]
pub struct DevicePlan {
    /// `linux.devices`.
    pub devices: Vec<LinuxDevice>,
    /// `linux.resources.devices`.
    pub rules: Vec<LinuxDeviceCgroup>,
}

fn rule(
    allow: bool,
    typ: Option<LinuxDeviceType>,
    major: Option<i64>,
    minor: Option<i64>,
    access: &str,
) -> LinuxDeviceCgroup {
    let mut r = LinuxDeviceCgroup::default();
    r.set_allow(allow);
    r.set_typ(typ);
    r.set_major(major);
    r.set_minor(minor);
    r.set_access(Some(access.to_string()));
    r
}

/// The node at `path` (not following a final symlink), or `None` when it is not a char or
/// block device (containerd's DeviceFromPath skips FIFOs for host devices too).
fn device_at(path: &Path) -> Result<Option<LinuxDevice>> {
    let st = rustix::fs::lstat(path)
        .map_err(|e| Error::invalid(format!("device {}: {e}", path.display())))?;
    let typ = match FileType::from_raw_mode(st.st_mode) {
        FileType::CharacterDevice => LinuxDeviceType::C,
        FileType::BlockDevice => LinuxDeviceType::B,
        _ => return Ok(None),
    };
    let mut d = LinuxDevice::default();
    d.set_path(path.to_path_buf());
    d.set_typ(typ);
    d.set_major(i64::from(rustix::fs::major(st.st_rdev)));
    d.set_minor(i64::from(rustix::fs::minor(st.st_rdev)));
    d.set_file_mode(Some(st.st_mode & 0o7777));
    d.set_uid(Some(st.st_uid));
    d.set_gid(Some(st.st_gid));
    Ok(Some(d))
}

/// Every device under `dir`, recursively, skipping what containerd's getDevices skips
/// (pkg/oci/utils_unix.go): pts, shm, fd, mqueue, LXC/LXD/udev internals and the console.
/// `container_dir` re-roots the paths (a requested directory of devices).
fn devices_under(dir: &Path, container_dir: &Path, out: &mut Vec<LinuxDevice>) -> Result<()> {
    let entries = std::fs::read_dir(dir)
        .map_err(|e| Error::internal(format!("read {}: {e}", dir.display())))?;
    let mut entries: Vec<_> = entries.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name();
        let path = e.path();
        let Ok(ft) = e.file_type() else { continue };
        if ft.is_dir() {
            let skip = ["pts", "shm", "fd", "mqueue", ".lxc", ".lxd-mounts", ".udev"];
            if !skip.iter().any(|s| name == *s) {
                devices_under(&path, &container_dir.join(&name), out)?;
            }
            continue;
        }
        if name == "console" {
            continue;
        }
        match device_at(&path) {
            Ok(Some(mut d)) => {
                d.set_path(container_dir.join(&name));
                out.push(d);
            }
            Ok(None) => {}
            // Vanished while listing: skip, as containerd does.
            Err(_) if !path.exists() => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn check_permissions(container: &str, d: &DeviceRequest) -> Result<()> {
    let p = &d.permissions;
    let ok = !p.is_empty()
        && p.chars().all(|c| matches!(c, 'r' | 'w' | 'm'))
        && ['r', 'w', 'm'].iter().all(|c| p.matches(*c).count() <= 1);
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "container {container}: device {}: permissions {p:?} must be one or more of r, w, m",
            d.host_path
        )))
    }
}

/// The device plan (containerd's WithDevices, and WithHostDevices + WithAllDevicesAllowed when
/// privileged). A requested host path is resolved through symlinks; a directory brings every
/// device below it; anything else that is not a device node is refused.
pub fn plan(
    container: &str,
    requested: &[DeviceRequest],
    privileged: bool,
    host_dev: &Path,
) -> Result<DevicePlan> {
    let mut out = DevicePlan {
        devices: Vec::new(),
        rules: vec![rule(false, None, None, None, "rwm")],
    };
    if privileged {
        devices_under(host_dev, Path::new("/dev"), &mut out.devices)?;
        out.rules = vec![rule(true, None, None, None, "rwm")];
    }
    for d in requested {
        check_permissions(container, d)?;
        let ctx = |what: String| format!("container {container}: device {}: {what}", d.host_path);
        if !d.host_path.starts_with('/') {
            return Err(Error::invalid(ctx("host_path is not absolute".into())));
        }
        let host = std::fs::canonicalize(&d.host_path)
            .map_err(|e| Error::invalid(ctx(format!("resolve: {e}"))))?;
        // containerd: an empty container path means the (resolved) host path.
        let container_path = if d.container_path.is_empty() {
            host.display().to_string()
        } else {
            d.container_path.clone()
        };
        if !container_path.starts_with('/') {
            return Err(Error::invalid(ctx(format!(
                "container_path {container_path:?} is not absolute"
            ))));
        }
        let mut found = Vec::new();
        if host.is_dir() {
            devices_under(&host, &PathBuf::from(&container_path), &mut found)?;
        } else {
            match device_at(&host).map_err(|e| e.context(ctx(String::new())))? {
                Some(mut dev) => {
                    dev.set_path(PathBuf::from(&container_path));
                    found.push(dev);
                }
                None => return Err(Error::invalid(ctx("not a device node".into()))),
            }
        }
        for dev in found {
            if !privileged {
                out.rules.push(rule(
                    true,
                    Some(dev.typ()),
                    Some(dev.major()),
                    Some(dev.minor()),
                    &d.permissions,
                ));
            }
            out.devices.retain(|x| x.path() != dev.path());
            out.devices.push(dev);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn dev(host: &str, container: &str, perms: &str) -> DeviceRequest {
        DeviceRequest {
            container_path: container.into(),
            host_path: host.into(),
            permissions: perms.into(),
        }
    }

    #[test]
    fn default_plan_denies_everything() {
        let p = plan("c", &[], false, Path::new("/dev")).expect("plan");
        assert!(p.devices.is_empty());
        assert_eq!(p.rules.len(), 1);
        assert!(!p.rules[0].allow());
        assert_eq!(p.rules[0].access().as_deref(), Some("rwm"));
    }

    #[test]
    fn a_requested_device_gets_a_node_and_a_rule() {
        let p = plan(
            "c",
            &[dev("/dev/null", "/dev/mynull", "rw")],
            false,
            Path::new("/dev"),
        )
        .expect("plan");
        assert_eq!(p.devices.len(), 1);
        let d = &p.devices[0];
        assert_eq!(d.path(), Path::new("/dev/mynull"));
        assert_eq!((d.typ(), d.major(), d.minor()), (LinuxDeviceType::C, 1, 3));
        assert_eq!(d.file_mode(), Some(0o666));
        let r = &p.rules[1];
        assert!(r.allow());
        assert_eq!((r.major(), r.minor()), (Some(1), Some(3)));
        assert_eq!(r.access().as_deref(), Some("rw"));
    }

    #[test]
    fn symlinks_are_resolved_and_non_devices_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        let link = dir.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
        let p = plan(
            "c",
            &[dev(&link.display().to_string(), "", "r")],
            false,
            Path::new("/dev"),
        )
        .expect("plan");
        assert_eq!(p.devices[0].path(), Path::new("/dev/zero"));
        assert_eq!((p.devices[0].major(), p.devices[0].minor()), (1, 5));

        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("file");
        let err = plan(
            "web",
            &[dev(&file.display().to_string(), "/dev/x", "rwm")],
            false,
            Path::new("/dev"),
        )
        .expect_err("file");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("not a device node"), "{err}");
        let err = plan(
            "web",
            &[dev("/dev/nope-nope", "/dev/x", "rwm")],
            false,
            Path::new("/dev"),
        )
        .expect_err("missing");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn permissions_are_validated() {
        for bad in ["", "rwx", "rr", "R"] {
            let err = plan(
                "c",
                &[dev("/dev/null", "/dev/null", bad)],
                false,
                Path::new("/dev"),
            )
            .expect_err(bad);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad:?}");
        }
        for good in ["r", "mrw", "wm"] {
            plan(
                "c",
                &[dev("/dev/null", "/dev/null", good)],
                false,
                Path::new("/dev"),
            )
            .expect(good);
        }
    }

    #[test]
    fn privileged_takes_every_host_device_and_allows_all() {
        let p = plan("c", &[], true, Path::new("/dev")).expect("plan");
        assert!(p.devices.iter().any(|d| d.path() == Path::new("/dev/null")));
        assert!(!p.devices.iter().any(|d| d.path().starts_with("/dev/pts")));
        assert!(!p
            .devices
            .iter()
            .any(|d| d.path() == Path::new("/dev/console")));
        assert_eq!(p.rules.len(), 1);
        assert!(p.rules[0].allow() && p.rules[0].typ().is_none());
    }
}
