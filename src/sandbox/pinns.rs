//! Pinning a pod's namespaces: from a short-lived daemon thread, or by `bosun pinns`, a short-lived single-threaded child (pods with their own pid or user namespace).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use std::os::fd::AsFd;

use rustix::mount::UnmountFlags;
use rustix::thread::{LinkNameSpaceType, UnshareFlags};

use super::sys;
use super::sysctl::{self, SysctlNs};
use super::userns::NsHolder;
use crate::error::{Error, Result, ResultExt};

/// The file under the pin directory that records the pid holder's host pid.
pub const PID_HOLDER_FILE: &str = "pid-holder";

/// Parsed `bosun pinns` arguments.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Args {
    dir: PathBuf,
    net: bool,
    ipc: bool,
    uts: bool,
    pid: bool,
    hostname: Option<String>,
    sysctls: BTreeMap<String, String>,
    /// `--uid-map`/`--gid-map` ranges as `uid_map` lines: the namespaces get their own user
    /// namespace (and are owned by it) when set.
    uid_map: String,
    gid_map: String,
}

impl Args {
    /// The namespaces pinned under their own name besides `user`, and whether each is wanted.
    fn pinned_kinds(&self) -> [(&'static str, bool); 3] {
        [("net", self.net), ("ipc", self.ipc), ("uts", self.uts)]
    }

    /// The `CLONE_NEW*` flags of the namespaces wanted (the user namespace aside).
    fn unshare_flags(&self) -> UnshareFlags {
        [
            (self.net, UnshareFlags::NEWNET),
            (self.ipc, UnshareFlags::NEWIPC),
            (self.uts, UnshareFlags::NEWUTS),
            (self.pid, UnshareFlags::NEWPID),
        ]
        .into_iter()
        .filter(|(wanted, _)| *wanted)
        .fold(UnshareFlags::empty(), |f, (_, flag)| f | flag)
    }
}

fn parse(args: &[OsString]) -> Result<Args> {
    let mut out = Args::default();
    let mut it = args.iter().map(|a| a.to_str());
    let value = |it: &mut dyn Iterator<Item = Option<&str>>, flag: &str| {
        it.next()
            .flatten()
            .map(str::to_string)
            .ok_or_else(|| Error::invalid(format!("{flag} needs a UTF-8 value")))
    };
    while let Some(arg) = it.next() {
        match arg {
            Some("--dir") => out.dir = PathBuf::from(value(&mut it, "--dir")?),
            Some("--net") => out.net = true,
            Some("--ipc") => out.ipc = true,
            Some("--uts") => out.uts = true,
            Some("--pid") => out.pid = true,
            Some("--hostname") => out.hostname = Some(value(&mut it, "--hostname")?),
            Some("--uid-map") => out
                .uid_map
                .push_str(&map_line(&value(&mut it, "--uid-map")?)?),
            Some("--gid-map") => out
                .gid_map
                .push_str(&map_line(&value(&mut it, "--gid-map")?)?),
            Some("--sysctl") => {
                let kv = value(&mut it, "--sysctl")?;
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| Error::invalid(format!("--sysctl {kv:?}: want KEY=VALUE")))?;
                out.sysctls.insert(k.to_string(), v.to_string());
            }
            other => return Err(Error::invalid(format!("unknown argument {other:?}"))),
        }
    }
    if !out.dir.is_absolute() {
        return Err(Error::invalid("--dir must be an absolute path"));
    }
    if out.hostname.is_some() && !out.uts {
        return Err(Error::invalid("--hostname needs --uts"));
    }
    if out.uid_map.is_empty() != out.gid_map.is_empty() {
        return Err(Error::invalid("--uid-map and --gid-map go together"));
    }
    Ok(out)
}

/// `INSIDE:HOST:LENGTH` → the `uid_map` line `INSIDE HOST LENGTH\n`.
fn map_line(arg: &str) -> Result<String> {
    let ids: Vec<u32> = arg
        .split(':')
        .map(|n| n.parse::<u32>())
        .collect::<std::result::Result<_, _>>()
        .map_err(|_| Error::invalid(format!("id map {arg:?}: want INSIDE:HOST:LENGTH")))?;
    match ids.as_slice() {
        [inside, host, len] if *len > 0 => Ok(format!("{inside} {host} {len}\n")),
        _ => Err(Error::invalid(format!(
            "id map {arg:?}: want INSIDE:HOST:LENGTH"
        ))),
    }
}

/// `bosun pinns ARGS…`: returns the exit status.
///
/// ```text
/// bosun pinns --dir DIR [--net] [--ipc] [--uts] [--pid] [--hostname NAME] [--sysctl K=V]...
///             [--uid-map IN:HOST:LEN... --gid-map IN:HOST:LEN...]
/// bosun pinns --hold [--spawn-init DIR]
/// ```
///
/// With ID maps, the namespaces are created by a `--hold` child in a new user namespace
/// (so they are owned by it; see [`run_in_userns`]) and the user namespace is pinned too.
/// Otherwise it unshares the requested namespaces, bind-mounts `/proc/self/ns/<ns>` onto empty files
/// `DIR/<ns>`, sets the hostname (new UTS namespace), brings `lo` up (new network namespace) and
/// writes the sysctls. With `--pid` it then spawns `bosun pod-init --dir DIR` as PID 1 of a new
/// pid namespace, records its host pid in `DIR/pid-holder` and prints `pid N`. Success: `ok` on
/// stdout, exit 0. Bad arguments: exit 2. Failure: everything done is undone, a message on
/// stderr, exit 1.
pub fn main(args: Vec<OsString>) -> i32 {
    if args.first().and_then(|a| a.to_str()) == Some("--hold") {
        return match args.get(1..).unwrap_or_default() {
            [] => super::userns::hold(None),
            [flag, dir] if flag == "--spawn-init" => super::userns::hold(Some(Path::new(dir))),
            _ => {
                eprintln!("bosun pinns: usage: bosun pinns --hold [--spawn-init DIR]");
                2
            }
        };
    }
    let args = match parse(&args) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("bosun pinns: {e}");
            return 2;
        }
    };
    let mut undo = Undo::default();
    match run(&args, &mut undo) {
        Ok(()) => {
            println!("ok");
            0
        }
        Err(e) => {
            undo.unwind();
            eprintln!("bosun pinns: {}: {e}", args.dir.display());
            1
        }
    }
}

/// What has been acquired so far, released in reverse on failure.
#[derive(Debug, Default)]
struct Undo {
    files: Vec<PathBuf>,
    mounts: Vec<PathBuf>,
    holder: Option<std::process::Child>,
    /// A pid holder started by a user namespace holder (not our child).
    holder_pid: Option<u32>,
}

impl Undo {
    fn unwind(&mut self) {
        if let Some(mut child) = self.holder.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(pid) = self.holder_pid.take().and_then(|p| i32::try_from(p).ok()) {
            if let Some(pid) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
            }
        }
        for m in self.mounts.drain(..).rev() {
            let _ = rustix::mount::unmount(&m, UnmountFlags::DETACH);
        }
        for f in self.files.drain(..).rev() {
            let _ = std::fs::remove_file(&f);
        }
    }
}

fn run(args: &Args, undo: &mut Undo) -> Result<()> {
    let checked = sysctl::validate(&args.sysctls, args.net, args.ipc)?;
    if !args.uid_map.is_empty() {
        return run_in_userns(args, &checked, undo);
    }
    sys::unshare_namespaces(args.unshare_flags()).ctx(|| "unshare")?;
    pin_and_configure(args, &checked, "/proc/self/ns", undo)?;
    if args.pid {
        let pid = spawn_holder(&args.dir, undo)?;
        record_holder(&args.dir, pid, undo)?;
    }
    Ok(())
}

/// Pins the new net, IPC and UTS namespaces of the calling process or thread (`ns_dir`:
/// `/proc/self/ns` or `/proc/thread-self/ns`) under `args.dir` and sets them up.
fn pin_and_configure(
    args: &Args,
    checked: &[(String, SysctlNs, String)],
    ns_dir: &str,
    undo: &mut Undo,
) -> Result<()> {
    for (name, wanted) in args.pinned_kinds() {
        if wanted {
            pin(&args.dir, name, ns_dir, undo)?;
        }
    }
    configure(args, checked)
}

/// Creates and pins a pod's net, IPC and UTS namespaces from a thread of this process that
/// exists only for that: the thread unshares them (they are per thread, unlike the user and
/// pid namespaces, which need `bosun pinns`), binds `/proc/thread-self/ns/<ns>` onto the pin
/// files (this process's mount namespace is the host's), sets them up, and ends. No process is
/// started: running `bosun pinns` cost each RunPodSandbox an exec of the daemon's binary (50
/// pods at once took 60-71 ms of machine CPU per pod with it, 48-54 ms without; issue 13). All
/// or nothing, as `bosun pinns`. `dir` is absolute and `checked` what [`sysctl::validate`]
/// made of `opts.sysctls`; `opts.pid` and `opts.uid_map` are not for this path.
pub(super) fn pin_from_thread(
    dir: &Path,
    opts: &super::NamespaceOptions,
    checked: Vec<(String, SysctlNs, String)>,
) -> Result<()> {
    let args = Args {
        dir: dir.to_path_buf(),
        net: opts.net,
        ipc: opts.ipc,
        uts: opts.uts,
        hostname: opts.hostname.clone(),
        ..Args::default()
    };
    let thread = std::thread::Builder::new()
        .name("bosun-pinns".into())
        .spawn(move || {
            let mut undo = Undo::default();
            let res = sys::unshare_thread_namespaces(args.unshare_flags())
                .ctx(|| "unshare")
                .and_then(|()| {
                    pin_and_configure(&args, &checked, "/proc/thread-self/ns", &mut undo)
                });
            if res.is_err() {
                undo.unwind();
            }
            res
        })
        .ctx(|| "start a thread to pin the namespaces")?;
    thread
        .join()
        .map_err(|_| Error::internal("the thread pinning the namespaces panicked"))?
}

/// The pod's namespaces owned by a new user namespace with the requested maps: a `--hold`
/// child creates them all at once (the kernel makes the user namespace first), we write its
/// maps, pin its namespaces from here (the host's mount namespace), enter its network, UTS and
/// IPC namespaces to set them up (still with the host's privileges, which cover namespaces
/// owned by a child user namespace), and let it go. With `--pid`, the child starts the pid
/// holder as PID 1 of its new pid namespace (a pid namespace cannot be entered before it has
/// one).
fn run_in_userns(
    args: &Args,
    checked: &[(String, SysctlNs, String)],
    undo: &mut Undo,
) -> Result<()> {
    let mut holder = NsHolder::spawn(
        Path::new("/proc/self/exe"),
        args.unshare_flags(),
        args.pid.then_some(args.dir.as_path()),
    )?;
    if args.pid {
        let pid = holder.init_pid()?;
        undo.holder_pid = Some(pid);
        record_holder(&args.dir, pid, undo)?;
    }
    holder.write_maps(&args.uid_map, &args.gid_map)?;
    let ns_dir = holder.proc_path("ns");
    pin(&args.dir, "user", &ns_dir, undo)?;
    for (name, wanted) in args.pinned_kinds() {
        if wanted {
            pin(&args.dir, name, &ns_dir, undo)?;
        }
    }
    for (name, wanted, typ) in [
        ("net", args.net, LinkNameSpaceType::Network),
        (
            "ipc",
            args.ipc,
            LinkNameSpaceType::InterProcessCommunication,
        ),
        ("uts", args.uts, LinkNameSpaceType::HostNameAndNISDomainName),
    ] {
        if wanted {
            let fd = holder.open_ns(name)?;
            rustix::thread::move_into_link_name_space(fd.as_fd(), Some(typ))
                .ctx(|| format!("enter the pod's {name} namespace"))?;
        }
    }
    configure(args, checked)
}

/// Hostname, `lo` up and sysctls, in the namespaces this process is in.
fn configure(args: &Args, checked: &[(String, SysctlNs, String)]) -> Result<()> {
    if let Some(hostname) = &args.hostname {
        std::fs::write("/proc/sys/kernel/hostname", hostname)
            .ctx(|| format!("set hostname {hostname:?}"))?;
    }
    if args.net {
        sys::link_up("lo").ctx(|| "bring lo up")?;
    }
    for (key, ns, value) in checked {
        let path = sysctl::proc_path(key)?;
        let what = match ns {
            SysctlNs::Net => "net",
            SysctlNs::Ipc => "ipc",
        };
        std::fs::write(&path, value).ctx(|| {
            format!(
                "sysctl {key:?} ({what} namespace): write {}",
                path.display()
            )
        })?;
    }
    Ok(())
}

/// Records the pid holder in `dir` once it runs as one, and reports it on stdout.
fn record_holder(dir: &Path, pid: u32, undo: &mut Undo) -> Result<()> {
    super::await_holder(pid, dir)?;
    let file = dir.join(PID_HOLDER_FILE);
    crate::store::atomic::write_atomic(&file, format!("{pid}\n").as_bytes())?;
    undo.files.push(file);
    println!("pid {pid}");
    Ok(())
}

/// Creates `dir/name` (it must not exist) and binds `ns_dir/name` (a `/proc/<pid>/ns`) onto it.
fn pin(dir: &Path, name: &str, ns_dir: impl AsRef<Path>, undo: &mut Undo) -> Result<()> {
    let target = dir.join(name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&target)
        .ctx(|| format!("create {}", target.display()))?;
    undo.files.push(target.clone());
    rustix::mount::mount_bind(ns_dir.as_ref().join(name), &target)
        .ctx(|| format!("bind {name} namespace onto {}", target.display()))?;
    undo.mounts.push(target);
    Ok(())
}

/// Spawns `bosun pod-init` (the first child after `unshare(CLONE_NEWPID)`, so PID 1 there).
fn spawn_holder(dir: &Path, undo: &mut Undo) -> Result<u32> {
    let child = super::init::spawn(dir).ctx(|| "spawn the pid namespace holder")?;
    let pid = child.id();
    undo.holder = Some(child);
    let _ = std::io::stdout().flush();
    Ok(pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses_flags_and_sysctls() {
        let a = parse(&os(&[
            "--dir",
            "/x",
            "--net",
            "--uts",
            "--hostname",
            "h",
            "--sysctl",
            "net.a.b=1=2",
        ]))
        .expect("parse");
        assert!(a.net && a.uts && !a.ipc && !a.pid);
        assert_eq!(a.hostname.as_deref(), Some("h"));
        assert_eq!(a.sysctls.get("net.a.b").map(String::as_str), Some("1=2"));
    }

    #[test]
    fn refuses_bad_arguments() {
        for bad in [
            &["--net"][..],
            &["--dir", "rel"],
            &["--dir", "/x", "--bogus"],
            &["--dir", "/x", "--hostname", "h"],
            &["--dir", "/x", "--sysctl", "novalue"],
            &["--dir"],
        ] {
            assert!(parse(&os(bad)).is_err(), "{bad:?}");
        }
    }
}
