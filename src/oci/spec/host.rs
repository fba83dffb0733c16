//! Facts about the host the spec depends on, detected once at daemon start.

use std::path::{Path, PathBuf};

use rustix::thread::UnshareFlags;

use crate::error::Result;
use crate::oci::runc::features::{self, RuntimeMountFeatures};
use crate::oci::spec::resources::CgroupSupport;
use crate::oci::spec::{caps, process, seccomp};
use crate::sandbox::userns::NsHolder;
use crate::sys::mount_api;

/// cgroup2's filesystem magic (`statfs(2)`).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;

/// What the spec builder needs to know about the host and the daemon itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFacts {
    /// The daemon's own oom_score_adj: containers are never given less (see
    /// `process::oom_score_adj`).
    pub oom_score_adj: i32,
    /// The daemon's effective capabilities (`CAP_*`): what privileged and `add: [ALL]` mean.
    pub capabilities: Vec<String>,
    /// /sys/fs/cgroup is cgroup v2.
    pub cgroup_unified: bool,
    /// The memory controller accounts swap.
    pub swap_accounting: bool,
    /// The hugetlb controller is available.
    pub hugetlb: bool,
    /// AppArmor is enabled (`/sys/module/apparmor/parameters/enabled` is `Y`).
    pub apparmor: bool,
    /// Name of the loaded runtime-default AppArmor profile; `None` until the daemon loads one
    /// ([`crate::oci::apparmor::load_default`] at start).
    pub apparmor_default_profile: Option<String>,
    /// How the runtime-default profile was loaded, or why there is none (Status says it).
    pub apparmor_message: String,
    /// Mounts can be made recursively read-only: by the OCI runtime (`rro`, runc ≥ 1.2) or
    /// staged on the host with `mount_setattr` (Linux 5.12).
    pub recursive_read_only: bool,
    /// Pods can have user namespaces (the kernel allows them and ID-maps the image store).
    pub user_namespaces: bool,
    /// Why pods cannot have user namespaces, when `user_namespaces` is false.
    pub user_namespaces_why: String,
    /// The mount extensions the OCI runtime applies itself; the others are staged on the host.
    pub runtime_mounts: RuntimeMountFeatures,
    /// Kernel `(major, minor)` (seccomp `minKernel` conditions).
    pub kernel: (u32, u32),
    /// The node's hostname (`HOSTNAME` for pods that do not name one).
    pub hostname: String,
    /// CRIU, when `criu check` passed at start: containers can be checkpointed.
    pub criu: Option<PathBuf>,
    /// Why containers cannot be checkpointed, when `criu` is `None`.
    pub criu_why: String,
}

impl Default for HostFacts {
    /// Conservative facts for tests: cgroup v1 with swap, no AppArmor, a current kernel, the
    /// capabilities of root.
    fn default() -> Self {
        HostFacts {
            oom_score_adj: 0,
            capabilities: caps::ALL_CAPABILITIES
                .iter()
                .map(|c| c.to_string())
                .collect(),
            cgroup_unified: false,
            swap_accounting: true,
            hugetlb: false,
            apparmor: false,
            apparmor_default_profile: None,
            apparmor_message: "not probed".to_string(),
            recursive_read_only: false,
            user_namespaces: false,
            user_namespaces_why: "not probed".to_string(),
            runtime_mounts: RuntimeMountFeatures::default(),
            kernel: (6, 1),
            hostname: "node".to_string(),
            criu: None,
            criu_why: "not probed".to_string(),
        }
    }
}

impl HostFacts {
    /// Reads the facts from /proc and /sys. The mount extensions and user namespaces are left
    /// off ([`HostFacts::probe_extensions`] sets them), `apparmor_default_profile` too (the
    /// AppArmor loader's).
    pub fn detect() -> Result<HostFacts> {
        let unified = rustix::fs::statfs("/sys/fs/cgroup")
            .map(|s| s.f_type as u64 == CGROUP2_SUPER_MAGIC)
            .unwrap_or(false);
        let own_v2 = std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("0::").map(|p| p.trim().to_string()))
            })
            .unwrap_or_else(|| "/".to_string());
        let (swap, hugetlb) = if unified {
            let own = Path::new("/sys/fs/cgroup").join(own_v2.trim_start_matches('/'));
            let controllers =
                std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers").unwrap_or_default();
            (
                own.join("memory.swap.max").exists(),
                controllers.split_whitespace().any(|c| c == "hugetlb"),
            )
        } else {
            (
                Path::new("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes").exists(),
                Path::new("/sys/fs/cgroup/hugetlb").is_dir(),
            )
        };
        let apparmor = std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
            .is_ok_and(|s| s.trim_start().starts_with('Y'));
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
        Ok(HostFacts {
            oom_score_adj: process::daemon_oom_score_adj()?,
            capabilities: caps::current_capabilities()?,
            cgroup_unified: unified,
            swap_accounting: swap,
            hugetlb,
            apparmor,
            apparmor_default_profile: None,
            apparmor_message: if apparmor {
                "not loaded yet".to_string()
            } else {
                "AppArmor is not enabled on this host: containers run unconfined".to_string()
            },
            recursive_read_only: false,
            user_namespaces: false,
            user_namespaces_why: "not probed".to_string(),
            runtime_mounts: RuntimeMountFeatures::default(),
            kernel: seccomp::host_kernel(),
            hostname,
            criu: None,
            criu_why: "not probed".to_string(),
        })
    }

    /// Asks the OCI runtime (`runtime features`) and the kernel what they can do for recursive
    /// read-only mounts and user namespaces; `binary` (bosun) holds a probe user namespace and
    /// `store` is where image layers live (the rootfs of a user-namespaced pod ID-maps them).
    pub fn probe_extensions(&mut self, runtime: &Path, binary: &Path, store: &Path) {
        self.runtime_mounts = features::runtime_features(runtime);
        self.recursive_read_only =
            self.runtime_mounts.rro || crate::sys::mount_api::mount_setattr_supported();
        match crate::oci::runc::checkpoint::probe_criu() {
            Ok(criu) => {
                self.criu = Some(criu);
                self.criu_why.clear();
            }
            Err(why) => self.criu_why = why,
        }
        match probe_user_namespaces(binary, store) {
            Ok(()) => {
                self.user_namespaces = true;
                self.user_namespaces_why.clear();
            }
            Err(why) => {
                self.user_namespaces = false;
                self.user_namespaces_why = why;
            }
        }
    }

    /// The cgroup features resources depend on.
    pub fn cgroup_support(&self) -> CgroupSupport {
        CgroupSupport {
            unified: self.cgroup_unified,
            swap: self.swap_accounting,
            hugetlb: self.hugetlb,
        }
    }
}

/// The first executable file named `name` in `$PATH` (or the usual sbin/bin dirs).
pub fn find_in_path(name: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")
        .unwrap_or_else(|| "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
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
    fn find_in_path_finds_executables_only() {
        assert!(find_in_path("sh").is_some_and(|p| p.is_absolute()));
        assert_eq!(find_in_path("no-such-binary-bosun"), None);
    }

    #[test]
    fn detect_reads_this_host() {
        let f = HostFacts::detect().expect("detect");
        assert!(f.capabilities.iter().all(|c| c.starts_with("CAP_")));
        assert!(f.kernel.0 >= 4, "{:?}", f.kernel);
        assert!((-1000..=1000).contains(&f.oom_score_adj));
        assert!(!f.hostname.is_empty());
    }
}
