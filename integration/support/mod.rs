//! Shared fixtures: environment checks with honest skips, the daemon, the registry, test images.

pub mod cgroup;
pub mod checkpoint_image;
pub mod crash;
pub mod cri;
pub mod ctr;
pub mod daemon;
pub mod disk;
pub mod fault_proxy;
pub mod images;
pub mod inproc;
pub mod kubelet;
pub mod leaks;
// Options and RPCs the trials not yet converted need (supervised nodes, other runtimes,
// prepared roots, resources) are kept ready.
#[allow(dead_code)]
pub mod manifest;
pub mod monitor;
pub mod network;
pub mod node;
pub mod podnet;
pub mod pods;
pub mod proxy;
pub mod registry;
#[allow(dead_code)]
pub mod scenario;
pub mod sessions;
pub mod stats;
pub mod streaming;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use daemon::Daemon;
pub use kubelet::kubelet_bin;
pub use registry::Registry;
#[allow(unused_imports)]
pub use scenario::{Scenario, Scene};

/// What a test needs from the machine; unmet needs make it "ignored" with the reason printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// uid 0 (mounts, chown, xattrs, device nodes).
    Root,
    /// Debian's docker-registry binary.
    Registry,
    /// test-images/ built by hack/setup.sh.
    Images,
    /// An OCI runtime: `runc` in PATH or /usr/sbin (see [`runc_bin`]).
    Runc,
    /// Debian's CNI plugins (containernetworking-plugins), iproute2 and iptables.
    Cni,
    /// `kubectl` in PATH (client-go's SPDY and WebSocket clients).
    Kubectl,
    /// cri-tools' `crictl` (`../shared/bin` from the repository root, or PATH); see [`crictl_bin`].
    Crictl,
    /// The real kubelet: `$BOSUN_KUBELET`, `../shared/bin/kubelet` from the repository root,
    /// or PATH; see [`kubelet_bin`].
    Kubelet,
    /// [`Need::Kubelet`] serving its authenticated port (`POST /checkpoint`): not
    /// `../shared/bin`'s build, which serves only the read-only port; see
    /// [`kubelet::server_unmet`].
    KubeletServer,
    /// Debian's skopeo (archives as it writes them).
    Skopeo,
    /// Python grpcio (a grpc-core client) in the venv hack/setup.sh makes; see [`grpcio_python`].
    GrpcIo,
    /// User namespaces whose ID-mapped mounts work on /var/tmp (where test daemons keep their
    /// image stores): what Status's `user_namespaces` feature stands for.
    UserNamespaces,
    /// [`Need::UserNamespaces`], and a tmpfs takes ID-mapped mounts too (Linux 6.3).
    TmpfsIdmap,
    /// Loop devices, mkfs.ext4 and fsfreeze (a file system to freeze).
    Freeze,
    /// cgroup v1 (hybrid or legacy) with the cpu, memory and pids controllers.
    CgroupV1,
    /// cgroup v2 (the unified hierarchy) with the cpu, memory and pids controllers.
    CgroupV2,
    /// systemd as PID 1 on the unified cgroup hierarchy (the VM lane's guest: hack/vm).
    SystemdV2,
    /// AppArmor enabled in the kernel and `apparmor_parser` installed (the VM lane's guest; not
    /// this CI host): bosun loads its runtime-default profile, the test loads its own.
    AppArmor,
    /// CRIU that works on this kernel (`criu check` passes: the VM lane's guest; Debian 12's
    /// CRIU fails on this CI host's newer kernel).
    Criu,
    /// A machine as fast as the test's timing assumes ([`time_scale`] 1): the test tells
    /// intervals a second or two apart, or needs a rate only such a machine reaches, which a
    /// slower lane cannot (and must not pass blind).
    Punctual,
}

/// Why pods cannot have user namespaces on this machine (`None`: they can); probed once with
/// bosun's own probe, this binary holding the probe's user namespace.
fn userns_unsupported() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        if !rustix::process::geteuid().is_root() {
            return Some("needs root".into());
        }
        bosun::oci::host::probe_user_namespaces(Path::new("/proc/self/exe"), Path::new("/var/tmp"))
            .err()
    })
    .clone()
}

/// Why a tmpfs cannot be ID-mapped here (`None`: it can); probed once on a tmpfs below
/// /var/tmp, like [`userns_unsupported`].
fn tmpfs_idmap_unsupported() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        if let Some(why) = userns_unsupported() {
            return Some(why);
        }
        let dir = match tempfile::Builder::new()
            .prefix("bosun-it-idmap-")
            .tempdir_in("/var/tmp")
        {
            Ok(dir) => dir,
            Err(e) => return Some(format!("create a directory in /var/tmp: {e}")),
        };
        let tmpfs = match TmpfsBelow::new(dir.path()) {
            Ok(tmpfs) => tmpfs,
            Err(e) => return Some(e.to_string()),
        };
        let why = bosun::oci::host::probe_user_namespaces(
            Path::new("/proc/self/exe"),
            &tmpfs.dir.join("tmpfs"),
        )
        .err();
        drop(tmpfs);
        why
    })
    .clone()
}

/// Why checkpoint tests cannot run here (`criu check`, probed once), if they cannot.
fn criu_unusable() -> Option<String> {
    static WHY: OnceLock<Option<String>> = OnceLock::new();
    WHY.get_or_init(|| {
        bosun::oci::runc::checkpoint::probe_criu()
            .err()
            .map(|why| format!("needs a working CRIU: {why} (runs in the VM lane: hack/vm/run.sh)"))
    })
    .clone()
}

fn unmet(need: Need) -> Option<String> {
    match need {
        Need::Root if !rustix::process::geteuid().is_root() => Some("needs root".into()),
        Need::Registry if !Path::new(registry::REGISTRY_BIN).exists() => Some(format!(
            "needs {} (apt-get install docker-registry)",
            registry::REGISTRY_BIN
        )),
        Need::Images if !images_dir().join("manifest.json").exists() => Some(format!(
            "needs test images in {} (run hack/setup.sh)",
            images_dir().display()
        )),
        Need::Runc if runc_bin().is_none() => {
            Some("needs runc in PATH or /usr/sbin (apt-get install runc)".into())
        }
        // Every test that runs containers runs them with the chosen cgroup driver.
        Need::Runc => cgroup::driver_unmet(),
        Need::AppArmor if !apparmor_enabled() => Some(
            "needs AppArmor enabled in the kernel (runs in the VM lane: hack/vm/run.sh)".into(),
        ),
        Need::AppArmor if bosun::oci::apparmor::find_parser().is_none() => {
            Some("needs apparmor_parser (apt-get install apparmor)".into())
        }
        Need::Criu => criu_unusable(),
        Need::Punctual if time_scale() > 1 => Some(format!(
            "needs a machine as fast as its timing assumes; this lane runs {}x slower \
             (BOSUN_TEST_TIME_SCALE), the host run checks it",
            time_scale()
        )),
        Need::SystemdV2 if !cgroup::systemd_booted() || !cgroup::unified() => Some(
            "needs systemd as PID 1 and cgroup v2 (runs in the VM lane: hack/vm/run.sh)".into(),
        ),
        Need::Cni
            if !network::PLUGINS
                .iter()
                .all(|p| Path::new(network::DEBIAN_PLUGINS).join(p).is_file())
                || !Path::new("/usr/sbin/iptables-save").exists()
                || !Path::new("/usr/sbin/nft").exists()
                || !Path::new("/usr/sbin/ip").exists() && !Path::new("/bin/ip").exists() =>
        {
            Some(format!(
                "needs CNI plugins in {} and iproute2/iptables/nft (apt-get install containernetworking-plugins iproute2 iptables nftables)",
                network::DEBIAN_PLUGINS
            ))
        }
        Need::Kubectl if kubectl_bin().is_none() => {
            Some("needs kubectl in PATH (client-go's streaming clients)".into())
        }
        Need::Crictl if crictl_bin().is_none() => Some(
            "needs crictl in ../shared/bin (from the repository root) or PATH".into(),
        ),
        Need::Kubelet if kubelet_bin().is_none() => Some(
            "needs the kubelet: $BOSUN_KUBELET, ../shared/bin/kubelet (from the repository \
             root) or PATH (/work/shared/bin/README.md)"
                .into(),
        ),
        Need::KubeletServer => kubelet::server_unmet(),
        Need::Skopeo if bosun::oci::host::find_in_path("skopeo").is_none() => {
            Some("needs skopeo in PATH (apt-get install skopeo)".into())
        }
        Need::GrpcIo if !grpcio_python().is_file() => Some(format!(
            "needs Python grpcio at {} (run hack/setup.sh)",
            grpcio_python().display()
        )),
        Need::UserNamespaces => userns_unsupported()
            .map(|why| format!("needs user namespaces with ID-mapped mounts: {why}")),
        Need::TmpfsIdmap => tmpfs_idmap_unsupported()
            .map(|why| format!("needs ID-mapped mounts of a tmpfs (Linux 6.3): {why}")),
        Need::Freeze
            if !Path::new("/dev/loop-control").exists()
                || !["/usr/sbin/mkfs.ext4", "/usr/sbin/fsfreeze", "/usr/bin/mount"]
                    .iter()
                    .all(|p| Path::new(p).exists()) =>
        {
            Some("needs loop devices, mkfs.ext4 and fsfreeze (e2fsprogs, util-linux)".into())
        }
        Need::CgroupV1
            if !["cpu", "memory", "pids"]
                .iter()
                .all(|c| Path::new("/sys/fs/cgroup").join(c).is_dir()) =>
        {
            Some("needs cgroup v1 cpu, memory and pids hierarchies".into())
        }
        Need::CgroupV2
            if !std::fs::read_to_string(Path::new(cgroup::ROOT).join("cgroup.controllers"))
                .is_ok_and(|c| {
                    ["cpu", "memory", "pids"]
                        .iter()
                        .all(|w| c.split_whitespace().any(|x| x == *w))
                }) =>
        {
            Some("needs cgroup v2 with the cpu, memory and pids controllers (runs in the VM lane: hack/vm/run.sh)".into())
        }
        _ => None,
    }
}

/// AppArmor is enabled in this kernel.
pub fn apparmor_enabled() -> bool {
    std::fs::read_to_string("/sys/module/apparmor/parameters/enabled")
        .is_ok_and(|s| s.starts_with('Y'))
}

/// The Python of the venv with grpcio: `$BOSUN_GRPCIO_PYTHON`, else
/// `target/grpcio-venv/bin/python` (made by hack/setup.sh).
pub fn grpcio_python() -> PathBuf {
    std::env::var_os("BOSUN_GRPCIO_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/grpcio-venv/bin/python"))
}

/// cri-tools' `crictl`: `../shared/bin/crictl` from the repository root, else in PATH.
pub fn crictl_bin() -> Option<PathBuf> {
    Some(repo_root().join("../shared/bin/crictl"))
        .filter(|p| p.is_file())
        .or_else(|| bosun::oci::host::find_in_path("crictl"))
}

/// `kubectl` in PATH.
pub fn kubectl_bin() -> Option<PathBuf> {
    bosun::oci::host::find_in_path("kubectl")
}

/// The runc binary: `$BOSUN_RUNC`, else `runc` in PATH, else /usr/sbin/runc.
pub fn runc_bin() -> Option<PathBuf> {
    let from_env = std::env::var_os("BOSUN_RUNC").map(PathBuf::from);
    let in_path = bosun::oci::host::find_in_path("runc");
    from_env
        .into_iter()
        .chain(in_path)
        .chain(std::iter::once(PathBuf::from("/usr/sbin/runc")))
        .find(|p| p.is_file())
}

/// A trial that runs `f`, or is ignored with a printed SKIP reason when `needs` are unmet.
pub fn trial(
    name: &'static str,
    needs: &[Need],
    f: fn() -> anyhow::Result<()>,
) -> libtest_mimic::Trial {
    let reasons: Vec<String> = needs.iter().filter_map(|n| unmet(*n)).collect();
    let t = libtest_mimic::Trial::test(name, move || f().map_err(|e| format!("{e:#}").into()));
    if reasons.is_empty() {
        t
    } else {
        eprintln!("SKIP {name}: {}", reasons.join("; "));
        t.with_ignored_flag(true)
    }
}

/// Runs a future on a fresh runtime (each test owns its runtime).
pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
        .block_on(f)
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Where hack/testimages.py wrote the test images.
pub fn images_dir() -> PathBuf {
    std::env::var_os("BOSUN_TEST_IMAGES")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("test-images"))
}

/// test-images/manifest.json's `images` object.
pub fn images_manifest() -> &'static serde_json::Value {
    static M: OnceLock<serde_json::Value> = OnceLock::new();
    M.get_or_init(|| {
        let text = std::fs::read_to_string(images_dir().join("manifest.json")).unwrap_or_default();
        serde_json::from_str::<serde_json::Value>(&text).unwrap_or_default()["images"].clone()
    })
}

/// A string field of a test image's summary, e.g. `image_field("busybox", "image_id")`.
pub fn image_field(image: &str, field: &str) -> String {
    images_manifest()[image][field]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// A scratch directory under /var/tmp (a real ext4 here: overlay and xattrs work), removed on drop.
pub fn scratch() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix("bosun-it-")
        .tempdir_in("/var/tmp")?)
}

/// A host directory `dir` with a tmpfs mounted at `dir/tmpfs` (critest's recursive read-only
/// fixture); the tmpfs is unmounted on drop, whatever the test did.
pub struct TmpfsBelow {
    /// The directory (what a volume mounts).
    pub dir: PathBuf,
}

impl TmpfsBelow {
    /// Creates `dir` and mounts a 1 MiB tmpfs at `dir/tmpfs`.
    pub fn new(dir: &Path) -> anyhow::Result<TmpfsBelow> {
        std::fs::create_dir_all(dir.join("tmpfs"))?;
        rustix::mount::mount(
            "none",
            dir.join("tmpfs"),
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            c"size=1m",
        )
        .map_err(|e| anyhow::anyhow!("mount a tmpfs below {}: {e}", dir.display()))?;
        Ok(TmpfsBelow {
            dir: dir.to_path_buf(),
        })
    }
}

impl Drop for TmpfsBelow {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(self.dir.join("tmpfs"), rustix::mount::UnmountFlags::DETACH);
    }
}

/// How many times slower this machine runs tests than the ones their time bounds were set on:
/// `BOSUN_TEST_TIME_SCALE` (the VM lane sets it: qemu TCG runs a guest several times slower),
/// else 1. Only a test's own waits and upper bounds scale, never what the daemon is asked to
/// do (a 3 s grace stays 3 s) nor lower bounds (a kill must still not come early).
pub fn time_scale() -> u32 {
    std::env::var("BOSUN_TEST_TIME_SCALE")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|n| *n >= 1)
        .unwrap_or(1)
}

/// `d` × [`time_scale`].
pub fn scaled(d: std::time::Duration) -> std::time::Duration {
    d * time_scale()
}

/// Polls `f` every 20 ms until it is true or `secs` pass.
pub fn wait_until(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let deadline = std::time::Instant::now() + scaled(std::time::Duration::from_secs(secs));
    while std::time::Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    f()
}

/// Files and dirs under `dir`, recursively, and the bytes they occupy on disk (what `du` counts).
pub fn du(dir: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let mut bytes = 0;
    let mut inodes = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(m) = e.path().symlink_metadata() else {
                continue;
            };
            bytes += m.blocks() * 512;
            inodes += 1;
            if m.is_dir() {
                stack.push(e.path());
            }
        }
    }
    (bytes, inodes)
}

/// The busybox test image's single (gzip) layer blob, for tests that build bundles by hand.
pub fn busybox_layer() -> anyhow::Result<PathBuf> {
    use anyhow::Context;
    let layout = images_dir().join("busybox");
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let read = |p: PathBuf| -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(&std::fs::read(p)?)?)
    };
    let index = read(layout.join("index.json"))?;
    let manifest = read(blob(
        index["manifests"][0]["digest"].as_str().context("index")?,
    ))?;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .context("manifest layers")?;
    Ok(blob(layer))
}

/// A minimal hand-written OCI runtime spec (independent of bosun's spec builder, so tests of
/// the monitor and the runc wrapper do not depend on it): own pid/net/ipc/uts/mount namespaces,
/// cgroup `/<id>` (its own top-level cgroup: a shared parent
/// removed by one test while another creates a child under it races), busybox rootfs at `rootfs`.
pub fn minimal_spec(args: &[&str], id: &str) -> serde_json::Value {
    use serde_json::json;
    let caps: Vec<String> = "CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP \
         SETPCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE"
        .split_whitespace()
        .map(|c| format!("CAP_{c}"))
        .collect();
    let mount = |dest: &str, typ: &str, opts: &[&str]| json!({"destination": dest, "type": typ, "source": typ, "options": opts});
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false, "user": {"uid": 0, "gid": 0}, "args": args, "cwd": "/",
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": true
        },
        "root": {"path": "rootfs"},
        "hostname": "bosun-test",
        "mounts": [
            mount("/proc", "proc", &["nosuid", "noexec", "nodev"]),
            mount("/dev", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"]),
            mount("/dev/pts", "devpts", &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]),
            mount("/sys", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
        ],
        "linux": {
            "cgroupsPath": format!("/{id}"),
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "network"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/kcore", "/proc/keys", "/sys/firmware"],
            "readonlyPaths": ["/proc/sys", "/proc/sysrq-trigger"]
        }
    })
}

/// The cgroup directories of a test container whose cgroups path is `/<id>`: one per v1
/// hierarchy, or the v2 one.
pub fn cgroup_dirs(id: &str) -> Vec<std::path::PathBuf> {
    let root = std::path::Path::new("/sys/fs/cgroup");
    let mut dirs: Vec<_> = std::fs::read_dir(root)
        .map(|rd| rd.flatten().map(|h| h.path().join(id)).collect())
        .unwrap_or_default();
    dirs.push(root.join(id));
    dirs.retain(|p| p.is_dir());
    dirs
}

/// Removes the (empty) cgroup directories of a test container; errors are ignored.
pub fn remove_cgroups(id: &str) {
    for dir in cgroup_dirs(id) {
        let _ = std::fs::remove_dir(dir);
    }
}
