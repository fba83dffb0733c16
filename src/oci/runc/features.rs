//! What this node can do beyond the basics, probed once at start: the OCI runtime's own mount
//! extensions (`runc features`: `rro`, ID-mapped mounts) and the kernel's (`mount_setattr`,
//! user namespaces whose ID-mapped mounts work on the image store's filesystem).

use std::path::Path;
use std::process::{Command, Stdio};

use rustix::thread::UnshareFlags;

use crate::sandbox::userns::NsHolder;
use crate::sys::mount_api;

/// Mount extensions the OCI runtime applies itself (runc 1.2 and later).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RuntimeMountFeatures {
    /// The `rro` mount option (recursive read-only).
    pub rro: bool,
    /// ID-mapped bind mounts (`ridmap` with mount `uidMappings`/`gidMappings`).
    pub idmap: bool,
}

/// Reads `runc features` output: `rro` among `mountOptions`, and
/// `linux.mountExtensions.idmap.enabled` with `ridmap` among them. Anything unreadable means
/// no extension (runc 1.1 reports neither).
pub fn parse_runtime_features(json: &[u8]) -> RuntimeMountFeatures {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(json) else {
        return RuntimeMountFeatures::default();
    };
    let option = |name: &str| {
        v["mountOptions"]
            .as_array()
            .is_some_and(|opts| opts.iter().any(|o| o.as_str() == Some(name)))
    };
    let idmap = v["linux"]["mountExtensions"]["idmap"]["enabled"].as_bool() == Some(true);
    RuntimeMountFeatures {
        rro: option("rro"),
        idmap: idmap && option("ridmap"),
    }
}

/// Runs `<runtime> features`; a runtime without the command (or failing) has no extension.
pub fn runtime_features(runtime: &Path) -> RuntimeMountFeatures {
    match Command::new(runtime)
        .arg("features")
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => parse_runtime_features(&out.stdout),
        Ok(out) => {
            tracing::debug!(status = %out.status, "{} features failed", runtime.display());
            RuntimeMountFeatures::default()
        }
        Err(e) => {
            tracing::debug!("{} features: {e}", runtime.display());
            RuntimeMountFeatures::default()
        }
    }
}

/// Whether pods can get user namespaces here: the kernel allows them, overlayfs takes ID-mapped
/// layers (Linux 5.19), and a clone of the mount holding `path` (the image store) can be
/// ID-mapped through a fresh user namespace (what the rootfs and volumes need). `binary` is bosun, run as the namespace holder. `Err` says why not.
pub fn probe_user_namespaces(binary: &Path, path: &Path) -> Result<(), String> {
    if !Path::new("/proc/self/ns/user").exists() {
        return Err("the kernel has no user namespaces".into());
    }
    let max = std::fs::read_to_string("/proc/sys/user/max_user_namespaces").unwrap_or_default();
    if max.trim() == "0" {
        return Err("user.max_user_namespaces is 0".into());
    }
    let kernel = crate::oci::spec::seccomp::host_kernel();
    if kernel < (5, 19) {
        return Err(format!(
            "Linux {}.{}: overlayfs takes ID-mapped layers from 5.19 on",
            kernel.0, kernel.1
        ));
    }
    if !mount_api::mount_setattr_supported() {
        return Err("the kernel has no mount_setattr (Linux 5.12)".into());
    }
    let holder = NsHolder::spawn(binary, UnshareFlags::empty(), None)
        .map_err(|e| format!("create a user namespace: {e}"))?;
    holder
        .write_maps("0 65536 65536\n", "0 65536 65536\n")
        .map_err(|e| format!("map a user namespace: {e}"))?;
    let ns = holder
        .open_ns("user")
        .map_err(|e| format!("open a user namespace: {e}"))?;
    let tree = mount_api::clone_tree(path, false)
        .map_err(|e| format!("clone the mount of {}: {e}", path.display()))?;
    let attrs = mount_api::Attributes {
        read_only: false,
        idmap: Some(std::os::fd::AsFd::as_fd(&ns)),
        private: true,
    };
    mount_api::set_attributes(std::os::fd::AsFd::as_fd(&tree), &attrs)
        .map_err(|e| format!("ID-mapped mounts on {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runc_1_1_has_no_mount_extensions() {
        let json = br#"{"ociVersionMin":"1.0.0","mountOptions":["bind","rbind","ro"],
            "linux":{"namespaces":["user"]}}"#;
        assert_eq!(
            parse_runtime_features(json),
            RuntimeMountFeatures::default()
        );
        assert_eq!(parse_runtime_features(b"not json"), Default::default());
    }

    #[test]
    fn runc_1_2_has_rro_and_idmap() {
        let json = br#"{"mountOptions":["bind","rro","idmap","ridmap"],
            "linux":{"mountExtensions":{"idmap":{"enabled":true}}}}"#;
        assert_eq!(
            parse_runtime_features(json),
            RuntimeMountFeatures {
                rro: true,
                idmap: true
            }
        );
        let disabled = br#"{"mountOptions":["rro","ridmap"],
            "linux":{"mountExtensions":{"idmap":{"enabled":false}}}}"#;
        assert!(!parse_runtime_features(disabled).idmap);
    }
}
