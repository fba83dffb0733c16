//! A new container's bundle: its checks against the pod and the node, then (blocking) the
//! rootfs (ID-mapped layers in a pod with its own user namespace), the spec, the mounts staged
//! for what runc cannot do, and `config.json`.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};

use super::rootfs;
use super::state::meta::SandboxMeta;
use super::state::status::UserIds;
use crate::error::{Error, Result, ResultExt};
use crate::image::manifest::RunConfig;
use crate::oci::mounts::check_recursive_read_only;
use crate::oci::stage::{self, IdmapNamespaces};
use crate::oci::{
    build_spec, userns, ContainerRequest, HostFacts, SandboxContext, SpecOptions, UserNamespaceMode,
};
use crate::store::atomic::write_atomic_nosync;
use crate::store::space::NameFs;

/// Checks `req` against its pod and this node before anything is made: its user namespace
/// must be the pod's (unset means the pod's), ID-mapped mounts well formed, recursive
/// read-only mounts read-only and private, and what they need available here.
pub fn check(sandbox: &SandboxMeta, req: &ContainerRequest, host: &HostFacts) -> Result<()> {
    let object = format!("container config {:?}", req.name);
    let pod = sandbox.request.userns.as_ref();
    let field = format!("{object}: linux.security_context.namespace_options.userns_options");
    match (&req.linux.security.namespaces.user, pod) {
        (None, _) | (Some(UserNamespaceMode::Node), None) => {}
        (Some(UserNamespaceMode::Pod(mine)), Some(pod)) if mine == pod => {}
        (Some(UserNamespaceMode::Pod(_)), Some(_)) => {
            return Err(Error::invalid(format!(
                "{field}: the mappings differ from the pod's (containers share the pod's user \
                 namespace)"
            )))
        }
        (Some(UserNamespaceMode::Pod(_)), None) => {
            return Err(Error::invalid(format!(
                "{field}: mode POD, but the pod has no user namespace of its own"
            )))
        }
        (Some(UserNamespaceMode::Node), Some(_)) => {
            return Err(Error::invalid(format!(
                "{field}: mode NODE, but the pod has its own user namespace"
            )))
        }
    }
    for (i, m) in req.mounts.iter().enumerate() {
        let field = format!("{object}: mounts[{i}]");
        userns::check_mount(&field, &m.uid_mappings, &m.gid_mappings)?;
        if m.recursive_read_only {
            check_recursive_read_only(&field, m, host.recursive_read_only)?;
        }
    }
    Ok(())
}

/// What [`prepare`] needs besides the request.
pub struct Prepare<'a> {
    /// The image's layer directories, top first.
    pub lower: &'a [PathBuf],
    /// The container's writable layer directory.
    pub rw: &'a Path,
    /// The container's volatile directory (bundle, stage).
    pub dir: &'a Path,
    /// The pod's sandbox context.
    pub sandbox: &'a SandboxContext,
    /// The image config.
    pub image: &'a RunConfig,
    /// Spec options (with the host facts).
    pub opts: &'a SpecOptions,
    /// bosun, run as a user namespace holder for mounts with other mappings than the pod's.
    pub binary: &'a Path,
}

/// Mounts the rootfs, builds the spec, stages the mounts runc cannot make and writes
/// `config.json`; returns the process identity. Blocking. What is staged stays until
/// [`stage::unstage`] (after `runc create`, or in the container's teardown).
pub fn prepare(req: &ContainerRequest, p: &Prepare<'_>) -> Result<UserIds> {
    // Out of space, what is not the writable layer's (named by the rootfs) is the state dir's.
    prepare_in(req, p).name_fs(p.dir)
}

fn prepare_in(req: &ContainerRequest, p: &Prepare<'_>) -> Result<UserIds> {
    let bundle = super::state::paths::bundle(p.dir);
    let rootfs = super::state::paths::rootfs(p.dir);
    let stage_dir = stage::stage_dir(p.dir);
    std::fs::create_dir_all(&bundle).ctx(|| format!("create {}", bundle.display()))?;
    let pod_ns = match (&p.sandbox.userns, &p.sandbox.user_ns) {
        (Some(u), Some(path)) => Some((u, open_ns(path)?)),
        (Some(_), None) => {
            return Err(Error::precondition(
                "the pod's user namespace is gone (sandbox not ready?)",
            ))
        }
        _ => None,
    };
    match &pod_ns {
        Some((u, fd)) => {
            let owner = u
                .host_root()
                .ok_or_else(|| Error::invalid("the pod's user namespace does not map root"))?;
            rootfs::mount_idmapped(p.lower, p.rw, &rootfs, fd.as_fd(), owner, &stage_dir)?;
        }
        None => rootfs::mount(p.lower, p.rw, &rootfs)?,
    }
    let mut spec = build_spec(req, p.sandbox, p.image, &rootfs, p.opts)?;
    let mut idmaps =
        IdmapNamespaces::new(pod_ns.as_ref().map(|(u, fd)| (*u, fd.as_fd())), p.binary);
    let staged = stage::stage_mounts(
        &mut spec,
        p.opts.host.runtime_mounts,
        &stage_dir,
        &mut idmaps,
    )?;
    if staged > 0 {
        tracing::debug!(container = %req.name, staged, "mounts staged on the host");
    }
    let json = serde_json::to_vec_pretty(&spec)
        .map_err(|e| Error::internal(format!("encode config.json: {e}")))?;
    // The bundle lives in the state dir: after a power cut its container is gone, so a
    // rename (no fsync, ~4 ms less per CreateContainer here) is all it needs.
    write_atomic_nosync(&bundle.join("config.json"), &json)?;
    Ok(spec
        .process()
        .as_ref()
        .map(|p| UserIds {
            uid: p.user().uid(),
            gid: p.user().gid(),
            groups: p.user().additional_gids().clone().unwrap_or_default(),
        })
        .unwrap_or_default())
}

/// Opens a pinned namespace file.
fn open_ns(path: &Path) -> Result<OwnedFd> {
    rustix::fs::open(path, OFlags::RDONLY | OFlags::CLOEXEC, Mode::empty())
        .ctx(|| format!("open {}", path.display()))
}

/// Rewrites the `linux.resources` of the bundle's `config.json` in container dir `dir` with
/// `change` (UpdateContainerResources on a created container: runc makes its cgroup from
/// them at start). Blocking; a rename like the first write.
pub fn update_resources(
    dir: &Path,
    change: impl FnOnce(&mut oci_spec::runtime::LinuxResources) -> Result<()>,
) -> Result<()> {
    let path = super::state::paths::bundle(dir).join("config.json");
    let text = std::fs::read(&path).ctx(|| format!("read {}", path.display()))?;
    let mut spec: oci_spec::runtime::Spec = serde_json::from_slice(&text)
        .map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
    let mut linux = spec.linux().clone().unwrap_or_default();
    let mut resources = linux.resources().clone().unwrap_or_default();
    change(&mut resources)?;
    linux.set_resources(Some(resources));
    spec.set_linux(Some(linux));
    let json = serde_json::to_vec_pretty(&spec)
        .map_err(|e| Error::internal(format!("encode config.json: {e}")))?;
    write_atomic_nosync(&path, &json)
}
