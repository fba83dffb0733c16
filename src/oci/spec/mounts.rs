//! The spec's mounts: kernel filesystems, the pod's files (/etc/hosts, /etc/hostname, /etc/resolv.conf, /dev/shm) and the request's bind mounts, ordered parents first.

use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

use oci_spec::runtime::Mount;

use crate::error::{Error, ErrorKind, Result};
use crate::oci::spec::request::{MountRequest, Propagation, SandboxContext};
use crate::oci::spec::userns;

/// The mounts and the rootfs propagation they need.
#[derive(Debug, Clone, Default)]
pub struct MountPlan {
    /// In mount order.
    pub mounts: Vec<Mount>,
    /// `rslave` or `rshared` when a bind mount propagates from the host; `None` keeps runc's.
    pub rootfs_propagation: Option<String>,
}

fn mount(dest: &str, typ: &str, source: &str, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(dest));
    m.set_typ(Some(typ.to_string()));
    m.set_source(Some(PathBuf::from(source)));
    m.set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

/// containerd's default mounts (pkg/oci/mounts.go, without /run as the CRI plugin drops it,
/// plus the cgroup mount of internal/cri/opts/spec_linux_opts.go). sysfs and cgroupfs are
/// read-only unless the container is privileged (WithPrivileged: WithWriteableSysfs/Cgroupfs).
pub fn default_mounts(privileged: bool) -> Vec<Mount> {
    let ro = if privileged { "rw" } else { "ro" };
    vec![
        mount("/proc", "proc", "proc", &["nosuid", "noexec", "nodev"]),
        mount(
            "/dev",
            "tmpfs",
            "tmpfs",
            &["nosuid", "strictatime", "mode=755", "size=65536k"],
        ),
        mount(
            "/dev/pts",
            "devpts",
            "devpts",
            &[
                "nosuid",
                "noexec",
                "newinstance",
                "ptmxmode=0666",
                "mode=0620",
                "gid=5",
            ],
        ),
        mount(
            "/dev/shm",
            "tmpfs",
            "shm",
            &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"],
        ),
        mount(
            "/dev/mqueue",
            "mqueue",
            "mqueue",
            &["nosuid", "noexec", "nodev"],
        ),
        mount("/sys", "sysfs", "sysfs", &["nosuid", "noexec", "nodev", ro]),
        mount(
            "/sys/fs/cgroup",
            "cgroup",
            "cgroup",
            &["nosuid", "noexec", "nodev", "relatime", ro],
        ),
    ]
}

/// Lexically cleans an absolute path (`/a/./b/../c/` → `/a/c`), like Go's filepath.Clean.
pub fn clean_path(p: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in p.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

fn depth(p: &str) -> usize {
    if p == "/" {
        0
    } else {
        p.matches('/').count()
    }
}

/// The pod's files as bind mounts (containerd's linuxContainerMounts): skipped when the
/// request mounts the same path, or when the sandbox has no such file. /dev/shm is the host's
/// with host IPC, else the pod's.
fn pod_mounts(sandbox: &SandboxContext, readonly_rootfs: bool) -> Vec<MountRequest> {
    let shm = if sandbox.host_ipc {
        Some(PathBuf::from("/dev/shm"))
    } else {
        sandbox.shm_path.clone()
    };
    let files = [
        ("/etc/hostname", &sandbox.hostname_path, readonly_rootfs),
        ("/etc/hosts", &sandbox.hosts_path, readonly_rootfs),
        (
            "/etc/resolv.conf",
            &sandbox.resolv_conf_path,
            readonly_rootfs,
        ),
        ("/dev/shm", &shm, false),
    ];
    files
        .into_iter()
        .filter_map(|(dest, host, readonly)| {
            let host = host.as_ref()?;
            if !host.exists() {
                let path = host.display();
                tracing::debug!(sandbox = %sandbox.id, %path, "pod file missing: not mounted");
                return None;
            }
            Some(MountRequest {
                container_path: dest.to_string(),
                host_path: host.display().to_string(),
                readonly,
                ..Default::default()
            })
        })
        .collect()
}

/// Builds every mount: defaults not overridden by a supplied mount (and none under /dev when
/// /dev itself is supplied), then the request's and the pod's bind mounts sorted by depth so
/// a parent is mounted before its children (containerd's orderedMounts, stable).
pub fn plan(
    container: &str,
    requested: &[MountRequest],
    sandbox: &SandboxContext,
    privileged: bool,
    readonly_rootfs: bool,
    rro_supported: bool,
    mountinfo: &dyn Fn() -> Result<String>,
) -> Result<MountPlan> {
    let mut binds: Vec<(String, &MountRequest)> = Vec::new();
    for m in requested {
        if let Some(image) = &m.image {
            return Err(Error::unimplemented(format!(
                "container {container}: mount {}: image volumes ({image}) are not supported",
                m.container_path
            )));
        }
        if !m.container_path.starts_with('/') {
            return Err(Error::invalid(format!(
                "container {container}: mount container_path {:?} is not absolute",
                m.container_path
            )));
        }
        if m.host_path.is_empty() || !m.host_path.starts_with('/') {
            return Err(Error::invalid(format!(
                "container {container}: mount {}: host_path {:?} is not absolute",
                m.container_path, m.host_path
            )));
        }
        let dest = clean_path(&m.container_path);
        if dest == "/" {
            return Err(Error::invalid(format!(
                "container {container}: mount {:?} would cover the root filesystem",
                m.container_path
            )));
        }
        binds.push((dest, m));
    }
    let pod = pod_mounts(sandbox, readonly_rootfs);
    for m in &pod {
        if !binds.iter().any(|(dest, _)| *dest == m.container_path) {
            binds.push((m.container_path.clone(), m));
        }
    }
    binds.sort_by_key(|(dest, _)| depth(dest));

    let supplied = |d: &str| binds.iter().any(|(dest, _)| dest == d);
    let mut out = MountPlan::default();
    for m in default_mounts(privileged) {
        let dest = m.destination().display().to_string();
        if supplied(&dest) || (supplied("/dev") && dest.starts_with("/dev/")) {
            continue;
        }
        out.mounts.push(m);
    }
    for (dest, m) in binds {
        let ctx = |what: &str| format!("container {container}: mount {dest}: {what}");
        let source = host_source(&m.host_path).map_err(|e| e.context(ctx("host path")))?;
        let mut options = vec!["rbind".to_string()];
        match m.propagation {
            Propagation::Private => options.push("rprivate".into()),
            Propagation::HostToContainer => {
                ensure_propagation(&source, &mountinfo()?, false)
                    .map_err(|e| Error::precondition(ctx(&e)))?;
                options.push("rslave".into());
                if out.rootfs_propagation.as_deref() != Some("rshared") {
                    out.rootfs_propagation = Some("rslave".into());
                }
            }
            Propagation::Bidirectional => {
                ensure_propagation(&source, &mountinfo()?, true)
                    .map_err(|e| Error::precondition(ctx(&e)))?;
                options.push("rshared".into());
                out.rootfs_propagation = Some("rshared".into());
            }
        }
        if m.recursive_read_only {
            check_recursive_read_only(
                &format!("container {container}: mount {dest}"),
                m,
                rro_supported,
            )?;
            options.push("rro".into());
        } else {
            options.push(if m.readonly { "ro" } else { "rw" }.into());
        }
        let mut bind = Mount::default();
        if !m.uid_mappings.is_empty() || !m.gid_mappings.is_empty() {
            userns::check_mount(&ctx("mapping"), &m.uid_mappings, &m.gid_mappings)?;
            // Recursive, like the bind itself (runc ≥ 1.2 applies it; else it is staged).
            options.push("ridmap".into());
            bind.set_uid_mappings(Some(userns::to_oci(&m.uid_mappings)?));
            bind.set_gid_mappings(Some(userns::to_oci(&m.gid_mappings)?));
        }
        bind.set_destination(PathBuf::from(&dest));
        bind.set_typ(Some("bind".into()));
        bind.set_source(Some(source));
        bind.set_options(Some(options));
        out.mounts.push(bind);
    }
    Ok(out)
}

/// The rules of a recursive read-only mount (CRI Mount.recursive_read_only, as containerd
/// checks them): it must be read-only and private (InvalidArgument), and the node must be able
/// to make one (FailedPrecondition). `field` names the mount.
pub fn check_recursive_read_only(field: &str, m: &MountRequest, supported: bool) -> Result<()> {
    if !m.readonly {
        return Err(Error::invalid(format!(
            "{field}: recursive_read_only needs readonly (it is false)"
        )));
    }
    if m.propagation != Propagation::Private {
        return Err(Error::invalid(format!(
            "{field}: recursive_read_only needs private propagation (it is {:?})",
            m.propagation
        )));
    }
    if !supported {
        return Err(Error::precondition(format!(
            "{field}: recursive_read_only: neither the OCI runtime nor the kernel can make \
             recursive read-only mounts here"
        )));
    }
    Ok(())
}

/// The host side of a bind mount: created as a directory (0755) when missing, as containerd
/// does, then with symlinks resolved.
fn host_source(host: &str) -> Result<PathBuf> {
    let path = Path::new(host);
    match std::fs::symlink_metadata(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o755)
                .create(path)
                .map_err(|e| Error::internal(format!("create {host}: {e}")))?;
        }
        Err(e) => return Err(Error::internal(format!("stat {host}: {e}"))),
    }
    std::fs::canonicalize(path).map_err(|e| {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::InvalidArgument,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, format!("resolve {host}: {e}"))
    })
}

/// Decodes mountinfo's octal escapes (`\040` is a space).
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount point holding `path` and its optional fields (`shared:N`, `master:N`), from
/// /proc/self/mountinfo text: the longest matching mount point, the last one when stacked.
pub fn lookup_mount(path: &Path, mountinfo: &str) -> Option<(PathBuf, Vec<String>)> {
    let mut best: Option<(PathBuf, Vec<String>)> = None;
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        let (Some(point), true) = (fields.get(4), sep >= 6) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        if !path.starts_with(&point) {
            continue;
        }
        let longer = best
            .as_ref()
            .is_none_or(|(b, _)| point.as_os_str().len() >= b.as_os_str().len());
        if longer {
            let optional = fields[6..sep].iter().map(|s| s.to_string()).collect();
            best = Some((point, optional));
        }
    }
    best
}

/// Checks that the host mount holding `source` propagates: shared for Bidirectional, shared
/// or slave for HostToContainer (containerd's ensureShared / ensureSharedOrSlave).
fn ensure_propagation(
    source: &Path,
    mountinfo: &str,
    need_shared: bool,
) -> std::result::Result<(), String> {
    let (point, optional) = lookup_mount(source, mountinfo)
        .ok_or_else(|| format!("no mount holds {}", source.display()))?;
    let shared = optional.iter().any(|o| o.starts_with("shared:"));
    let slave = optional.iter().any(|o| o.starts_with("master:"));
    if shared || (!need_shared && slave) {
        return Ok(());
    }
    let want = if need_shared {
        "shared"
    } else {
        "shared or slave"
    };
    Err(format!(
        "{} is on mount {} which is not {want}",
        source.display(),
        point.display()
    ))
}

/// The mount points at or below `dir`, per /proc/self/mountinfo (empty when unreadable).
pub fn mount_points_under(dir: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| Some(PathBuf::from(unescape(l.split(' ').nth(4)?))))
        .filter(|p| p.starts_with(dir))
        .collect()
}

/// The file system types a clone of the mount at `source` takes along (the one holding it and,
/// when `recursive`, those mounted below it), each once, from /proc/self/mountinfo text.
pub fn file_systems_of(source: &Path, recursive: bool, mountinfo: &str) -> Vec<String> {
    let mut types: Vec<String> = Vec::new();
    let holder = lookup_mount(source, mountinfo).map(|(point, _)| point);
    for line in mountinfo.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let (Some(point), Some(sep)) = (fields.get(4), fields.iter().position(|f| *f == "-"))
        else {
            continue;
        };
        let Some(fstype) = fields.get(sep + 1) else {
            continue;
        };
        let point = PathBuf::from(unescape(point));
        let taken = holder.as_ref() == Some(&point)
            || (recursive && point.starts_with(source) && point != source);
        if taken && !types.iter().any(|t| t == fstype) {
            types.push(fstype.to_string());
        }
    }
    types
}

/// Reads /proc/self/mountinfo.
pub fn read_mountinfo() -> Result<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::internal(format!("read /proc/self/mountinfo: {e}")))
}

#[cfg(test)]
#[path = "mounts_tests.rs"]
mod tests;
