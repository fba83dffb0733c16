//! Namespaces (joined from the pod, new, or the host's) and the namespaced sysctls they allow.

use std::collections::HashMap;
use std::path::PathBuf;

use oci_spec::runtime::{LinuxNamespace, LinuxNamespaceType};

use crate::error::{Error, Result};
use crate::oci::spec::request::{NamespaceMode, NamespaceOptions, SandboxContext};

fn ns(typ: LinuxNamespaceType, path: Option<PathBuf>) -> LinuxNamespace {
    let mut n = LinuxNamespace::default();
    n.set_typ(typ);
    n.set_path(path);
    n
}

fn pinned(container: &str, what: &str, path: &Option<PathBuf>) -> Result<PathBuf> {
    path.clone().ok_or_else(|| {
        Error::precondition(format!(
            "container {container}: the pod has no {what} namespace to join"
        ))
    })
}

/// A pod-level namespace (network or IPC): the pod's pinned file, or none (the host's) when
/// the pod uses the host's. The container may only repeat the pod's choice: the kubelet sends
/// POD or NODE, and CONTAINER/TARGET are not defined for these namespaces.
fn pod_level(container: &str, what: &str, mode: NamespaceMode, host: bool) -> Result<bool> {
    match (mode, host) {
        (NamespaceMode::Pod, host) => Ok(host),
        (NamespaceMode::Node, true) => Ok(true),
        (NamespaceMode::Node, false) => Err(Error::invalid(format!(
            "container {container}: {what} namespace NODE needs a pod on the host {what}"
        ))),
        (m, _) => Err(Error::invalid(format!(
            "container {container}: {what} namespace mode {m:?} is not supported"
        ))),
    }
}

/// The namespace list, following containerd's WithPodNamespaces: the pod's user namespace
/// when it has one; network, IPC and UTS from the pod (UTS follows network: a host-network pod has the host's hostname); pid from the pod's
/// holder, the target container, a new one, or the host's; always a new mount namespace; a new
/// cgroup namespace on cgroup v2 unless privileged (containerd, after containers/libpod#4363).
pub fn namespaces(
    container: &str,
    opts: &NamespaceOptions,
    sandbox: &SandboxContext,
    cgroup_unified: bool,
    privileged: bool,
) -> Result<Vec<LinuxNamespace>> {
    let mut out = vec![ns(LinuxNamespaceType::Mount, None)];
    if sandbox.userns.is_some() {
        // The pod's user namespace first: its other namespaces are owned by it.
        let path = pinned(container, "user", &sandbox.user_ns)?;
        out.push(ns(LinuxNamespaceType::User, Some(path)));
    }
    if !pod_level(container, "network", opts.network, sandbox.host_network)? {
        let path = pinned(container, "network", &sandbox.net_ns)?;
        out.push(ns(LinuxNamespaceType::Network, Some(path)));
        let uts = pinned(container, "UTS", &sandbox.uts_ns)?;
        out.push(ns(LinuxNamespaceType::Uts, Some(uts)));
    }
    if !pod_level(container, "ipc", opts.ipc, sandbox.host_ipc)? {
        let path = pinned(container, "IPC", &sandbox.ipc_ns)?;
        out.push(ns(LinuxNamespaceType::Ipc, Some(path)));
    }
    match opts.pid {
        NamespaceMode::Container => out.push(ns(LinuxNamespaceType::Pid, None)),
        NamespaceMode::Pod if sandbox.host_pid => {}
        NamespaceMode::Pod => {
            let pid = sandbox.pid_ns_holder.ok_or_else(|| {
                Error::precondition(format!(
                    "container {container}: the pod has no pid namespace holder"
                ))
            })?;
            out.push(ns(LinuxNamespaceType::Pid, Some(proc_ns(pid))));
        }
        NamespaceMode::Node if sandbox.host_pid => {}
        NamespaceMode::Node => {
            return Err(Error::invalid(format!(
                "container {container}: pid namespace NODE needs a pod on the host pid namespace"
            )))
        }
        NamespaceMode::Target => {
            let pid = sandbox.target_pid.ok_or_else(|| {
                Error::invalid(format!(
                    "container {container}: pid namespace target {:?} is not running",
                    opts.target_id
                ))
            })?;
            out.push(ns(LinuxNamespaceType::Pid, Some(proc_ns(pid))));
        }
    }
    if cgroup_unified && !privileged {
        out.push(ns(LinuxNamespaceType::Cgroup, None));
    }
    Ok(out)
}

fn proc_ns(pid: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{pid}/ns/pid"))
}

/// The pod's sysctls, each checked to be namespaced and in a namespace the pod owns
/// (one set of rules for the spec and for pinning: [`crate::sandbox::sysctl::validate`]).
pub fn sysctls(
    container: &str,
    sandbox: &SandboxContext,
) -> Result<Option<HashMap<String, String>>> {
    if sandbox.sysctls.is_empty() {
        return Ok(None);
    }
    let checked = crate::sandbox::sysctl::validate(
        &sandbox.sysctls,
        !sandbox.host_network,
        !sandbox.host_ipc,
    )
    .map_err(|e| e.context(format!("container {container}")))?;
    Ok(Some(checked.into_iter().map(|(k, _, v)| (k, v)).collect()))
}

#[cfg(test)]
#[path = "namespaces_tests.rs"]
mod tests;
