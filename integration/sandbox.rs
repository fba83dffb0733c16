//! Pod namespaces (pinned from a thread or by `bosun pinns`, `bosun pod-init`) and pod files with the real kernel (root).

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use bosun::sandbox::{NamespaceOptions, PodFiles, PodFilesConfig, PodNamespaces};

use crate::support::{scratch, trial, wait_until, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "sandbox::namespaces_are_pinned_configured_and_removed",
            &[Need::Root],
            pinned,
        ),
        trial(
            "sandbox::pid_holder_is_pid_1_and_reaps_zombies",
            &[Need::Root],
            pid_holder,
        ),
        trial(
            "sandbox::a_failing_sysctl_leaves_nothing_behind",
            &[Need::Root],
            failing_sysctl,
        ),
        trial("sandbox::pod_files_and_shm_tmpfs", &[Need::Root], pod_files),
        trial(
            "sandbox::own_user_namespace_owns_the_pods_namespaces_and_undoes_a_failure",
            &[Need::Root, Need::UserNamespaces],
            own_user_namespace,
        ),
    ]
}

/// `uid_map`/`gid_map` given: the user namespace is pinned, maps as asked, and owns the pod's
/// net, IPC, UTS and pid namespaces (its init runs inside); a failing sysctl undoes it all.
fn own_user_namespace() -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let pod = Pod::new()?;
    let mut opts = pod.opts();
    opts.net = true;
    opts.ipc = true;
    opts.uts = true;
    opts.pid = true;
    opts.hostname = Some("userns-pod".into());
    opts.sysctls = [(
        "net.ipv4.ip_unprivileged_port_start".to_string(),
        "77".to_string(),
    )]
    .into();
    opts.uid_map = vec![(0, 400_000, 65_536)];
    opts.gid_map = vec![(0, 500_000, 65_536)];
    let ns = PodNamespaces::create(&pod.path(), &opts)?;
    let user = ns.user.clone().context("user namespace not pinned")?;
    let holder = ns.pid_holder.context("no pid holder")?;
    let maps = std::fs::read_to_string(format!("/proc/{holder}/uid_map"))?
        + &std::fs::read_to_string(format!("/proc/{holder}/gid_map"))?;
    let maps: Vec<String> = maps
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    ensure!(
        maps == ["0 400000 65536", "0 500000 65536"],
        "maps {maps:?}"
    );
    let owner = std::fs::metadata(&user)?.ino().to_string();
    let lsns = run(Command::new("lsns")
        .args(["-n", "-o", "TYPE,ONS", "-p"])
        .arg(holder.to_string()))?;
    for kind in ["net", "ipc", "uts", "pid"] {
        let owned = lsns.lines().any(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            f.first() == Some(&kind) && f.get(1) == Some(&owner.as_str())
        });
        ensure!(
            owned,
            "{kind} is not owned by the pod's user namespace {owner}: {lsns}"
        );
    }
    let uts = ns.uts.clone().context("uts")?;
    ensure!(nsenter("uts", &uts, &["hostname"])?.trim() == "userns-pod");
    let net = ns.net.clone().context("net")?;
    let port = nsenter("net", &net, &["cat", PORT_SYSCTL])?;
    ensure!(
        port.trim() == "77",
        "sysctl in the pod's net namespace: {port}"
    );
    ns.remove()?;
    ensure!(
        mounts_under(pod.dir.path()).is_empty(),
        "mounts left after remove"
    );
    ensure!(
        wait_until(5, || !Path::new(&format!("/proc/{holder}")).exists()),
        "the pid holder survived remove"
    );

    // A failure after the user namespace exists (the sysctl) leaves nothing.
    opts.sysctls = [("net.bosun.no_such_knob".to_string(), "1".to_string())].into();
    let before = pod_inits();
    let err = PodNamespaces::create(&pod.path(), &opts).expect_err("must fail");
    ensure!(err.message().contains("no_such_knob"), "{err}");
    ensure!(
        mounts_under(pod.dir.path()).is_empty(),
        "mounts left after failure"
    );
    ensure!(!pod.path().join("user").exists(), "user pin file left");
    ensure!(
        wait_until(5, || pod_inits() == before),
        "a pod init survived the failure: {:?}",
        pod_inits()
    );
    Ok(())
}

/// Live `pod-init` processes.
fn pod_inits() -> Vec<String> {
    std::fs::read_dir("/proc")
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read(e.path().join("cmdline"))
                        .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(b"pod-init"))
                        && std::fs::read_to_string(e.path().join("stat"))
                            .is_ok_and(|s| !s.contains(") Z "))
                })
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A scratch pin dir; on drop (even after a failure) removes the namespaces, detaches every
/// mount under the dir and kills a recorded holder, then the dir goes.
struct Pod {
    dir: tempfile::TempDir,
}

impl Pod {
    fn new() -> Result<Self> {
        Ok(Pod { dir: scratch()? })
    }
    fn path(&self) -> PathBuf {
        self.dir.path().join("ns")
    }
    fn opts(&self) -> NamespaceOptions {
        NamespaceOptions {
            binary: Some(PathBuf::from(env!("CARGO_BIN_EXE_bosun"))),
            ..NamespaceOptions::default()
        }
    }
}

impl Drop for Pod {
    fn drop(&mut self) {
        if let Ok(ns) = PodNamespaces::open(&self.path()) {
            let _ = ns.remove();
        }
        let _ = PodFiles::remove(&self.path());
        for mp in mounts_under(self.dir.path()).into_iter().rev() {
            let _ = rustix::mount::unmount(&mp, rustix::mount::UnmountFlags::DETACH);
        }
    }
}

/// `(mount point, fs type)` of mounts at or under `dir`.
fn mounts_under_typed(dir: &Path) -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mp = PathBuf::from(left.split(' ').nth(4)?);
            let fs = right.split(' ').next()?.to_string();
            mp.starts_with(dir).then_some((mp, fs))
        })
        .collect()
}

fn mounts_under(dir: &Path) -> Vec<PathBuf> {
    mounts_under_typed(dir)
        .into_iter()
        .map(|(m, _)| m)
        .collect()
}

fn run(cmd: &mut Command) -> Result<String> {
    let out = cmd.output().with_context(|| format!("run {cmd:?}"))?;
    ensure!(
        out.status.success(),
        "{cmd:?}: {}: {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn nsenter(flag: &str, file: &Path, args: &[&str]) -> Result<String> {
    run(Command::new("nsenter")
        .arg(format!("--{flag}={}", file.display()))
        .arg("--")
        .args(args))
}

const PORT_SYSCTL: &str = "/proc/sys/net/ipv4/ip_unprivileged_port_start";

fn pinned() -> Result<()> {
    let pod = Pod::new()?;
    let host_port = std::fs::read_to_string(PORT_SYSCTL)?.trim().to_string();
    let want = if host_port == "77" { "78" } else { "77" };
    let mut opts = pod.opts();
    opts.net = true;
    opts.ipc = true;
    opts.uts = true;
    opts.hostname = Some("pod-under-test".into());
    opts.sysctls = [
        (
            "net.ipv4.ip_unprivileged_port_start".to_string(),
            want.to_string(),
        ),
        ("kernel.shmmni".to_string(), "1234".to_string()),
    ]
    .into();
    // Pinned from a thread of this process (no pid or user namespace): the process and the
    // calling thread stay in the host's namespaces.
    let own = own_namespaces()?;
    let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")?;
    let ns = PodNamespaces::create(&pod.path(), &opts)?;
    ensure!(own_namespaces()? == own, "the caller's namespaces changed");
    ensure!(
        std::fs::read_to_string("/proc/sys/kernel/hostname")? == host_name,
        "the host's hostname changed"
    );
    for (name, file) in [("net", &ns.net), ("ipc", &ns.ipc), ("uts", &ns.uts)] {
        let file = file
            .as_ref()
            .with_context(|| format!("{name} not pinned"))?;
        let typed = mounts_under_typed(file);
        ensure!(
            typed.iter().any(|(m, fs)| m == file && fs == "nsfs"),
            "{name}: not an nsfs mount: {typed:?}"
        );
    }
    let net = ns.net.clone().context("net")?;
    let links = nsenter("net", &net, &["ip", "-o", "link"])?;
    ensure!(
        links
            .lines()
            .any(|l| l.contains(" lo:") && l.contains(",UP")),
        "lo not up: {links}"
    );
    let host = nsenter("uts", ns.uts.as_ref().context("uts")?, &["hostname"])?;
    ensure!(host.trim() == "pod-under-test", "hostname {host:?}");
    let inside = nsenter("net", &net, &["cat", PORT_SYSCTL])?;
    ensure!(inside.trim() == want, "sysctl inside: {inside:?}");
    let on_host = std::fs::read_to_string(PORT_SYSCTL)?;
    ensure!(on_host.trim() == host_port, "sysctl leaked to the host");
    let shm = nsenter(
        "ipc",
        ns.ipc.as_ref().context("ipc")?,
        &["cat", "/proc/sys/kernel/shmmni"],
    )?;
    ensure!(shm.trim() == "1234", "ipc sysctl: {shm:?}");

    // A restarted daemon finds them from the directory alone.
    let reopened = PodNamespaces::open(&pod.path())?;
    ensure!(reopened == ns, "open: {reopened:?} != {ns:?}");
    reopened.remove()?;
    ensure!(mounts_under(pod.dir.path()).is_empty(), "mounts left");
    ensure!(!net.exists(), "pinned file left");
    ns.remove()?;
    Ok(())
}

/// The namespace inodes of this process and of the calling thread.
fn own_namespaces() -> Result<Vec<u64>> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    for dir in ["/proc/self/ns", "/proc/thread-self/ns"] {
        for kind in ["net", "ipc", "uts", "mnt"] {
            out.push(std::fs::metadata(format!("{dir}/{kind}"))?.ino());
        }
    }
    Ok(out)
}

/// Every `sleep` process with its parent pid and NSpid line (for failure messages).
fn sleeps() -> Vec<String> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|p| {
            let st = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            st.lines().next()?.ends_with("sleep").then(|| {
                let pick = |k: &str| {
                    st.lines()
                        .find(|l| l.starts_with(k))
                        .unwrap_or("")
                        .to_string()
                };
                format!("{p}: {} {}", pick("PPid:"), pick("NSpid:"))
            })
        })
        .collect()
}

/// `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| !r.starts_with('Z')))
        .unwrap_or(false)
}

/// Processes whose parent is `pid` (zombies included).
fn children_of(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{p}/status"))
                .map(|s| s.lines().any(|l| l == format!("PPid:\t{pid}")))
                .unwrap_or(false)
        })
        .collect()
}

fn pid_holder() -> Result<()> {
    let pod = Pod::new()?;
    let mut opts = pod.opts();
    opts.net = true;
    opts.pid = true;
    let ns = PodNamespaces::create(&pod.path(), &opts)?;
    let holder = ns.pid_holder.context("no pid holder")?;
    let status = std::fs::read_to_string(format!("/proc/{holder}/status"))?;
    let nspid = status
        .lines()
        .find(|l| l.starts_with("NSpid:"))
        .context("NSpid")?;
    ensure!(nspid.split_whitespace().last() == Some("1"), "{nspid}");
    // An orphan in the pod's pid namespace is adopted (and reaped) by the holder. Its stdio is
    // detached: `output()` would otherwise wait for it to exit and the adoption would be missed.
    run(Command::new("nsenter")
        .arg(format!("--pid=/proc/{holder}/ns/pid"))
        .args([
            "--",
            "sh",
            "-c",
            "sleep 2 </dev/null >/dev/null 2>&1 & exit 0",
        ]))?;
    ensure!(
        wait_until(5, || !children_of(holder).is_empty()),
        "the orphan was not adopted: holder alive {}, sleeps {:?}",
        alive(holder),
        sleeps()
    );
    ensure!(
        wait_until(10, || children_of(holder).is_empty()),
        "zombie not reaped: {:?}",
        children_of(holder)
    );
    ns.remove()?;
    ensure!(wait_until(5, || !alive(holder)), "holder still alive");
    ensure!(
        PodNamespaces::open(&pod.path())?.pid_holder.is_none(),
        "holder still recorded"
    );
    ensure!(mounts_under(pod.dir.path()).is_empty(), "mounts left");
    ns.remove()?;
    Ok(())
}

fn failing_sysctl() -> Result<()> {
    let pod = Pod::new()?;
    let mut opts = pod.opts();
    opts.net = true;
    opts.uts = true;
    opts.sysctls = [("net.bosun.no_such_knob".to_string(), "1".to_string())].into();
    let err = PodNamespaces::create(&pod.path(), &opts).expect_err("must fail");
    ensure!(err.message().contains("no_such_knob"), "{err}");
    ensure!(
        mounts_under(pod.dir.path()).is_empty(),
        "mounts left after failure"
    );
    ensure!(!pod.path().join("net").exists(), "pin file left");
    // Refused before anything runs: not namespaced.
    opts.sysctls = [("kernel.panic".to_string(), "1".to_string())].into();
    let err = PodNamespaces::create(&pod.path(), &opts).expect_err("must fail");
    ensure!(err.message().contains("kernel.panic"), "{err}");
    Ok(())
}

fn pod_files() -> Result<()> {
    let pod = Pod::new()?;
    std::fs::create_dir_all(pod.path())?;
    let cfg = PodFilesConfig {
        hostname: "files-pod".into(),
        shm_size: Some(8 << 20),
        ..PodFilesConfig::default()
    };
    let files = PodFiles::write(&pod.path(), &cfg)?;
    ensure!(std::fs::read_to_string(&files.hostname)? == "files-pod\n");
    ensure!(std::fs::read(&files.resolv_conf)? == std::fs::read("/etc/resolv.conf")?);
    let shm = files.shm.clone().context("no shm")?;
    let typed = mounts_under_typed(&shm);
    ensure!(
        typed.iter().any(|(m, fs)| m == &shm && fs == "tmpfs"),
        "{typed:?}"
    );
    let df = run(Command::new("findmnt").args(["-no", "OPTIONS"]).arg(&shm))?;
    for want in ["nosuid", "nodev", "noexec", "size=8192k"] {
        ensure!(df.contains(want), "shm options {df:?} lack {want}");
    }
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&shm)?.permissions());
    ensure!(mode & 0o7777 == 0o1777, "shm mode {mode:o}");
    PodFiles::write(&pod.path(), &cfg)?;
    ensure!(mounts_under(&shm).len() == 1, "shm mounted twice");
    PodFiles::remove(&pod.path())?;
    PodFiles::remove(&pod.path())?;
    ensure!(mounts_under(pod.dir.path()).is_empty(), "mounts left");
    ensure!(!shm.exists() && !files.hosts.exists(), "files left");
    Ok(())
}
