//! Linux capabilities: names, the default container set, CRI add/drop edits, the daemon's own set.

use std::collections::BTreeSet;

use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

use crate::error::{Error, Result};
use crate::oci::spec::request::CapabilityEdits;

/// Every capability the kernel defines, by bit number (`include/uapi/linux/capability.h`).
pub const ALL_CAPABILITIES: [&str; 41] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_DAC_READ_SEARCH",
    "CAP_FOWNER",
    "CAP_FSETID",
    "CAP_KILL",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETPCAP",
    "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE",
    "CAP_NET_BROADCAST",
    "CAP_NET_ADMIN",
    "CAP_NET_RAW",
    "CAP_IPC_LOCK",
    "CAP_IPC_OWNER",
    "CAP_SYS_MODULE",
    "CAP_SYS_RAWIO",
    "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE",
    "CAP_SYS_PACCT",
    "CAP_SYS_ADMIN",
    "CAP_SYS_BOOT",
    "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE",
    "CAP_SYS_TIME",
    "CAP_SYS_TTY_CONFIG",
    "CAP_MKNOD",
    "CAP_LEASE",
    "CAP_AUDIT_WRITE",
    "CAP_AUDIT_CONTROL",
    "CAP_SETFCAP",
    "CAP_MAC_OVERRIDE",
    "CAP_MAC_ADMIN",
    "CAP_SYSLOG",
    "CAP_WAKE_ALARM",
    "CAP_BLOCK_SUSPEND",
    "CAP_AUDIT_READ",
    "CAP_PERFMON",
    "CAP_BPF",
    "CAP_CHECKPOINT_RESTORE",
];

/// The set a non-privileged container starts from: containerd's `defaultUnixCaps`
/// (pkg/oci/spec.go), which is also Docker's default.
pub const DEFAULT_CAPABILITIES: [&str; 14] = [
    "CAP_CHOWN",
    "CAP_DAC_OVERRIDE",
    "CAP_FSETID",
    "CAP_FOWNER",
    "CAP_MKNOD",
    "CAP_NET_RAW",
    "CAP_SETGID",
    "CAP_SETUID",
    "CAP_SETFCAP",
    "CAP_SETPCAP",
    "CAP_NET_BIND_SERVICE",
    "CAP_SYS_CHROOT",
    "CAP_KILL",
    "CAP_AUDIT_WRITE",
];

/// `NET_ADMIN`, `cap_net_admin` or `CAP_NET_ADMIN` → `CAP_NET_ADMIN`; `None` for unknown names.
pub fn canonical_name(name: &str) -> Option<&'static str> {
    let upper = name.trim().to_ascii_uppercase();
    let bare = upper.strip_prefix("CAP_").unwrap_or(&upper);
    ALL_CAPABILITIES
        .iter()
        .copied()
        .find(|c| c.strip_prefix("CAP_") == Some(bare))
}

fn is_all(name: &str) -> bool {
    name.trim().eq_ignore_ascii_case("ALL")
}

/// The names in `names` that are neither capabilities nor `ALL`, as one InvalidArgument.
fn check_names(container: &str, field: &str, names: &[String]) -> Result<()> {
    let unknown: Vec<&str> = names
        .iter()
        .filter(|n| !is_all(n) && canonical_name(n).is_none())
        .map(String::as_str)
        .collect();
    if unknown.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "container {container}: capabilities.{field}: unknown capabilities {unknown:?}"
        )))
    }
}

/// The process capability sets after CRI edits, as sorted `CAP_*` names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CapSets {
    /// Bounding = effective = permitted (containerd keeps them equal).
    pub bounding: BTreeSet<&'static str>,
    /// Ambient (and inheritable, which ambient requires).
    pub ambient: BTreeSet<&'static str>,
}

/// Applies CRI edits the way containerd's `WithCapabilities` does (internal/cri/opts/spec_opts.go):
/// start from the default set (or from `daemon_caps` when privileged), `add: [ALL]` means every
/// capability the daemon holds, `drop: [ALL]` empties the set, then single names are added and
/// dropped. Unknown names are refused (containerd passes them to runc, which fails later).
pub fn resolve(
    container: &str,
    edits: &CapabilityEdits,
    privileged: bool,
    daemon_caps: &[String],
) -> Result<CapSets> {
    check_names(container, "add_capabilities", &edits.add)?;
    check_names(container, "drop_capabilities", &edits.drop)?;
    check_names(container, "add_ambient_capabilities", &edits.add_ambient)?;
    let daemon: BTreeSet<&'static str> = daemon_caps
        .iter()
        .filter_map(|c| canonical_name(c))
        .collect();

    let mut set: BTreeSet<&'static str> = if privileged {
        daemon.clone()
    } else {
        DEFAULT_CAPABILITIES.iter().copied().collect()
    };
    if edits.add.iter().any(|c| is_all(c)) {
        set = daemon.clone();
    }
    if edits.drop.iter().any(|c| is_all(c)) {
        set.clear();
    }
    set.extend(edits.add.iter().filter_map(|c| canonical_name(c)));
    for c in edits.drop.iter().filter_map(|c| canonical_name(c)) {
        set.remove(c);
    }

    let ambient: BTreeSet<&'static str> = if edits.add_ambient.iter().any(|c| is_all(c)) {
        set.clone()
    } else {
        edits
            .add_ambient
            .iter()
            .filter_map(|c| canonical_name(c))
            .collect()
    };
    let outside: Vec<&str> = ambient.difference(&set).copied().collect();
    if !outside.is_empty() {
        return Err(Error::invalid(format!(
            "container {container}: ambient capabilities {outside:?} are not in the bounding set"
        )));
    }
    Ok(CapSets {
        bounding: set,
        ambient,
    })
}

fn to_oci(names: &BTreeSet<&'static str>) -> Result<Capabilities> {
    names
        .iter()
        .map(|n| {
            serde_json::from_value::<Capability>(serde_json::Value::String((*n).to_string()))
                .map_err(|e| Error::internal(format!("capability {n}: {e}")))
        })
        .collect()
}

/// The spec's `process.capabilities` for `sets`.
pub fn to_linux_capabilities(sets: &CapSets) -> Result<LinuxCapabilities> {
    let bounding = to_oci(&sets.bounding)?;
    let ambient = to_oci(&sets.ambient)?;
    let mut caps = LinuxCapabilities::default();
    caps.set_bounding(Some(bounding.clone()));
    caps.set_effective(Some(bounding.clone()));
    caps.set_permitted(Some(bounding));
    caps.set_inheritable(Some(ambient.clone()));
    caps.set_ambient(Some(ambient));
    Ok(caps)
}

/// Decodes a `CapEff:` style hex mask into capability names (unknown high bits are ignored).
pub fn names_from_mask(mask: u64) -> Vec<String> {
    ALL_CAPABILITIES
        .iter()
        .enumerate()
        .filter(|(bit, _)| mask & (1u64 << bit) != 0)
        .map(|(_, n)| (*n).to_string())
        .collect()
}

/// The effective capabilities of this process, from the `CapEff:` line of `/proc/self/status`.
///
/// containerd gives privileged containers `cap.Current()` rather than every known capability:
/// runc cannot grant a capability its caller lacks (this VM's root has no CAP_SYS_RESOURCE).
pub fn current_capabilities() -> Result<Vec<String>> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| Error::internal(format!("read /proc/self/status: {e}")))?;
    parse_cap_eff(&status)
}

fn parse_cap_eff(status: &str) -> Result<Vec<String>> {
    let hex = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .ok_or_else(|| Error::internal("/proc/self/status: no CapEff line"))?;
    let mask = u64::from_str_radix(hex.trim(), 16)
        .map_err(|e| Error::internal(format!("/proc/self/status: CapEff {hex:?}: {e}")))?;
    Ok(names_from_mask(mask))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn edits(add: &[&str], drop: &[&str]) -> CapabilityEdits {
        CapabilityEdits {
            add: add.iter().map(|s| s.to_string()).collect(),
            drop: drop.iter().map(|s| s.to_string()).collect(),
            add_ambient: Vec::new(),
        }
    }

    type Check = Box<dyn Fn(&BTreeSet<&str>) -> bool>;

    fn all() -> Vec<String> {
        ALL_CAPABILITIES.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_name_converts_to_the_oci_enum() {
        let sets = CapSets {
            bounding: ALL_CAPABILITIES.iter().copied().collect(),
            ambient: BTreeSet::new(),
        };
        let caps = to_linux_capabilities(&sets).expect("convert");
        assert_eq!(caps.bounding().as_ref().map(|b| b.len()), Some(41));
    }

    #[test]
    fn names_are_accepted_with_or_without_prefix_in_any_case() {
        for n in ["NET_ADMIN", "CAP_NET_ADMIN", "net_admin", "cap_Net_Admin"] {
            assert_eq!(canonical_name(n), Some("CAP_NET_ADMIN"), "{n}");
        }
        assert_eq!(canonical_name("NET_ADMINX"), None);
        assert_eq!(canonical_name("CAP_"), None);
    }

    #[test]
    fn edits_follow_containerd() {
        let default: BTreeSet<&str> = DEFAULT_CAPABILITIES.iter().copied().collect();
        let cases: Vec<(&str, CapabilityEdits, bool, Check)> = vec![
            ("none", edits(&[], &[]), false, Box::new(|s| s.len() == 14)),
            (
                "add one",
                edits(&["NET_ADMIN"], &[]),
                false,
                Box::new(|s| s.len() == 15 && s.contains("CAP_NET_ADMIN")),
            ),
            (
                "drop one",
                edits(&[], &["CAP_CHOWN"]),
                false,
                Box::new(|s| s.len() == 13 && !s.contains("CAP_CHOWN")),
            ),
            (
                "drop all add one",
                edits(&["kill"], &["ALL"]),
                false,
                Box::new(|s| s.iter().copied().eq(["CAP_KILL"])),
            ),
            (
                "add all drop one",
                edits(&["ALL"], &["SYS_ADMIN"]),
                false,
                Box::new(|s| s.len() == 40 && !s.contains("CAP_SYS_ADMIN")),
            ),
            (
                "privileged",
                edits(&[], &[]),
                true,
                Box::new(|s| s.len() == 41),
            ),
            (
                "privileged drop",
                edits(&[], &["all"]),
                true,
                Box::new(|s| s.is_empty()),
            ),
        ];
        for (name, e, privileged, check) in cases {
            let got = resolve("c", &e, privileged, &all()).expect(name);
            assert!(check(&got.bounding), "{name}: {:?}", got.bounding);
        }
        let plain = resolve("c", &edits(&[], &[]), false, &[]).expect("plain");
        assert_eq!(plain.bounding, default);
    }

    #[test]
    fn add_all_means_the_daemons_capabilities() {
        let daemon = vec!["CAP_CHOWN".to_string(), "CAP_SYS_ADMIN".to_string()];
        let got = resolve("c", &edits(&["ALL"], &[]), false, &daemon).expect("resolve");
        assert!(got
            .bounding
            .iter()
            .copied()
            .eq(["CAP_CHOWN", "CAP_SYS_ADMIN"]));
    }

    #[test]
    fn unknown_names_are_invalid_and_named() {
        let err =
            resolve("web", &edits(&["NET_ADMIN", "FLY"], &[]), false, &all()).expect_err("unknown");
        assert_eq!(err.kind(), ErrorKind::InvalidArgument);
        assert!(
            err.message().contains("FLY") && err.message().contains("web"),
            "{err}"
        );
        let err = resolve("web", &edits(&[], &["CAP_NOPE"]), false, &all()).expect_err("drop");
        assert!(err.message().contains("CAP_NOPE"), "{err}");
    }

    #[test]
    fn ambient_must_be_bounded() {
        let mut e = edits(&["NET_ADMIN"], &[]);
        e.add_ambient = vec!["NET_ADMIN".into()];
        let got = resolve("c", &e, false, &all()).expect("ok");
        assert!(got.ambient.contains("CAP_NET_ADMIN"));
        e.add_ambient = vec!["SYS_ADMIN".into()];
        let err = resolve("c", &e, false, &all()).expect_err("unbounded");
        assert!(err.message().contains("CAP_SYS_ADMIN"), "{err}");
    }

    #[test]
    fn cap_eff_is_decoded() {
        let status = "Name:\tx\nCapPrm:\t0\nCapEff:\t000001fffeffffff\n";
        let names = parse_cap_eff(status).expect("parse");
        assert_eq!(names.len(), 40);
        assert!(!names.contains(&"CAP_SYS_RESOURCE".to_string()));
        assert!(parse_cap_eff("Name: x\n").is_err());
    }
}
