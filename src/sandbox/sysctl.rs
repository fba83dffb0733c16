//! Pod sysctls: only namespaced ones, each in a namespace the pod owns (not the host's).

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The namespace a sysctl lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SysctlNs {
    /// `net.*`: the network namespace.
    Net,
    /// `kernel.shm*`, `kernel.msg*`, `kernel.sem`, `fs.mqueue.*`: the IPC namespace.
    Ipc,
}

// The kubelet's namespaced-sysctl allowlist: IPC-namespace and network-namespace knobs.
fn classify(name: &str) -> Option<SysctlNs> {
    const IPC_PREFIXES: [&str; 3] = ["kernel.shm", "kernel.msg", "fs.mqueue."];
    if name == "kernel.sem" || IPC_PREFIXES.iter().any(|p| name.starts_with(p)) {
        Some(SysctlNs::Ipc)
    } else if name.starts_with("net.") {
        Some(SysctlNs::Net)
    } else {
        None
    }
}

/// `net/ipv4/conf/eth0.100/forwarding` → `net.ipv4.conf.eth0/100.forwarding` (the kubelet's
/// slash form swaps dots and slashes); dotted names are returned unchanged.
pub fn dotted(name: &str) -> String {
    if !name.contains('/') {
        return name.to_string();
    }
    name.chars()
        .map(|c| match c {
            '/' => '.',
            '.' => '/',
            c => c,
        })
        .collect()
}

/// `/proc/sys/...` for a dotted name; refuses empty, `.` and `..` components.
pub fn proc_path(dotted: &str) -> Result<PathBuf> {
    let rel: String = dotted
        .chars()
        .map(|c| match c {
            '.' => '/',
            '/' => '.',
            c => c,
        })
        .collect();
    let ok = !rel.is_empty()
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
        && Path::new(&rel)
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
    if !ok {
        return Err(Error::invalid(format!("sysctl {dotted:?}: malformed name")));
    }
    Ok(Path::new("/proc/sys").join(rel))
}

/// Checks every sysctl: namespaced, in a namespace the pod owns (`own_net`, `own_ipc`), a
/// well-formed name and a one-line value. Returns `(dotted name, ns, value)` in name order.
pub fn validate(
    sysctls: &BTreeMap<String, String>,
    own_net: bool,
    own_ipc: bool,
) -> Result<Vec<(String, SysctlNs, String)>> {
    let mut out = Vec::with_capacity(sysctls.len());
    for (name, value) in sysctls {
        let key = dotted(name);
        let ns = classify(&key)
            .ok_or_else(|| Error::invalid(format!("sysctl {name:?} is not namespaced")))?;
        let owned = match ns {
            SysctlNs::Net => own_net.then_some(()).ok_or("network"),
            SysctlNs::Ipc => own_ipc.then_some(()).ok_or("IPC"),
        };
        if let Err(host) = owned {
            return Err(Error::invalid(format!(
                "sysctl {name:?} is not allowed with the host {host} namespace"
            )));
        }
        proc_path(&key).map_err(|e| e.context(format!("sysctl {name:?}")))?;
        if value.contains(['\n', '\0']) {
            return Err(Error::invalid(format!(
                "sysctl {name:?}: value must be one line"
            )));
        }
        out.push((key, ns, value.clone()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn namespaced_sysctls_pass() {
        let got = validate(
            &map(&[
                ("net.ipv4.ip_forward", "1"),
                ("kernel.shmmax", "1000"),
                ("kernel.sem", "1 2 3 4"),
                ("fs.mqueue.msg_max", "20"),
                ("net/ipv4/conf/eth0.100/forwarding", "1"),
            ]),
            true,
            true,
        )
        .expect("valid");
        let names: Vec<_> = got.iter().map(|(k, _, _)| k.as_str()).collect();
        assert!(names.contains(&"net.ipv4.conf.eth0/100.forwarding"));
        assert_eq!(
            proc_path("net.ipv4.conf.eth0/100.forwarding").expect("path"),
            PathBuf::from("/proc/sys/net/ipv4/conf/eth0.100/forwarding")
        );
    }

    #[test]
    fn other_sysctls_are_refused_by_name() {
        for (name, own_net, own_ipc, want) in [
            ("kernel.hostname", true, true, "not namespaced"),
            ("vm.swappiness", true, true, "not namespaced"),
            ("net.core.somaxconn", false, true, "host network"),
            ("kernel.shmall", true, false, "host IPC"),
            ("net...", true, true, "malformed"),
            ("net/ipv4/../../kernel/hostname", true, true, "malformed"),
        ] {
            let err = validate(&map(&[(name, "1")]), own_net, own_ipc).expect_err(name);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}");
            assert!(err.message().contains(name), "{name}: {err}");
            assert!(err.message().contains(want), "{name}: {err}");
        }
        let err =
            validate(&map(&[("net.core.somaxconn", "1\n2")]), true, true).expect_err("two lines");
        assert!(err.message().contains("one line"));
    }
}
