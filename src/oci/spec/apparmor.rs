//! AppArmor: bosun's runtime-default profile (written and loaded once at daemon start) and the check of a request's profile against the kernel's loaded ones.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::error::{Error, Result};
use crate::oci::spec::request::{Security, SecurityProfile};

/// The name of bosun's runtime-default profile (containerd's is `cri-containerd.apparmor.d`,
/// CRI-O's `crio-default`).
pub const DEFAULT_PROFILE: &str = "bosun-default";

/// The kernel's list of loaded profiles, one `name (mode)` a line.
pub const PROFILES_FILE: &str = "/sys/kernel/security/apparmor/profiles";

/// The text of bosun's runtime-default profile `name`. Written for bosun; its shape is the one
/// containerd's, CRI-O's and Docker's defaults share: a container may use files, the network
/// and the capabilities its bounding set leaves it, but not mount, not write the kernel's knobs
/// under /proc and /sys, and not trace or signal processes of other profiles. Self-contained
/// (no `#include`): it loads where only `apparmor_parser` is installed.
pub fn profile_text(name: &str) -> String {
    format!(
        r#"# bosun's runtime-default AppArmor profile, written by the bosun daemon at start and
# loaded with apparmor_parser. Containers asking for RuntimeDefault (or for nothing, unless
# privileged) run under it.
profile {name} flags=(attach_disconnected,mediate_deleted) {{
  # Ordinary work: files (narrowed below), sockets, the capabilities runc leaves.
  file,
  network,
  capability,
  umount,

  # The runtime made the mounts; the container does not make more.
  deny mount,
  deny pivot_root,

  # Only the runtime (unconfined) and this profile's processes may signal or trace ours.
  signal (receive) peer=unconfined,
  signal (send,receive) peer={name},
  ptrace (trace,read,tracedby,readby) peer={name},

  # Kernel knobs under /proc: no writing the files at /proc's top (sysrq-trigger, …) or
  # anything below /proc/sys; the memory and trigger files not even read.
  deny /proc/* wl,
  deny /proc/sys/** wl,
  deny /proc/{{acpi,bus,driver,fs,irq,sysvipc,tty}}/** wl,
  deny /proc/{{kcore,kmem,mem,sysrq-trigger}} rwklx,

  # /sys is read-only but for the cgroup tree (a container may manage its own cgroup).
  deny /sys/{{[^f]*,f[^s]*}}/** wklx,
  deny /sys/fs/{{[^c]*,c[^g]*,cg[^r]*}}/** wklx,
  deny /sys/firmware/** rwklx,
  deny /sys/kernel/security/** rwklx,
}}
"#
    )
}

/// The profile names in the kernel's list (`name (mode)` lines; a name may hold spaces).
pub fn parse_loaded(text: &str) -> Vec<&str> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_end();
            match l.rsplit_once(" (") {
                Some((name, mode)) if mode.ends_with(')') => Some(name),
                _ if l.is_empty() => None,
                _ => Some(l),
            }
        })
        .collect()
}

/// Whether profile `name` is loaded in the kernel (reads [`PROFILES_FILE`]).
pub fn is_loaded(name: &str) -> std::io::Result<bool> {
    let text = std::fs::read_to_string(PROFILES_FILE)?;
    Ok(parse_loaded(&text).contains(&name))
}

/// `apparmor_parser` in PATH or /sbin, /usr/sbin (daemons started by systemd often have a
/// PATH without sbin).
pub fn find_parser() -> Option<PathBuf> {
    crate::oci::spec::host::find_in_path("apparmor_parser").or_else(|| {
        ["/usr/sbin/apparmor_parser", "/sbin/apparmor_parser"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
    })
}

/// The runtime-default profile's state at daemon start: its name when loaded, and a sentence
/// for the log and Status saying how (or why none, and what containers then get).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultProfile {
    /// The loaded profile RuntimeDefault containers get; `None`: they run unconfined.
    pub name: Option<String>,
    /// How it was loaded, or why there is none.
    pub message: String,
}

/// Makes sure [`DEFAULT_PROFILE`] is loaded, once at start on a host with AppArmor enabled:
/// when the kernel already has it (an earlier or a second daemon loaded it) it is used as is,
/// as containerd does; else its text is written to `dir` (the daemon's root, never
/// /etc/apparmor.d) and loaded with `apparmor_parser -r` (replace: two daemons loading at once
/// both succeed). Without `apparmor_parser` nothing is loaded: the kernel's policy interface
/// takes compiled policy only, and bosun has no compiler of its own.
pub fn load_default(dir: &Path) -> DefaultProfile {
    let loaded = |how: String| DefaultProfile {
        name: Some(DEFAULT_PROFILE.to_string()),
        message: how,
    };
    let unconfined = "containers asking for RuntimeDefault (or for no profile) run unconfined";
    match is_loaded(DEFAULT_PROFILE) {
        Ok(true) => return loaded(format!("{DEFAULT_PROFILE} was already loaded")),
        Ok(false) => {}
        Err(e) => {
            return DefaultProfile {
                name: None,
                message: format!("cannot read {PROFILES_FILE}: {e}; {unconfined}"),
            }
        }
    }
    let Some(parser) = find_parser() else {
        return DefaultProfile {
            name: None,
            message: format!(
                "apparmor_parser not found (install the apparmor package): bosun cannot load \
                 its {DEFAULT_PROFILE} profile; {unconfined}"
            ),
        };
    };
    match write_and_load(dir, &parser) {
        Ok(file) => loaded(format!(
            "{DEFAULT_PROFILE} loaded from {} with {}",
            file.display(),
            parser.display()
        )),
        Err(e) => DefaultProfile {
            name: None,
            message: format!("{e}; {unconfined}"),
        },
    }
}

/// Writes the profile to `dir/bosun-default` (atomically: a second daemon or a concurrent reload may read it) and
/// loads it with `parser`, skipping the parser's cache.
fn write_and_load(dir: &Path, parser: &Path) -> std::result::Result<PathBuf, String> {
    let file = dir.join(DEFAULT_PROFILE);
    // Unique per call: two CreateContainers may reload at once.
    static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let seq = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = dir.join(format!(".{DEFAULT_PROFILE}.{}.{seq}", std::process::id()));
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&tmp, profile_text(DEFAULT_PROFILE)))
        .and_then(|()| std::fs::rename(&tmp, &file))
        .map_err(|e| {
            let _ = std::fs::remove_file(&tmp);
            format!("write {}: {e}", file.display())
        })?;
    let out = Command::new(parser)
        .arg("--replace")
        .arg("--skip-cache")
        .arg(&file)
        .output()
        .map_err(|e| format!("run {}: {e}", parser.display()))?;
    if !out.status.success() {
        return Err(format!(
            "{} --replace {} failed ({}): {}",
            parser.display(),
            file.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(file)
}

/// A Localhost profile's name (`localhost/` stripped): InvalidArgument when empty,
/// FailedPrecondition naming it when AppArmor is off (`enabled` false).
pub fn localhost_name<'a>(object: &str, name: &'a str, enabled: bool) -> Result<&'a str> {
    let name = name.strip_prefix("localhost/").unwrap_or(name);
    if name.is_empty() {
        return Err(Error::invalid(format!(
            "{object}: security_context.apparmor: a Localhost profile needs a name"
        )));
    }
    if !enabled {
        return Err(Error::precondition(format!(
            "{object}: security_context.apparmor: profile {name:?} is required but AppArmor \
             is not enabled on this host"
        )));
    }
    Ok(name)
}

/// Loads [`DEFAULT_PROFILE`] again from `dir` (someone removed it from the kernel since start).
pub fn reload_default(dir: &Path) -> std::result::Result<(), String> {
    let parser = find_parser().ok_or("apparmor_parser not found")?;
    write_and_load(dir, &parser).map(|_| ())
}

/// CreateContainer's AppArmor check, before anything is made: a Localhost profile needs
/// AppArmor on the host and must be loaded in the kernel (`loaded` lists the names, read only
/// when needed), as containerd checks. The runtime-default profile a container would get may
/// have been removed since start (`apparmor_parser -R`): it is loaded again with `reload`, as
/// containerd does at container creation. Errors name the profile.
pub fn check(
    object: &str,
    sec: &Security,
    enabled: bool,
    default_profile: Option<&str>,
    loaded: impl FnOnce() -> std::io::Result<String>,
    reload: impl FnOnce() -> std::result::Result<(), String>,
) -> Result<()> {
    let name = match &sec.apparmor {
        SecurityProfile::Unconfined => return Ok(()),
        SecurityProfile::RuntimeDefault if sec.privileged || !enabled => return Ok(()),
        SecurityProfile::RuntimeDefault => match default_profile {
            Some(name) => name,
            None => return Ok(()),
        },
        SecurityProfile::Localhost(name) => localhost_name(object, name, enabled)?,
    };
    let text = loaded().map_err(|e| {
        Error::precondition(format!(
            "{object}: security_context.apparmor: cannot check that profile {name:?} is \
             loaded: read {PROFILES_FILE}: {e}"
        ))
    })?;
    if parse_loaded(&text).contains(&name) {
        return Ok(());
    }
    if Some(name) == default_profile {
        return match reload() {
            Ok(()) => {
                tracing::warn!(profile = %name, "AppArmor profile was removed since start: loaded it again");
                Ok(())
            }
            Err(e) => Err(Error::precondition(format!(
                "{object}: security_context.apparmor: profile {name:?} was removed from the \
                 kernel since bosun started and loading it again failed: {e}"
            ))),
        };
    }
    Err(Error::precondition(format!(
        "{object}: security_context.apparmor: profile {name:?} is not loaded in the kernel \
         (load it first with apparmor_parser)"
    )))
}

#[cfg(test)]
#[path = "apparmor_tests.rs"]
mod tests;
