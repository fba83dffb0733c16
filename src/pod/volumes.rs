//! A pod's volumes on the host (emptyDir, hostPath, configMap, secret, downwardAPI, projected), their mounts and the termination-message file.

use std::collections::BTreeMap;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Volume};

use super::env::{EnvFacts, Sources};
use super::projection;
use super::translate::PodContext;
use crate::config::quantity;
use crate::error::{Error, Result};
use crate::oci::request::{MountRequest, Propagation};

/// Most bytes of a termination-message file that are reported.
const MAX_MESSAGE_BYTES: u64 = 4096;
/// Most log lines used by FallbackToLogsOnError.
const FALLBACK_LINES: usize = 80;
/// Most bytes of log text used by FallbackToLogsOnError.
const FALLBACK_BYTES: usize = 2048;

/// The host file bind-mounted at a container's terminationMessagePath for one restart:
/// `<pod_dir>/termination/<container>/<restart_count>`.
pub fn termination_message_path(pod_dir: &Path, container: &str, restart_count: u32) -> PathBuf {
    pod_dir
        .join("termination")
        .join(container)
        .join(restart_count.to_string())
}

/// The termination message of an exited container: the host file's content (at most 4096 bytes);
/// with policy `FallbackToLogsOnError`, a non-zero exit and an empty file, the last 80 lines
/// (at most 2048 bytes) of the messages in the CRI log at `log_path`. Unreadable files give "".
pub fn termination_message(
    host_file: &Path,
    policy: Option<&str>,
    log_path: &Path,
    exit_code: i32,
) -> String {
    let mut content = Vec::new();
    if let Ok(file) = std::fs::File::open(host_file) {
        let _ = file.take(MAX_MESSAGE_BYTES).read_to_end(&mut content);
    }
    let message = String::from_utf8_lossy(&content).into_owned();
    if !message.is_empty() || exit_code == 0 || policy != Some("FallbackToLogsOnError") {
        return message;
    }
    let log = std::fs::read_to_string(log_path).unwrap_or_default();
    log_tail(&log)
}

/// The message of a terminated container as the kubelet builds it: the runtime's own reason
/// (CRI `ContainerStatus.message`), then `": "` and the container's termination message when
/// both are present. The runtime never reports the termination-message file itself.
pub fn with_runtime_message(runtime: &str, container: String) -> String {
    match (runtime.is_empty(), container.is_empty()) {
        (true, _) => container,
        (false, true) => runtime.to_string(),
        (false, false) => format!("{runtime}: {container}"),
    }
}

/// The last lines of a CRI log's messages (`<time> <stream> <P|F> <message>` per line; `P` lines
/// continue on the next one), within the fallback limits.
fn log_tail(log: &str) -> String {
    let mut text = String::new();
    for line in log.lines() {
        let mut parts = line.splitn(4, ' ');
        let (_time, _stream, tag) = (parts.next(), parts.next(), parts.next());
        let Some(message) = parts.next() else {
            continue;
        };
        text.push_str(message);
        if tag != Some("P") {
            text.push('\n');
        }
    }
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let start = lines.len().saturating_sub(FALLBACK_LINES);
    let tail: String = lines[start..].concat();
    if tail.len() <= FALLBACK_BYTES {
        return tail;
    }
    let mut cut = tail.len() - FALLBACK_BYTES;
    while !tail.is_char_boundary(cut) {
        cut += 1;
    }
    tail[cut..].to_string()
}

/// The pod's prepared volumes: name → host path.
#[derive(Debug, Clone, Default)]
pub struct PodVolumes {
    pod_dir: PathBuf,
    host_paths: BTreeMap<String, Prepared>,
}

#[derive(Debug, Clone)]
struct Prepared {
    path: PathBuf,
    /// configMap, secret, downwardAPI and projected volumes are always mounted read-only.
    read_only: bool,
}

/// The directory of the pod's own volumes: `<pod_dir>/volumes`.
fn volumes_dir(pod_dir: &Path) -> PathBuf {
    pod_dir.join("volumes")
}

/// Creates (or finds again, after a daemon restart) every volume of the pod under `pod_dir`.
/// ConfigMap, Secret and downward API files are rewritten from their sources each time.
pub fn prepare(ctx: &PodContext, pod_dir: &Path, sources: &Sources) -> Result<PodVolumes> {
    let spec = ctx
        .pod
        .spec
        .as_ref()
        .ok_or_else(|| Error::invalid(format!("pod {}: no spec", ctx.key())))?;
    let facts = EnvFacts {
        pod_ip: None,
        host_ip: "",
        node_name: "",
    };
    let mut out = PodVolumes {
        pod_dir: pod_dir.to_path_buf(),
        host_paths: BTreeMap::new(),
    };
    for v in spec.volumes.iter().flatten() {
        let prepared = prepare_one(ctx, v, pod_dir, sources, &facts)?;
        out.host_paths.insert(v.name.clone(), prepared);
    }
    Ok(out)
}

fn prepare_one(
    ctx: &PodContext,
    v: &Volume,
    pod_dir: &Path,
    sources: &Sources,
    facts: &EnvFacts,
) -> Result<Prepared> {
    let what = || format!("pod {}: volume {}", ctx.key(), v.name);
    let io = |op: &str, p: &Path, e: std::io::Error| {
        Error::internal(format!("{}: {op} {}: {e}", what(), p.display()))
    };
    let dir = volumes_dir(pod_dir).join(&v.name);
    if let Some(files) = projection::files(ctx, v, sources, facts)? {
        projection::write(&dir, &files)?;
        return Ok(Prepared {
            path: dir,
            read_only: true,
        });
    }
    if let Some(e) = &v.empty_dir {
        std::fs::create_dir_all(&dir).map_err(|e| io("create", &dir, e))?;
        if e.medium.as_deref() == Some("Memory") && !crate::runtime::rootfs::is_mounted(&dir) {
            let size = e
                .size_limit
                .as_ref()
                .and_then(|q| quantity::parse(&q.0))
                .map(|b| format!(",size={}", b as u64))
                .unwrap_or_default();
            let data = std::ffi::CString::new(format!("mode=0777{size}"))
                .map_err(|_| Error::invalid(format!("{}: bad sizeLimit", what())))?;
            rustix::mount::mount(
                "tmpfs",
                &dir,
                "tmpfs",
                rustix::mount::MountFlags::NOSUID | rustix::mount::MountFlags::NODEV,
                data.as_c_str(),
            )
            .map_err(|e| Error::internal(format!("{}: mount tmpfs: {e}", what())))?;
        } else {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| io("chmod", &dir, e))?;
        }
        return Ok(Prepared {
            path: dir,
            read_only: false,
        });
    }
    if let Some(h) = &v.host_path {
        let path = PathBuf::from(&h.path);
        if !path.is_absolute() {
            return Err(Error::invalid(format!(
                "{}: hostPath.path {:?} must be absolute",
                what(),
                h.path
            )));
        }
        check_host_path(&path, h.type_.as_deref().unwrap_or(""))
            .map_err(|m| Error::invalid(format!("{}: hostPath {}: {m}", what(), h.path)))?;
        return Ok(Prepared {
            path,
            read_only: false,
        });
    }
    Err(Error::invalid(format!(
        "{}: volume type not supported by bosun (supported: emptyDir, hostPath, configMap, \
         secret, downwardAPI, projected)",
        what()
    )))
}

/// The kubelet's hostPath type checks; the `...OrCreate` types create what is missing.
fn check_host_path(path: &Path, kind: &str) -> std::result::Result<(), String> {
    let meta = std::fs::metadata(path);
    let ft = meta.as_ref().map(|m| m.file_type());
    match kind {
        "" => Ok(()),
        "DirectoryOrCreate" => match ft {
            Ok(t) if t.is_dir() => Ok(()),
            Ok(_) => Err("exists and is not a directory".into()),
            Err(_) => {
                std::fs::create_dir_all(path).map_err(|e| format!("create: {e}"))?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("chmod: {e}"))
            }
        },
        "FileOrCreate" => match ft {
            Ok(t) if t.is_file() => Ok(()),
            Ok(_) => Err("exists and is not a file".into()),
            Err(_) => {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("create parent: {e}"))?;
                }
                std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(path)
                    .map(|_| ())
                    .map_err(|e| format!("create: {e}"))
            }
        },
        "Directory" | "File" | "Socket" | "CharDevice" | "BlockDevice" => {
            let t = ft.map_err(|_| format!("does not exist (type {kind})"))?;
            let ok = match kind {
                "Directory" => t.is_dir(),
                "File" => t.is_file(),
                "Socket" => t.is_socket(),
                "CharDevice" => t.is_char_device(),
                _ => t.is_block_device(),
            };
            if ok {
                Ok(())
            } else {
                Err(format!("is not a {kind}"))
            }
        }
        other => Err(format!("unknown hostPath type {other:?}")),
    }
}

/// What the node can do for a pod's volume mounts.
#[derive(Debug, Clone, Copy, Default)]
pub struct MountFacts<'a> {
    /// Recursive read-only mounts are possible.
    pub recursive_read_only: bool,
    /// The pod's own user namespace (`hostUsers: false`).
    pub userns: Option<&'a crate::oci::UserNamespace>,
}

impl PodVolumes {
    /// The mounts of container `c` (restart number `restart_count`): its volumeMounts, and its
    /// termination-message file (created empty) at terminationMessagePath. `node` says what the
    /// node can do for them: recursive read-only mounts (`recursiveReadOnly: IfPossible` takes
    /// them when it can), and the pod's own user namespace (volumes are ID-mapped with it, as
    /// the kubelet asks).
    pub fn mounts(
        &self,
        c: &Container,
        restart_count: u32,
        node: &MountFacts<'_>,
    ) -> Result<Vec<MountRequest>> {
        let what = |m: &str| format!("container {}: volumeMounts {m}", c.name);
        let mut out = Vec::new();
        for m in c.volume_mounts.iter().flatten() {
            let v = self.host_paths.get(&m.name).ok_or_else(|| {
                Error::invalid(what(&format!(
                    "{}: no volume named {:?}",
                    m.mount_path, m.name
                )))
            })?;
            let host = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                None => v.path.clone(),
                Some(sub) => sub_path(&v.path, sub).map_err(|e| {
                    Error::invalid(what(&format!("{}: subPath {sub:?}: {e}", m.mount_path)))
                })?,
            };
            let propagation = match m.mount_propagation.as_deref() {
                None | Some("None") => Propagation::Private,
                Some("HostToContainer") => Propagation::HostToContainer,
                Some("Bidirectional") => Propagation::Bidirectional,
                Some(other) => {
                    return Err(Error::invalid(what(&format!(
                        "{}: unknown mountPropagation {other:?}",
                        m.mount_path
                    ))))
                }
            };
            let readonly = m.read_only.unwrap_or(false) || v.read_only;
            // Validation made sure Enabled comes with readOnly and no propagation.
            let recursive_read_only = match m.recursive_read_only.as_deref() {
                Some("Enabled") => true,
                Some("IfPossible") => {
                    node.recursive_read_only && readonly && propagation == Propagation::Private
                }
                _ => false,
            };
            let mut mount = MountRequest {
                container_path: m.mount_path.clone(),
                host_path: host.to_string_lossy().into_owned(),
                readonly,
                propagation,
                recursive_read_only,
                ..Default::default()
            };
            if let Some(ns) = node.userns {
                crate::pod::userns::map_volumes(std::slice::from_mut(&mut mount), ns);
            }
            out.push(mount);
        }
        let tpath = c
            .termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into());
        if !tpath.is_empty() && !out.iter().any(|m| m.container_path == tpath) {
            let host = termination_message_path(&self.pod_dir, &c.name, restart_count);
            if let Some(parent) = host.parent() {
                std::fs::create_dir_all(parent)
                    .map_err(|e| Error::internal(format!("create {}: {e}", parent.display())))?;
            }
            std::fs::write(&host, b"")
                .map_err(|e| Error::internal(format!("create {}: {e}", host.display())))?;
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&host, std::fs::Permissions::from_mode(0o666));
            }
            out.push(MountRequest {
                container_path: tpath,
                host_path: host.to_string_lossy().into_owned(),
                ..Default::default()
            });
        }
        Ok(out)
    }
}

/// `volume/sub`, created as a directory if missing, refused when it leaves the volume (`..`,
/// absolute, or a symlink pointing outside).
pub fn sub_path(volume: &Path, sub: &str) -> std::result::Result<PathBuf, String> {
    let rel = Path::new(sub);
    if rel.is_absolute() || rel.components().any(|c| !matches!(c, Component::Normal(_))) {
        return Err("must be a relative path without '..'".into());
    }
    let joined = volume.join(rel);
    if std::fs::symlink_metadata(&joined).is_err() {
        std::fs::create_dir_all(&joined).map_err(|e| format!("create: {e}"))?;
    }
    let root = volume
        .canonicalize()
        .map_err(|e| format!("resolve the volume: {e}"))?;
    let real = joined.canonicalize().map_err(|e| format!("resolve: {e}"))?;
    if !real.starts_with(&root) {
        return Err(format!("resolves to {} outside the volume", real.display()));
    }
    Ok(real)
}

/// Removes the pod's volume directory: tmpfs emptyDirs are unmounted first; hostPaths are
/// never touched. Idempotent.
pub fn teardown(pod_dir: &Path) -> Result<()> {
    let dir = volumes_dir(pod_dir);
    if let Ok(rd) = std::fs::read_dir(&dir) {
        for e in rd.flatten() {
            crate::runtime::rootfs::unmount(&e.path())?;
        }
    }
    for d in [dir, pod_dir.join("termination")] {
        match std::fs::remove_dir_all(&d) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::internal(format!("remove {}: {e}", d.display())));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn log_line(i: usize) -> String {
        format!("2026-11-22T13:00:00.000000000Z stdout F line {i}\n")
    }

    #[test]
    fn the_runtime_reason_comes_first_and_the_file_is_not_doubled() {
        assert_eq!(with_runtime_message("", "done".into()), "done");
        assert_eq!(with_runtime_message("oom", String::new()), "oom");
        assert_eq!(with_runtime_message("oom", "done".into()), "oom: done");
        assert_eq!(with_runtime_message("", String::new()), "");
    }

    #[test]
    fn path_is_per_container_and_restart() {
        let p = termination_message_path(Path::new("/p"), "app", 3);
        assert_eq!(p, Path::new("/p/termination/app/3"));
    }

    #[test]
    fn file_content_wins_and_is_capped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("msg");
        std::fs::write(&file, "x".repeat(5000)).expect("write");
        let log = dir.path().join("log");
        std::fs::write(&log, log_line(1)).expect("write");
        let msg = termination_message(&file, Some("FallbackToLogsOnError"), &log, 1);
        assert_eq!(msg.len(), 4096);
    }

    #[test]
    fn fallback_only_on_failure_with_empty_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("msg");
        std::fs::write(&file, "").expect("write");
        let log = dir.path().join("log");
        let mut text = String::new();
        for i in 0..100 {
            text.push_str(&log_line(i));
        }
        text.push_str("2026-11-22T13:00:00Z stderr P par\n2026-11-22T13:00:00Z stderr F tial\n");
        std::fs::write(&log, text).expect("write");
        assert_eq!(termination_message(&file, Some("File"), &log, 1), "");
        assert_eq!(
            termination_message(&file, Some("FallbackToLogsOnError"), &log, 0),
            ""
        );
        let msg = termination_message(&file, Some("FallbackToLogsOnError"), &log, 2);
        assert_eq!(msg.lines().count(), 80);
        assert!(msg.starts_with("line 21\n"));
        assert!(msg.ends_with("line 99\npartial\n"));
    }

    #[test]
    fn fallback_is_capped_in_bytes() {
        let long = "y".repeat(100);
        let log: String = (0..50).map(|_| format!("t stdout F {long}\n")).collect();
        let tail = log_tail(&log);
        assert_eq!(tail.len(), 2048);
        assert!(tail.ends_with("y\n"));
    }
}
