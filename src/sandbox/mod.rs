//! Pod sandboxes without a pause image: pinned namespaces, a pid holder and the pod's files.

pub mod files;
pub mod init;
pub mod pinns;
mod sys;
pub mod sysctl;
pub mod userns;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rustix::io::Errno;
use rustix::mount::UnmountFlags;

use crate::error::{Error, ErrorKind, Result, ResultExt};

pub use files::{DnsConfig, PodFiles, PodFilesConfig};

/// The namespace files under the pin directory.
const NS_FILES: [&str; 4] = ["net", "ipc", "uts", "user"];

/// Which namespaces a pod gets and how they are set up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceOptions {
    /// A new network namespace with `lo` up (false: host network).
    pub net: bool,
    /// A new IPC namespace (false: host IPC).
    pub ipc: bool,
    /// A new UTS namespace (normally follows `net`).
    pub uts: bool,
    /// A pod-level pid namespace with `bosun pod-init` as PID 1.
    pub pid: bool,
    /// Hostname set in the new UTS namespace (needs `uts`).
    pub hostname: Option<String>,
    /// Sysctls, validated by [`sysctl::validate`] (namespaced, in owned namespaces only).
    pub sysctls: BTreeMap<String, String>,
    /// The bosun binary to run as `pinns`; `None`: this executable.
    pub binary: Option<PathBuf>,
    /// A user namespace of the pod's own, as `(INSIDE, HOST, LENGTH)` uid and gid ranges: it is
    /// pinned too and owns the other namespaces. Empty: the host's users.
    pub uid_map: Vec<(u32, u32, u32)>,
    /// The gid ranges (with `uid_map`).
    pub gid_map: Vec<(u32, u32, u32)>,
}

/// A pod's pinned namespaces and pid holder.
///
/// [`PodNamespaces::create`] pins them from a short-lived thread of its own or, for a pod pid
/// or user namespace, runs `bosun pinns` (see [`pinns`]) as a child process (the daemon never
/// forks), and returns the pinned namespace files and the pid holder (`bosun pod-init`,
/// PID 1 of the pod's pid namespace, see [`init`]). [`PodNamespaces::open`] finds them again
/// from the directory alone after a daemon restart; [`PodNamespaces::remove`] is idempotent.
/// [`PodFiles`] writes `hostname`, `hosts`, `resolv.conf` and mounts the pod's shm tmpfs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodNamespaces {
    dir: PathBuf,
    /// The pinned network namespace file.
    pub net: Option<PathBuf>,
    /// The pinned IPC namespace file.
    pub ipc: Option<PathBuf>,
    /// The pinned UTS namespace file.
    pub uts: Option<PathBuf>,
    /// The pinned user namespace file (pods with their own user namespace).
    pub user: Option<PathBuf>,
    /// Host pid of the pod's pid namespace holder.
    pub pid_holder: Option<u32>,
}

impl PodNamespaces {
    /// Creates and pins the namespaces under `dir` (created if missing); all or nothing.
    pub fn create(dir: &Path, opts: &NamespaceOptions) -> Result<PodNamespaces> {
        let fail = |e: Error| e.context(format!("pod namespaces in {}", dir.display()));
        let checked = sysctl::validate(&opts.sysctls, opts.net, opts.ipc).map_err(fail)?;
        if let Some(h) = &opts.hostname {
            validate_hostname(h, opts.uts).map_err(fail)?;
        }
        if !dir.is_absolute() {
            return Err(fail(Error::invalid("the directory must be absolute")));
        }
        std::fs::create_dir_all(dir)
            .ctx(|| "create directory")
            .map_err(fail)?;
        if !opts.pid && opts.uid_map.is_empty() {
            pinns::pin_from_thread(dir, opts, checked).map_err(fail)?;
            let pinned = |on: bool, name: &str| on.then(|| dir.join(name));
            return Ok(PodNamespaces {
                dir: dir.to_path_buf(),
                net: pinned(opts.net, "net"),
                ipc: pinned(opts.ipc, "ipc"),
                uts: pinned(opts.uts, "uts"),
                user: None,
                pid_holder: None,
            });
        }
        let mut cmd = Command::new(
            opts.binary
                .as_deref()
                .unwrap_or(Path::new("/proc/self/exe")),
        );
        cmd.arg("pinns").arg("--dir").arg(dir);
        for (flag, on) in [
            ("--net", opts.net),
            ("--ipc", opts.ipc),
            ("--uts", opts.uts),
            ("--pid", opts.pid),
        ] {
            if on {
                cmd.arg(flag);
            }
        }
        if let Some(h) = &opts.hostname {
            cmd.arg("--hostname").arg(h);
        }
        for (k, v) in &opts.sysctls {
            cmd.arg("--sysctl").arg(format!("{k}={v}"));
        }
        for (flag, map) in [("--uid-map", &opts.uid_map), ("--gid-map", &opts.gid_map)] {
            for (inside, host, len) in map {
                cmd.arg(flag).arg(format!("{inside}:{host}:{len}"));
            }
        }
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .ctx(|| "run bosun pinns")
            .map_err(fail)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || stdout.lines().last() != Some("ok") {
            let stderr = String::from_utf8_lossy(&out.stderr);
            let kind = match out.status.code() {
                Some(2) => ErrorKind::InvalidArgument,
                _ => ErrorKind::Internal,
            };
            return Err(fail(Error::new(
                kind,
                format!("bosun pinns ({}): {}", out.status, stderr.trim()),
            )));
        }
        PodNamespaces::open(dir)
    }

    /// The namespaces pinned under `dir`, found from the files alone (after a restart).
    pub fn open(dir: &Path) -> Result<PodNamespaces> {
        // mountinfo is read once (it grows with every pod and container on the node).
        let mounts = mount_points();
        let pinned = |name: &str| {
            let p = dir.join(name);
            mounts
                .iter()
                .any(|(mp, fs)| *mp == p && fs == "nsfs")
                .then_some(p)
        };
        let pid_holder = std::fs::read_to_string(dir.join(pinns::PID_HOLDER_FILE))
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok())
            .filter(|pid| is_our_holder(*pid, dir));
        Ok(PodNamespaces {
            dir: dir.to_path_buf(),
            net: pinned("net"),
            ipc: pinned("ipc"),
            uts: pinned("uts"),
            user: pinned("user"),
            pid_holder,
        })
    }

    /// The pin directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Kills the pid holder, unmounts (detached) and removes the pinned files. Idempotent; the
    /// directory itself is left to its owner.
    pub fn remove(&self) -> Result<()> {
        let fail = |e: Error| e.context(format!("remove pod namespaces in {}", self.dir.display()));
        let holder_file = self.dir.join(pinns::PID_HOLDER_FILE);
        let recorded = std::fs::read_to_string(&holder_file)
            .ok()
            .and_then(|s| s.trim().parse::<u32>().ok());
        for pid in self.pid_holder.into_iter().chain(recorded) {
            kill_holder(pid, &self.dir).map_err(fail)?;
        }
        remove_file(&holder_file).map_err(fail)?;
        for name in NS_FILES {
            let p = self.dir.join(name);
            unmount_all(&p).map_err(fail)?;
            remove_file(&p).map_err(fail)?;
        }
        Ok(())
    }
}

/// RFC 1123 label rules as the kernel and kubelet accept them: at most 64 bytes.
pub fn validate_hostname(h: &str, uts: bool) -> Result<()> {
    if !uts {
        return Err(Error::invalid("hostname needs a new UTS namespace"));
    }
    let ok = !h.is_empty()
        && h.len() <= 64
        && h.split('.').all(|l| {
            !l.is_empty()
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "hostname {:?} is not valid (1-64 bytes of dot-separated letters, digits and '-')",
            crate::error::echo(h)
        )))
    }
}

/// Whether `path` is itself the mount point of an nsfs mount (per /proc/self/mountinfo).
pub fn is_nsfs_mount(path: &Path) -> bool {
    mount_points()
        .iter()
        .any(|(mp, fs)| mp == path && fs == "nsfs")
}

/// `(mount point, fs type)` of every mount in our mount namespace.
fn mount_points() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let (left, right) = l.split_once(" - ")?;
            let mp = left.split(' ').nth(4)?;
            let fs = right.split(' ').next()?;
            Some((PathBuf::from(unescape(mp)), fs.to_string()))
        })
        .collect()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (b[i], oct) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Detaches every mount stacked on `path`; nothing mounted (or no such path) is fine. Syscalls
/// only: `umount2` says EINVAL once `path` is no mount point (reading mountinfo each time made
/// a pod's teardown cost grow with the node's mounts).
pub(crate) fn unmount_all(path: &Path) -> Result<()> {
    for _ in 0..16 {
        match rustix::mount::unmount(path, UnmountFlags::DETACH) {
            Ok(()) => continue,
            Err(Errno::INVAL) | Err(Errno::NOENT) => return Ok(()),
            Err(e) => return Err(Error::from(e).context(format!("unmount {}", path.display()))),
        }
    }
    Err(Error::internal(format!(
        "unmount {}: still mounted",
        path.display()
    )))
}

/// Removes a file; a missing one is fine.
pub(crate) fn remove_file(path: &Path) -> Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::from(e).context(format!("remove {}", path.display())))
        }
        _ => Ok(()),
    }
}

/// Whether `pid` is a live `bosun pod-init --dir <dir>` (guards against pid reuse).
fn is_our_holder(pid: u32, dir: &Path) -> bool {
    let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
    let dir = dir.as_os_str().as_encoded_bytes();
    args.windows(3)
        .any(|w| w[0] == b"pod-init" && w[1] == b"--dir" && w[2] == dir)
        && !is_zombie(pid)
}

/// Waits until the just-spawned holder `pid` shows as `bosun pod-init --dir <dir>`: a spawn
/// returns once the child's exec has begun, but the kernel fills in its new command line a
/// little later (seen on slow guests), and `open` only trusts a holder whose command line says
/// so. Fails when the child died or did not get there within 10 s.
pub(super) fn await_holder(pid: u32, dir: &Path) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !is_our_holder(pid, dir) {
        // Gone or a zombie: it died before its exec completed.
        if is_zombie(pid) {
            return Err(Error::internal(format!(
                "the pid namespace holder (pid {pid}) exited at start"
            )));
        }
        if Instant::now() > deadline {
            return Err(Error::internal(format!(
                "the pid namespace holder (pid {pid}) did not start within 10 s"
            )));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    Ok(())
}

fn is_zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s.rsplit_once(") ").map(|(_, r)| r.starts_with('Z')))
        .unwrap_or(true)
}

/// SIGKILLs the holder (which takes its whole pid namespace along) and waits up to 5 s for it.
fn kill_holder(pid: u32, dir: &Path) -> Result<()> {
    let Some(raw) = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    else {
        return Err(Error::internal(format!("pid {pid} out of range")));
    };
    // The descriptor is opened before the identity check, so the process signalled and waited
    // for is the one checked even if the pid were reused meanwhile.
    let fd = match rustix::process::pidfd_open(raw, rustix::process::PidfdFlags::empty()) {
        Ok(fd) => fd,
        // SRCH: gone. INVAL (Linux < 6.9) or NOENT (later): the pid now names a thread that
        // leads no process (the holder exited and the number went to another process's thread;
        // seen under critest's pod churn): not ours either, the holder being a process.
        Err(Errno::SRCH | Errno::INVAL | Errno::NOENT) => return Ok(()),
        Err(e) => return Err(Error::from(e).context(format!("pidfd of pid holder {pid}"))),
    };
    if !is_our_holder(pid, dir) {
        return Ok(());
    }
    match rustix::process::pidfd_send_signal(&fd, rustix::process::Signal::KILL) {
        Ok(()) | Err(Errno::SRCH) => {}
        Err(e) => return Err(Error::from(e).context(format!("kill pid holder {pid}"))),
    }
    // Readable once it has exited (reaped or not): no polling interval added to every stop.
    let timeout = rustix::event::Timespec {
        tv_sec: 5,
        tv_nsec: 0,
    };
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    loop {
        match rustix::event::poll(&mut fds, Some(&timeout)) {
            Ok(0) => return Err(Error::internal(format!("pid holder {pid} did not die"))),
            Ok(_) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(Error::from(e).context(format!("wait for pid holder {pid}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_pid_reused_by_a_thread_is_gone_not_an_error() {
        // A thread's id is a pid pidfd_open refuses (EINVAL): a stop that finds the holder's
        // pid reused so must count the holder as gone, and touch nothing.
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            let _ = tx.send(rustix::thread::gettid().as_raw_nonzero().get());
            let _ = done_rx.recv();
        });
        let tid = rx.recv().expect("tid");
        let tid = u32::try_from(tid).expect("positive tid");
        assert_ne!(tid, std::process::id());
        let dir = tempfile::tempdir().expect("tmp");
        let r = kill_holder(tid, dir.path());
        let _ = done_tx.send(());
        t.join().expect("thread");
        assert!(r.is_ok(), "{r:?}");
    }

    #[test]
    fn hostnames() {
        assert!(validate_hostname("web-0.pod", true).is_ok());
        for bad in ["", "-a", "a_b", "a..b", &"x".repeat(65)] {
            assert!(validate_hostname(bad, true).is_err(), "{bad}");
        }
        assert!(validate_hostname("a", false).is_err());
    }

    #[test]
    fn a_holder_that_dies_at_start_fails_at_once_and_an_impostor_is_never_trusted() {
        let dir = Path::new("/run/bosun-test-holder");
        let mut dead = Command::new("true").spawn().expect("spawn true");
        // Unreaped, it stays a zombie: what pinns sees when its holder died.
        while !is_zombie(dead.id()) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        let err = await_holder(dead.id(), dir).expect_err("a dead holder");
        assert!(err.message().contains("exited at start"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
        let _ = dead.wait();
        let mut other = Command::new("sleep")
            .arg("1000")
            .spawn()
            .expect("spawn sleep");
        assert!(!is_our_holder(other.id(), dir));
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn kill_holder_kills_only_our_holder_and_returns_once_it_is_dead() {
        let dir = Path::new("/run/bosun-test-kill-holder");
        // A shell blocked in its `read` builtin (no child) whose command line reads as a holder.
        let holder = |d: &Path| {
            Command::new("sh")
                .args(["-c", "read x", "pod-init", "--dir"])
                .arg(d)
                .stdin(Stdio::piped())
                .spawn()
                .expect("spawn sh")
        };
        let mut ours = holder(dir);
        let mut other = holder(Path::new("/run/bosun-test-other-pod"));
        while !is_our_holder(ours.id(), dir) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let started = Instant::now();
        kill_holder(other.id(), dir).expect("an impostor is left alone");
        assert!(
            other.try_wait().expect("try_wait").is_none(),
            "the other pod's holder lives"
        );
        kill_holder(ours.id(), dir).expect("kill");
        assert!(started.elapsed() < Duration::from_secs(1));
        // It has exited by the time kill_holder returns: a zombie until reaped here.
        assert!(is_zombie(ours.id()), "dead when kill_holder returned");
        let status = ours.wait().expect("reap");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(9)
        );
        kill_holder(ours.id(), dir).expect("gone: nothing to do");
        let _ = other.kill();
        let _ = other.wait();
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape(r"/a\040b\134c"), "/a b\\c");
        assert_eq!(unescape(r"/x\0"), r"/x\0");
    }

    #[test]
    fn create_refuses_bad_sysctls_before_running_anything() {
        let opts = NamespaceOptions {
            net: true,
            sysctls: [("kernel.panic".to_string(), "1".to_string())].into(),
            binary: Some(PathBuf::from("/nonexistent/bosun")),
            ..NamespaceOptions::default()
        };
        let err = PodNamespaces::create(Path::new("/nonexistent/dir"), &opts).expect_err("bad");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(err.message().contains("kernel.panic"), "{err}");
    }

    #[test]
    fn open_of_an_empty_dir_finds_nothing_and_remove_is_a_no_op() {
        let dir = tempfile::tempdir().expect("tempdir");
        let ns = PodNamespaces::open(dir.path()).expect("open");
        assert_eq!((ns.net.as_ref(), ns.pid_holder), (None, None));
        ns.remove().expect("remove");
        ns.remove().expect("remove twice");
    }
}
