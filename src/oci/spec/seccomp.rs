//! Seccomp: the embedded RuntimeDefault profile and Localhost profiles, both in the moby profile format (archMap, includes/excludes), resolved for this host's architecture and the container's capabilities into the spec's `linux.seccomp`.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompArg, LinuxSeccompFilterFlag, LinuxSyscall,
};
use serde::Deserialize;

use crate::error::{Error, Result};

/// The RuntimeDefault profile, authored for bosun (see the file's `comment`).
pub const DEFAULT_PROFILE_JSON: &str = include_str!("seccomp_default.json");
/// Localhost profiles larger than this are refused.
const MAX_PROFILE: u64 = 4 << 20;

/// A profile as written on disk: moby's format, of which the OCI `linux.seccomp` object is a
/// subset (so both kinds of Localhost file load).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Profile {
    /// Action for syscalls no rule matches.
    pub default_action: LinuxSeccompAction,
    /// errno for an ERRNO default action (EPERM when absent).
    #[serde(default)]
    pub default_errno_ret: Option<u32>,
    /// Explicit architectures (exclusive with `arch_map`).
    #[serde(default)]
    pub architectures: Option<Vec<Arch>>,
    /// Native architecture → the compat architectures to include with it.
    #[serde(default)]
    pub arch_map: Option<Vec<ArchMap>>,
    /// Filter flags.
    #[serde(default)]
    pub flags: Option<Vec<LinuxSeccompFilterFlag>>,
    /// Seccomp notify listener socket.
    #[serde(default)]
    pub listener_path: Option<PathBuf>,
    /// Opaque data for the listener.
    #[serde(default)]
    pub listener_metadata: Option<String>,
    /// Rules, in order.
    #[serde(default)]
    pub syscalls: Option<Vec<Rule>>,
}

/// One `archMap` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ArchMap {
    /// The native architecture.
    pub architecture: Arch,
    /// Compat architectures filtered alongside it.
    #[serde(default)]
    pub sub_architectures: Option<Vec<Arch>>,
}

/// One rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Legacy single name (exclusive with `names`).
    #[serde(default)]
    pub name: Option<String>,
    /// Syscall names.
    #[serde(default)]
    pub names: Option<Vec<String>>,
    /// What happens on a match.
    pub action: LinuxSeccompAction,
    /// errno for ERRNO/TRACE actions.
    #[serde(default)]
    pub errno_ret: Option<u32>,
    /// Argument conditions (all must hold).
    #[serde(default)]
    pub args: Option<Vec<LinuxSeccompArg>>,
    /// Apply only when all of these hold.
    #[serde(default)]
    pub includes: Option<Filter>,
    /// Skip when any of these holds.
    #[serde(default)]
    pub excludes: Option<Filter>,
}

/// A rule condition.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Filter {
    /// Capabilities (`CAP_*`) in the container's bounding set.
    #[serde(default)]
    pub caps: Option<Vec<String>>,
    /// Go architecture names (`amd64`, `arm64`, `386`, ...) of the host.
    #[serde(default)]
    pub arches: Option<Vec<String>>,
    /// Minimum kernel `major.minor`.
    #[serde(default)]
    pub min_kernel: Option<String>,
}

/// Where a profile is resolved: the host architecture and kernel, the container's capabilities.
#[derive(Debug, Clone)]
pub struct Target<'a> {
    /// Go-style architecture name of the host (`amd64`, `arm64`; see [`host_arch`]).
    pub arch: &'a str,
    /// Kernel version `(major, minor)`.
    pub kernel: (u32, u32),
    /// The container's bounding capabilities.
    pub caps: &'a BTreeSet<&'static str>,
}

/// The Go name of this build's architecture, as profiles' `arches` filters use it.
pub fn host_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        "x86" => "386",
        "powerpc64" => "ppc64le",
        other => other,
    }
}

fn native_arch(arch: &str) -> Option<Arch> {
    Some(match arch {
        "amd64" => Arch::ScmpArchX86_64,
        "arm64" => Arch::ScmpArchAarch64,
        "386" => Arch::ScmpArchX86,
        "arm" => Arch::ScmpArchArm,
        "riscv64" => Arch::ScmpArchRiscv64,
        "s390x" => Arch::ScmpArchS390x,
        "ppc64le" => Arch::ScmpArchPpc64le,
        _ => return None,
    })
}

/// `6.18.44-fc` → `(6, 18)`; unparsable parts count as 0.
pub fn parse_kernel(release: &str) -> (u32, u32) {
    let mut it = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0))
}

/// The running kernel's `(major, minor)`.
pub fn host_kernel() -> (u32, u32) {
    std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| parse_kernel(s.trim()))
        .unwrap_or((0, 0))
}

impl Profile {
    /// Parses profile JSON; `origin` names it in errors.
    pub fn parse(origin: &str, json: &str) -> Result<Profile> {
        serde_json::from_str(json)
            .map_err(|e| Error::invalid(format!("seccomp profile {origin}: {e}")))
    }

    /// The spec's `linux.seccomp` for `target`, following moby's setupSeccomp rules.
    pub fn resolve(&self, origin: &str, target: &Target) -> Result<LinuxSeccomp> {
        let bad = |what: String| Error::invalid(format!("seccomp profile {origin}: {what}"));
        let mut architectures = self.architectures.clone().unwrap_or_default();
        if let Some(map) = &self.arch_map {
            if !architectures.is_empty() {
                return Err(bad("both architectures and archMap are set".into()));
            }
            let native = native_arch(target.arch);
            for m in map.iter().filter(|m| Some(m.architecture) == native) {
                architectures.push(m.architecture);
                architectures.extend(m.sub_architectures.iter().flatten().copied());
            }
        }
        let mut syscalls = Vec::new();
        for rule in self.syscalls.iter().flatten() {
            if !applies(rule, target) {
                continue;
            }
            let names = match (&rule.name, &rule.names) {
                (Some(_), Some(n)) if !n.is_empty() => {
                    return Err(bad("a rule sets both name and names".into()))
                }
                (Some(n), _) => vec![n.clone()],
                (None, Some(n)) if !n.is_empty() => n.clone(),
                _ => return Err(bad("a rule has no syscall names".into())),
            };
            let mut s = LinuxSyscall::default();
            s.set_names(names);
            s.set_action(rule.action);
            s.set_errno_ret(rule.errno_ret);
            s.set_args(rule.args.clone().filter(|a| !a.is_empty()));
            syscalls.push(s);
        }
        let mut out = LinuxSeccomp::default();
        out.set_default_action(self.default_action);
        out.set_default_errno_ret(self.default_errno_ret);
        out.set_architectures(Some(architectures).filter(|a| !a.is_empty()));
        out.set_flags(self.flags.clone().filter(|f| !f.is_empty()));
        out.set_listener_path(self.listener_path.clone());
        out.set_listener_metadata(self.listener_metadata.clone());
        out.set_syscalls(Some(syscalls));
        Ok(out)
    }
}

fn kernel_at_least(have: (u32, u32), want: &str) -> bool {
    have >= parse_kernel(want)
}

fn applies(rule: &Rule, t: &Target) -> bool {
    if let Some(ex) = &rule.excludes {
        if ex.arches.iter().flatten().any(|a| a == t.arch)
            || ex
                .caps
                .iter()
                .flatten()
                .any(|c| t.caps.contains(c.as_str()))
            || ex
                .min_kernel
                .as_deref()
                .is_some_and(|k| kernel_at_least(t.kernel, k))
        {
            return false;
        }
    }
    if let Some(inc) = &rule.includes {
        let arches = inc.arches.as_deref().unwrap_or_default();
        if !arches.is_empty() && !arches.iter().any(|a| a == t.arch) {
            return false;
        }
        if !inc
            .caps
            .iter()
            .flatten()
            .all(|c| t.caps.contains(c.as_str()))
        {
            return false;
        }
        if inc
            .min_kernel
            .as_deref()
            .is_some_and(|k| !kernel_at_least(t.kernel, k))
        {
            return false;
        }
    }
    true
}

/// The embedded RuntimeDefault profile, parsed once.
pub fn default_profile() -> Result<&'static Profile> {
    static PROFILE: OnceLock<std::result::Result<Profile, Error>> = OnceLock::new();
    PROFILE
        .get_or_init(|| {
            Profile::parse("runtime/default", DEFAULT_PROFILE_JSON)
                .map_err(|e| Error::internal(e.message().to_string()))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Loads a Localhost profile: `localhost_ref` is an absolute host path (an optional
/// `localhost/` prefix, the kubelet's legacy form, is dropped as containerd does).
pub fn load_localhost(localhost_ref: &str) -> Result<Profile> {
    let path = localhost_ref
        .strip_prefix("localhost/")
        .unwrap_or(localhost_ref);
    if !Path::new(path).is_absolute() {
        return Err(Error::invalid(format!(
            "seccomp profile {localhost_ref:?}: a Localhost profile must be an absolute path"
        )));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| Error::invalid(format!("seccomp profile {path}: {e}")))?;
    let mut text = String::new();
    file.take(MAX_PROFILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::invalid(format!("seccomp profile {path}: {e}")))?;
    if text.len() as u64 > MAX_PROFILE {
        return Err(Error::invalid(format!(
            "seccomp profile {path}: larger than {MAX_PROFILE} bytes"
        )));
    }
    Profile::parse(path, &text)
}

#[cfg(test)]
#[path = "seccomp_tests.rs"]
mod tests;
