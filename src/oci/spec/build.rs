//! `build_spec`: the OCI runtime spec (runc's config.json) for one CRI container.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{Linux, LinuxResources, Process, Root, Spec, User};

use crate::config::CgroupDriver;
use crate::error::{Error, Result};
use crate::image::manifest::RunConfig;
use crate::oci::spec::host::HostFacts;
use crate::oci::spec::request::{ContainerRequest, SandboxContext};
use crate::oci::spec::{
    caps, devices, mounts, namespaces, process, resources, security, user, userns,
};

/// The runtime-spec version written into config.json (what runc 1.1 implements).
pub const OCI_VERSION: &str = "1.0.2-dev";

/// Per-container settings that are not part of the CRI request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecOptions {
    /// The cgroup driver `cgroups_path` is written for.
    pub cgroup_driver: CgroupDriver,
    /// `linux.cgroupsPath` (see [`resources::cgroups_path`]); checked against the driver.
    pub cgroups_path: String,
    /// Host facts ([`HostFacts::detect`] once at start).
    pub host: HostFacts,
}

/// Builds the spec for `req` in `sandbox` from `image`'s config, with `rootfs` (absolute, the
/// mounted snapshot) as root. Unset CRI seccomp means unconfined: CRI semantics are kept (the
/// kubelet's SeccompDefault turns into an explicit RuntimeDefault before it reaches us).
///
/// Follows containerd's CRI plugin (internal/cri/server/container_create_linux.go and
/// internal/cri/opts); deviations are noted where they happen. Reads the rootfs's /etc/passwd
/// and /etc/group, stats bind-mount sources (creating missing ones as directories, like
/// containerd) and device nodes, and reads /proc/self/mountinfo for propagating mounts.
pub fn build_spec(
    req: &ContainerRequest,
    sandbox: &SandboxContext,
    image: &RunConfig,
    rootfs: &Path,
    opts: &SpecOptions,
) -> Result<Spec> {
    build(
        req,
        sandbox,
        image,
        rootfs,
        opts,
        Path::new("/dev"),
        &mounts::read_mountinfo,
    )
}

/// [`build_spec`] with the host's /dev and mountinfo as parameters (for tests).
pub(crate) fn build(
    req: &ContainerRequest,
    sandbox: &SandboxContext,
    image: &RunConfig,
    rootfs: &Path,
    opts: &SpecOptions,
    host_dev: &Path,
    mountinfo: &dyn Fn() -> Result<String>,
) -> Result<Spec> {
    let name = req.name.as_str();
    let sec = &req.linux.security;
    let host = &opts.host;
    if sec.privileged && !sandbox.privileged {
        return Err(Error::invalid(format!(
            "container {name}: privileged container in a non-privileged pod"
        )));
    }
    if !rootfs.is_absolute() {
        return Err(Error::internal(format!(
            "container {name}: rootfs {} is not absolute",
            rootfs.display()
        )));
    }
    resources::check_cgroups_path(opts.cgroup_driver, &opts.cgroups_path)
        .map_err(|e| e.context(format!("container {name}")))?;

    // Process.
    let hostname = if sandbox.hostname.is_empty() {
        &host.hostname
    } else {
        &sandbox.hostname
    };
    let ids = user::resolve_user(name, sec, image.user.as_deref(), rootfs)?;
    let cap_sets = caps::resolve(name, &sec.capabilities, sec.privileged, &host.capabilities)?;
    let mut user = User::default();
    user.set_uid(ids.uid);
    user.set_gid(ids.gid);
    user.set_additional_gids(Some(ids.additional_gids));
    let mut proc = Process::default();
    proc.set_terminal(Some(req.tty));
    proc.set_user(user);
    proc.set_args(Some(process::args(req, image)?));
    proc.set_env(Some(process::env(req, image, hostname)?));
    proc.set_cwd(PathBuf::from(process::cwd(req, image)?));
    proc.set_capabilities(Some(caps::to_linux_capabilities(&cap_sets)?));
    // containerd clears the default rlimits (containerd/cri#515): containers inherit the
    // runtime's, which inherits the daemon's.
    proc.set_rlimits(None);
    proc.set_no_new_privileges(Some(sec.no_new_privs));
    proc.set_apparmor_profile(security::apparmor_profile(
        name,
        sec,
        host.apparmor,
        host.apparmor_default_profile.as_deref(),
    )?);
    proc.set_oom_score_adj(process::oom_score_adj(
        name,
        req.linux.resources.oom_score_adj,
        host.oom_score_adj,
    )?);

    // Filesystem.
    let mount_plan = mounts::plan(
        name,
        &req.mounts,
        sandbox,
        sec.privileged,
        sec.readonly_rootfs,
        host.recursive_read_only,
        mountinfo,
    )?;
    let device_plan = devices::plan(name, &req.devices, sec.privileged, host_dev)?;
    let mut root = Root::default();
    root.set_path(rootfs.to_path_buf());
    root.set_readonly(Some(sec.readonly_rootfs));

    // Linux.
    let mut res = LinuxResources::default();
    res.set_devices(Some(device_plan.rules));
    resources::apply(name, &req.linux.resources, host.cgroup_support(), &mut res)?;
    let (masked, readonly) = security::masked_and_readonly(sec);
    let mut linux = Linux::default();
    linux.set_namespaces(Some(namespaces::namespaces(
        name,
        &sec.namespaces,
        sandbox,
        host.cgroup_unified,
        sec.privileged,
    )?));
    if let Some(u) = &sandbox.userns {
        linux.set_uid_mappings(Some(userns::to_oci(&u.uids)?));
        linux.set_gid_mappings(Some(userns::to_oci(&u.gids)?));
    }
    linux.set_sysctl(namespaces::sysctls(name, sandbox)?);
    linux.set_resources(Some(res));
    linux.set_cgroups_path(Some(PathBuf::from(&opts.cgroups_path)));
    linux.set_devices(Some(device_plan.devices).filter(|d| !d.is_empty()));
    linux.set_rootfs_propagation(mount_plan.rootfs_propagation);
    linux.set_masked_paths(Some(masked));
    linux.set_readonly_paths(Some(readonly));
    linux.set_seccomp(security::seccomp_filter(
        name,
        sec,
        &cap_sets.bounding,
        host.kernel,
    )?);

    let annotations: HashMap<String, String> = [
        ("io.kubernetes.cri.container-type", "container"),
        ("io.kubernetes.cri.container-name", name),
        ("io.kubernetes.cri.sandbox-id", sandbox.id.as_str()),
        ("io.kubernetes.cri.image-name", req.image.as_str()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();

    let mut spec = Spec::default();
    spec.set_version(OCI_VERSION.to_string());
    spec.set_root(Some(root));
    spec.set_mounts(Some(mount_plan.mounts));
    spec.set_process(Some(proc));
    // The container shares the pod's (or host's) UTS namespace: runc refuses a hostname then.
    spec.set_hostname(None);
    spec.set_annotations(Some(annotations));
    spec.set_linux(Some(linux));
    Ok(spec)
}

#[cfg(test)]
#[path = "build_tests.rs"]
mod tests;
