//! `bosun pinns`: a short-lived, single-threaded child that creates and pins a pod's namespaces.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::fs::OpenOptions;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use rustix::mount::UnmountFlags;
use rustix::thread::UnshareFlags;

use super::sys;
use super::sysctl::{self, SysctlNs};
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
    Ok(out)
}

/// `bosun pinns ARGS…`: returns the exit status.
///
/// ```text
/// bosun pinns --dir DIR [--net] [--ipc] [--uts] [--pid] [--hostname NAME] [--sysctl K=V]...
/// ```
///
/// It unshares the requested namespaces, bind-mounts `/proc/self/ns/<ns>` onto empty files
/// `DIR/<ns>`, sets the hostname (new UTS namespace), brings `lo` up (new network namespace) and
/// writes the sysctls. With `--pid` it then spawns `bosun pod-init --dir DIR` as PID 1 of a new
/// pid namespace, records its host pid in `DIR/pid-holder` and prints `pid N`. Success: `ok` on
/// stdout, exit 0. Bad arguments: exit 2. Failure: everything done is undone, a message on
/// stderr, exit 1.
pub fn main(args: Vec<OsString>) -> i32 {
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
}

impl Undo {
    fn unwind(&mut self) {
        if let Some(mut child) = self.holder.take() {
            let _ = child.kill();
            let _ = child.wait();
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
    let mut flags = UnshareFlags::empty();
    let kinds = [
        ("net", args.net, UnshareFlags::NEWNET),
        ("ipc", args.ipc, UnshareFlags::NEWIPC),
        ("uts", args.uts, UnshareFlags::NEWUTS),
    ];
    for (_, wanted, flag) in kinds {
        if wanted {
            flags |= flag;
        }
    }
    if args.pid {
        flags |= UnshareFlags::NEWPID;
    }
    sys::unshare_namespaces(flags).ctx(|| "unshare")?;
    for (name, wanted, _) in kinds {
        if wanted {
            pin(&args.dir, name, undo)?;
        }
    }
    if let Some(hostname) = &args.hostname {
        std::fs::write("/proc/sys/kernel/hostname", hostname)
            .ctx(|| format!("set hostname {hostname:?}"))?;
    }
    if args.net {
        sys::link_up("lo").ctx(|| "bring lo up")?;
    }
    for (key, ns, value) in &checked {
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
    if args.pid {
        let pid = spawn_holder(&args.dir, undo)?;
        let file = args.dir.join(PID_HOLDER_FILE);
        crate::store::atomic::write_atomic(&file, format!("{pid}\n").as_bytes())?;
        undo.files.push(file);
        println!("pid {pid}");
    }
    Ok(())
}

/// Creates `dir/name` (it must not exist) and binds our `/proc/self/ns/name` onto it.
fn pin(dir: &Path, name: &str, undo: &mut Undo) -> Result<()> {
    let target = dir.join(name);
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o444)
        .open(&target)
        .ctx(|| format!("create {}", target.display()))?;
    undo.files.push(target.clone());
    rustix::mount::mount_bind(format!("/proc/self/ns/{name}"), &target)
        .ctx(|| format!("bind {name} namespace onto {}", target.display()))?;
    undo.mounts.push(target);
    Ok(())
}

/// Spawns `bosun pod-init` (the first child after `unshare(CLONE_NEWPID)`, so PID 1 there).
fn spawn_holder(dir: &Path, undo: &mut Undo) -> Result<u32> {
    let child = Command::new("/proc/self/exe")
        .arg("pod-init")
        .arg("--dir")
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .current_dir("/")
        .spawn()
        .ctx(|| "spawn the pid namespace holder")?;
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
