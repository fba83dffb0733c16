//! Masked and read-only /proc and /sys paths, AppArmor, and the seccomp choice.

use std::collections::BTreeSet;

use oci_spec::runtime::LinuxSeccomp;

use crate::error::{Error, Result};
use crate::oci::spec::apparmor::localhost_name;
use crate::oci::spec::request::{Security, SecurityProfile};
use crate::oci::spec::seccomp::{self, Target};

/// Paths hidden from the container (the kubelet's defaultMaskedPaths and containerd's
/// populateDefaultUnixSpec list the same ones).
pub const DEFAULT_MASKED_PATHS: [&str; 11] = [
    "/proc/acpi",
    "/proc/asound",
    "/proc/kcore",
    "/proc/keys",
    "/proc/latency_stats",
    "/proc/timer_list",
    "/proc/timer_stats",
    "/proc/sched_debug",
    "/sys/firmware",
    "/sys/devices/virtual/powercap",
    "/proc/scsi",
];

/// Paths made read-only (the kubelet's defaultReadonlyPaths).
pub const DEFAULT_READONLY_PATHS: [&str; 5] = [
    "/proc/bus",
    "/proc/fs",
    "/proc/irq",
    "/proc/sys",
    "/proc/sysrq-trigger",
];

/// `(masked, readonly)`: the request's lists, the defaults when it gives none, nothing when
/// privileged (containerd's WithPrivileged clears both).
pub fn masked_and_readonly(sec: &Security) -> (Vec<String>, Vec<String>) {
    if sec.privileged {
        return (Vec::new(), Vec::new());
    }
    let or_default = |given: &Option<Vec<String>>, default: &[&str]| {
        given
            .clone()
            .unwrap_or_else(|| default.iter().map(|s| s.to_string()).collect())
    };
    (
        or_default(&sec.masked_paths, &DEFAULT_MASKED_PATHS),
        or_default(&sec.readonly_paths, &DEFAULT_READONLY_PATHS),
    )
}

/// The AppArmor profile name for the process, following containerd's GenerateApparmorSpecOpts
/// (internal/cri/sputil/apparmor_linux.go): Unconfined → none; RuntimeDefault → the loaded
/// default profile, none when privileged or when the host has no AppArmor; Localhost → that
/// profile, which needs AppArmor on the host (FailedPrecondition otherwise).
pub fn apparmor_profile(
    container: &str,
    sec: &Security,
    available: bool,
    default_profile: Option<&str>,
) -> Result<Option<String>> {
    match &sec.apparmor {
        SecurityProfile::Unconfined => Ok(None),
        SecurityProfile::RuntimeDefault if sec.privileged || !available => Ok(None),
        SecurityProfile::RuntimeDefault => {
            if default_profile.is_none() {
                tracing::debug!(container, "no runtime-default AppArmor profile is loaded");
            }
            Ok(default_profile.map(String::from))
        }
        SecurityProfile::Localhost(name) => {
            let object = format!("container {container}");
            Ok(Some(localhost_name(&object, name, available)?.to_string()))
        }
    }
}

/// The seccomp filter: none for a privileged container, whatever profile it names (as
/// containerd and CRI-O: critest "should ignore a seccomp profile that blocks setting
/// hostname when privileged", issue 12); otherwise Unconfined → none, RuntimeDefault → the
/// embedded profile, Localhost → the file.
pub fn seccomp_filter(
    container: &str,
    sec: &Security,
    caps: &BTreeSet<&'static str>,
    kernel: (u32, u32),
) -> Result<Option<LinuxSeccomp>> {
    let target = Target {
        arch: seccomp::host_arch(),
        kernel,
        caps,
    };
    let ctx = |e: Error| e.context(format!("container {container}"));
    if sec.privileged {
        return Ok(None);
    }
    match &sec.seccomp {
        SecurityProfile::Unconfined => Ok(None),
        SecurityProfile::RuntimeDefault => seccomp::default_profile()
            .and_then(|p| p.resolve("runtime/default", &target))
            .map(Some)
            .map_err(ctx),
        SecurityProfile::Localhost(path) => seccomp::load_localhost(path)
            .and_then(|p| p.resolve(path, &target))
            .map(Some)
            .map_err(ctx),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn sec(apparmor: SecurityProfile, privileged: bool) -> Security {
        Security {
            apparmor,
            privileged,
            ..Default::default()
        }
    }

    #[test]
    fn masked_paths_default_explicit_or_cleared() {
        let (m, r) = masked_and_readonly(&Security::default());
        assert_eq!(m.len(), 11);
        assert!(m.contains(&"/proc/kcore".to_string()));
        assert_eq!(r.len(), 5);
        let explicit = Security {
            masked_paths: Some(vec!["/proc/x".into()]),
            readonly_paths: Some(Vec::new()),
            ..Default::default()
        };
        assert_eq!(
            masked_and_readonly(&explicit),
            (vec!["/proc/x".to_string()], Vec::new())
        );
        let privileged = Security {
            privileged: true,
            masked_paths: Some(vec!["/proc/x".into()]),
            ..Default::default()
        };
        assert_eq!(masked_and_readonly(&privileged), (Vec::new(), Vec::new()));
    }

    #[test]
    fn apparmor_choices() {
        use SecurityProfile::*;
        let local = || Localhost("localhost/my-profile".to_string());
        let cases: Vec<(Security, bool, Option<&str>, Option<&str>)> = vec![
            (sec(Unconfined, false), true, Some("bosun-default"), None),
            (
                sec(RuntimeDefault, false),
                true,
                Some("bosun-default"),
                Some("bosun-default"),
            ),
            (
                sec(RuntimeDefault, false),
                false,
                Some("bosun-default"),
                None,
            ),
            (sec(RuntimeDefault, true), true, Some("bosun-default"), None),
            (sec(RuntimeDefault, false), true, None, None),
            (sec(local(), false), true, None, Some("my-profile")),
            (sec(local(), true), true, None, Some("my-profile")),
        ];
        for (s, available, default, want) in cases {
            let got = apparmor_profile("c", &s, available, default).expect("profile");
            assert_eq!(
                got.as_deref(),
                want,
                "{:?} available={available}",
                s.apparmor
            );
        }
        let err = apparmor_profile("web", &sec(local(), false), false, None).expect_err("no aa");
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
        assert!(
            err.message().contains("my-profile") && err.message().contains("web"),
            "{err}"
        );
        let err = apparmor_profile("c", &sec(Localhost(String::new()), false), true, None)
            .expect_err("empty");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    }

    #[test]
    fn seccomp_choices() {
        let caps = BTreeSet::new();
        let with = |p: SecurityProfile, privileged: bool| Security {
            seccomp: p,
            privileged,
            ..Default::default()
        };
        let f = |s: &Security| seccomp_filter("c", s, &caps, (6, 1));
        assert!(f(&with(SecurityProfile::Unconfined, false))
            .expect("u")
            .is_none());
        assert!(f(&with(SecurityProfile::RuntimeDefault, false))
            .expect("d")
            .is_some());
        assert!(f(&with(SecurityProfile::RuntimeDefault, true))
            .expect("p")
            .is_none());
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("p.json");
        std::fs::write(&path, r#"{"defaultAction":"SCMP_ACT_ALLOW"}"#).expect("write");
        let local = SecurityProfile::Localhost(path.display().to_string());
        assert!(f(&with(local.clone(), false)).expect("localhost").is_some());
        std::fs::remove_file(&path).expect("rm");
        // Privileged: no filter at all, not even from a named file (missing or not).
        assert!(f(&with(local.clone(), true))
            .expect("privileged localhost")
            .is_none());
        let err = f(&with(local, false)).expect_err("missing");
        assert!(
            err.message().contains("p.json") && err.message().starts_with("container c"),
            "{err}"
        );
    }
}
