//! The domain checks of RunPodSandbox and CreateContainer, run before anything is made.
//!
//! Limits follow what the kubelet can send (apimachinery's validation of the Pod it comes
//! from) and what the kernel and runc accept, so a caller's mistake is InvalidArgument naming
//! the field and the allowed range instead of a half-made object or an Internal error from a
//! later step (issue 16). Every message echoes the value through [`echo`].

use std::path::{Component, Path};

use super::state::meta::{NewContainer, SandboxMeta, SandboxRequest};
use crate::config::CgroupDriver;
use crate::error::{echo, Error, Result};
use crate::oci::resources::HostCpus;
use crate::oci::NamespaceMode;

/// Pod and container names: a DNS-1123 subdomain is at most 253 bytes. (Container names from
/// the kubelet are DNS labels, but critest sends names of 60–90 bytes.)
pub const NAME_MAX: usize = 253;
/// Pod namespaces: a DNS-1123 label.
pub const NAMESPACE_MAX: usize = 63;
/// Pod uids: apiserver uids are 36-byte UUIDs and static pods' 32-byte hashes, but critest
/// sends `cri-test-uid` + a UUID (48 bytes): a label's 63 bytes.
pub const UID_MAX: usize = 63;
/// The longest path the kernel takes (PATH_MAX, with its NUL).
pub const PATH_MAX: usize = 4095;
/// The longest path component the kernel takes (NAME_MAX).
pub const COMPONENT_MAX: usize = 255;
/// All labels of one object together (apimachinery: 63-byte values, 317-byte keys).
pub const LABELS_MAX: usize = 64 << 10;
/// All annotations of one object together (apimachinery allows 256 KiB; twice that leaves
/// room for what the kubelet adds).
pub const ANNOTATIONS_MAX: usize = 512 << 10;

/// RunPodSandbox: metadata, hostname, log directory, DNS, ports, sysctls, cgroup
/// parent, labels and annotations.
pub(super) fn sandbox(req: &SandboxRequest, driver: CgroupDriver) -> Result<()> {
    let p = &req.pod;
    name("sandbox config: metadata.name", &p.name, NAME_MAX)?;
    name(
        "sandbox config: metadata.namespace",
        &p.namespace,
        NAMESPACE_MAX,
    )?;
    name("sandbox config: metadata.uid", &p.uid, UID_MAX)?;
    if req.pid == NamespaceMode::Target {
        return Err(Error::invalid(
            "sandbox config: pid namespace mode TARGET is for containers only",
        ));
    }
    let own_net = req.network != NamespaceMode::Node;
    if own_net {
        let (field, h) = if req.hostname.is_empty() {
            ("hostname (from metadata.name)", req.pod.hostname())
        } else {
            ("hostname", req.hostname.clone())
        };
        crate::sandbox::validate_hostname(&h, true)
            .map_err(|e| e.context(format!("sandbox config: {field}")))?;
    }
    if !req.log_directory.is_empty() {
        path("sandbox config: log_directory", &req.log_directory)?;
        if !Path::new(&req.log_directory).is_absolute() {
            return Err(Error::invalid(format!(
                "sandbox config: log_directory {:?}: must be an absolute path",
                echo(&req.log_directory)
            )));
        }
    }
    if let Some(d) = &req.dns {
        let dns = crate::sandbox::DnsConfig {
            servers: d.servers.clone(),
            searches: d.searches.clone(),
            options: d.options.clone(),
        };
        crate::sandbox::files::resolv_conf(&dns).map_err(|e| e.context("sandbox config"))?;
    }
    for (i, m) in req.port_mappings.iter().enumerate() {
        let field = |f: &str| format!("sandbox config: port_mappings[{i}].{f}");
        if !(1..=65535).contains(&m.container_port) {
            return Err(Error::invalid(format!(
                "{}: {} is not a port (1-65535)",
                field("container_port"),
                m.container_port
            )));
        }
        if !(0..=65535).contains(&m.host_port) {
            return Err(Error::invalid(format!(
                "{}: {} is not a port (1-65535, or 0 for none)",
                field("host_port"),
                m.host_port
            )));
        }
        if !m.host_ip.is_empty() && m.host_ip.parse::<std::net::IpAddr>().is_err() {
            return Err(Error::invalid(format!(
                "{}: {:?} is not an IP address",
                field("host_ip"),
                echo(&m.host_ip)
            )));
        }
    }
    crate::sandbox::sysctl::validate(&req.sysctls, own_net, req.ipc != NamespaceMode::Node)
        .map_err(|e| e.context("sandbox config: linux.sysctls"))?;
    cgroup_parent(&req.cgroup_parent, driver)?;
    maps("sandbox config", &req.labels, &req.annotations)
}

/// CreateContainer in the sandbox `sb`: name, log path, command, environment, working
/// directory, mount and device paths, resources, labels and annotations.
pub(super) fn container(new: &NewContainer, sb: &SandboxMeta, cpus: &HostCpus) -> Result<()> {
    let r = &new.request;
    name("container config: metadata.name", &r.name, NAME_MAX)?;
    let object = format!("container config {:?}", echo(&r.name));
    log_path(&object, &sb.request.log_directory, &new.log_path)?;
    for (i, a) in r.command.iter().enumerate() {
        no_nul(&format!("{object}: command[{i}]"), a)?;
    }
    for (i, a) in r.args.iter().enumerate() {
        no_nul(&format!("{object}: args[{i}]"), a)?;
    }
    for (i, (k, v)) in r.envs.iter().enumerate() {
        let field = format!("{object}: envs[{i}]");
        if k.is_empty() || k.contains(['=', '\0']) {
            return Err(Error::invalid(format!(
                "{field}.key {:?}: must be non-empty, without '=' or NUL",
                echo(k)
            )));
        }
        if v.contains(&0) {
            return Err(Error::invalid(format!(
                "{field}.value (of {:?}): must not contain NUL",
                echo(k)
            )));
        }
    }
    if let Some(w) = &r.working_dir {
        path(&format!("{object}: working_dir"), w)?;
    }
    for (i, m) in r.mounts.iter().enumerate() {
        path(
            &format!("{object}: mounts[{i}].container_path"),
            &m.container_path,
        )?;
        if m.image.is_none() {
            path(&format!("{object}: mounts[{i}].host_path"), &m.host_path)?;
        }
    }
    for (i, d) in r.devices.iter().enumerate() {
        path(
            &format!("{object}: devices[{i}].container_path"),
            &d.container_path,
        )?;
        path(&format!("{object}: devices[{i}].host_path"), &d.host_path)?;
    }
    let sec = &r.linux.security;
    let ids = sec.run_as_user.iter().map(|u| ("run_as_user", *u));
    let ids = ids.chain(sec.run_as_group.iter().map(|g| ("run_as_group", *g)));
    let ids = ids.chain(
        sec.supplemental_groups
            .iter()
            .map(|g| ("supplemental_groups", *g)),
    );
    for (field, v) in ids {
        if !(0..i64::from(u32::MAX)).contains(&v) {
            return Err(Error::invalid(format!(
                "{object}: security_context.{field}: {v} is not an id (0-{})",
                u32::MAX - 1
            )));
        }
    }
    crate::oci::resources::validate(&r.linux.resources, Some(cpus))
        .map_err(|e| e.context(format!("{object}: linux.resources")))?;
    maps(&object, &r.labels, &r.annotations)
}

/// A name, namespace or uid: 1..=`max` bytes of letters, digits, `-`, `.` and `_`. That is
/// every DNS-1123 name and UUID the kubelet sends, and keeps `;` and `=` out of CNI_ARGS.
pub fn name(field: &str, v: &str, max: usize) -> Result<()> {
    if v.is_empty() {
        return Err(Error::invalid(format!("{field} is required")));
    }
    if v.len() > max {
        return Err(Error::invalid(format!(
            "{field} {:?}: {} bytes, at most {max}",
            echo(v),
            v.len()
        )));
    }
    if let Some(c) = v
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_')))
    {
        return Err(Error::invalid(format!(
            "{field} {:?}: {c:?} is not allowed (letters, digits, '-', '.', '_')",
            echo(v)
        )));
    }
    Ok(())
}

/// A string the kernel gets as a C string: no NUL.
pub(super) fn no_nul(field: &str, v: &str) -> Result<()> {
    if v.contains('\0') {
        return Err(Error::invalid(format!(
            "{field} {:?}: must not contain NUL",
            echo(v)
        )));
    }
    Ok(())
}

/// A path the kernel will see: no NUL, at most [`PATH_MAX`] bytes, no component longer than
/// [`COMPONENT_MAX`].
pub fn path(field: &str, v: &str) -> Result<()> {
    no_nul(field, v)?;
    if v.len() > PATH_MAX {
        return Err(Error::invalid(format!(
            "{field} {:?}: {} bytes, at most {PATH_MAX}",
            echo(v),
            v.len()
        )));
    }
    if let Some(c) = v.split('/').find(|c| c.len() > COMPONENT_MAX) {
        return Err(Error::invalid(format!(
            "{field} {:?}: a component of {} bytes, at most {COMPONENT_MAX}",
            echo(v),
            c.len()
        )));
    }
    Ok(())
}

/// The container's log file: the CRI joins `log_directory` and `log_path`. With a directory,
/// `log_path` must be relative and stay below it (no `..`: the monitor opens the file as root,
/// and `Path::join` of an absolute path would replace the directory); without one it must be
/// absolute.
pub fn log_path(object: &str, dir: &str, log_path: &str) -> Result<()> {
    if log_path.is_empty() {
        return Ok(());
    }
    let field = format!("{object}: log_path");
    path(&field, log_path)?;
    let p = Path::new(log_path);
    if dir.is_empty() {
        if !p.is_absolute() {
            return Err(Error::invalid(format!(
                "{field} {:?}: is relative and the sandbox has no log_directory",
                echo(log_path)
            )));
        }
        return Ok(());
    }
    let below = p
        .components()
        .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
    if !below || !p.components().any(|c| matches!(c, Component::Normal(_))) {
        return Err(Error::invalid(format!(
            "{field} {:?}: must be a relative file path inside the sandbox's log_directory \
             (no '..', not absolute)",
            echo(log_path)
        )));
    }
    path(
        &format!("{field} (joined to log_directory)"),
        &format!("{dir}/{log_path}"),
    )
}

/// `linux.cgroup_parent`: no NUL, and of the driver's form (`cgroups::path::check_parent`:
/// an absolute path that does not climb for cgroupfs, a slice or its expanded path for systemd).
fn cgroup_parent(parent: &str, driver: CgroupDriver) -> Result<()> {
    if parent.is_empty() {
        return Ok(());
    }
    let field = "sandbox config: linux.cgroup_parent";
    path(field, parent)?;
    crate::cgroups::path::check_parent(driver, parent)
        .map_err(|e| Error::invalid(format!("{field} {e}")))
}

/// The total size of labels and of annotations.
fn maps(
    object: &str,
    labels: &std::collections::BTreeMap<String, String>,
    annotations: &std::collections::BTreeMap<String, String>,
) -> Result<()> {
    for (field, m, max) in [
        ("labels", labels, LABELS_MAX),
        ("annotations", annotations, ANNOTATIONS_MAX),
    ] {
        let size: usize = m.iter().map(|(k, v)| k.len() + v.len()).sum();
        if size > max {
            return Err(Error::invalid(format!(
                "{object}: {field}: {size} bytes in all, at most {max}"
            )));
        }
    }
    Ok(())
}
