//! User namespace and ID-mapped mount rules: which mappings are accepted, and how they are written (OCI `LinuxIDMapping`, `/proc/<pid>/uid_map` text).

use oci_spec::runtime::{LinuxIdMapping, LinuxIdMappingBuilder};

use crate::error::{Error, Result};
use crate::oci::spec::request::{IdMapping, UserNamespace};

/// The most ranges the kernel takes in one `uid_map` (Linux 4.15 and later).
pub const MAX_RANGES: usize = 340;

/// One range: non-empty, and neither side runs past the 32-bit id space.
fn check_range(field: &str, i: usize, m: &IdMapping) -> Result<()> {
    if m.length == 0 {
        return Err(Error::invalid(format!(
            "{field}[{i}]: length must be at least 1"
        )));
    }
    let end = |start: u32| u64::from(start) + u64::from(m.length);
    if end(m.container_id) > 1 << 32 || end(m.host_id) > 1 << 32 {
        return Err(Error::invalid(format!(
            "{field}[{i}]: {} {} {} runs past the 32-bit id space",
            m.container_id, m.host_id, m.length
        )));
    }
    Ok(())
}

/// Ranges must not overlap inside or on the host (the kernel refuses such a map).
fn check_disjoint(field: &str, map: &[IdMapping]) -> Result<()> {
    for side in [
        (|m: &IdMapping| m.container_id) as fn(&IdMapping) -> u32,
        |m: &IdMapping| m.host_id,
    ] {
        let mut spans: Vec<(u64, u64)> = map
            .iter()
            .map(|m| (u64::from(side(m)), u64::from(side(m)) + u64::from(m.length)))
            .collect();
        spans.sort_unstable();
        if spans.windows(2).any(|w| w[1].0 < w[0].1) {
            return Err(Error::invalid(format!("{field}: ranges overlap")));
        }
    }
    Ok(())
}

/// A pod user namespace (CRI mode POD), as containerd and CRI-O accept it: exactly one uid
/// and one gid range, each mapping container id 0 (the kubelet allocates one range per pod).
/// `object` prefixes the field names (`...namespace_options.userns_options`).
pub fn check_pod(object: &str, ns: &UserNamespace) -> Result<()> {
    for (name, map) in [("uids", &ns.uids), ("gids", &ns.gids)] {
        let field = format!("{object}.{name}");
        match map.as_slice() {
            [] => {
                return Err(Error::invalid(format!(
                    "{field}: mode POD needs one mapping"
                )))
            }
            [m] => {
                check_range(&field, 0, m)?;
                if m.container_id != 0 {
                    return Err(Error::invalid(format!(
                        "{field}[0]: container id 0 is not mapped (the range starts at {})",
                        m.container_id
                    )));
                }
            }
            more => {
                return Err(Error::invalid(format!(
                    "{field}: {} mappings given, only one is supported",
                    more.len()
                )))
            }
        }
    }
    Ok(())
}

/// The mappings of an ID-mapped mount (CRI Mount uid/gid mappings): none at all, or both
/// sides with 1 to [`MAX_RANGES`] valid, disjoint ranges each. `field` names the mount.
pub fn check_mount(field: &str, uids: &[IdMapping], gids: &[IdMapping]) -> Result<()> {
    if uids.is_empty() && gids.is_empty() {
        return Ok(());
    }
    for (name, map) in [("uid_mappings", uids), ("gid_mappings", gids)] {
        let f = format!("{field}.{name}");
        if map.is_empty() {
            return Err(Error::invalid(format!(
                "{f}: an ID-mapped mount needs both uid and gid mappings"
            )));
        }
        if map.len() > MAX_RANGES {
            return Err(Error::invalid(format!(
                "{f}: {} ranges given, at most {MAX_RANGES}",
                map.len()
            )));
        }
        for (i, m) in map.iter().enumerate() {
            check_range(&f, i, m)?;
        }
        check_disjoint(&f, map)?;
    }
    Ok(())
}

/// The ranges as OCI `LinuxIDMapping`s.
pub fn to_oci(map: &[IdMapping]) -> Result<Vec<LinuxIdMapping>> {
    map.iter()
        .map(|m| {
            LinuxIdMappingBuilder::default()
                .container_id(m.container_id)
                .host_id(m.host_id)
                .size(m.length)
                .build()
                .map_err(|e| Error::internal(format!("id mapping: {e}")))
        })
        .collect()
}

/// The ranges as `/proc/<pid>/uid_map` (or `gid_map`) text: one `inside host length` line each.
pub fn map_text(map: &[IdMapping]) -> String {
    map.iter()
        .map(|m| format!("{} {} {}\n", m.container_id, m.host_id, m.length))
        .collect()
}

/// Parses `map_text` output (or the kernel's own `uid_map`, which pads with spaces).
pub fn parse_map_text(text: &str) -> Option<Vec<IdMapping>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split_whitespace().map(|n| n.parse::<u32>().ok());
            let m = IdMapping {
                container_id: f.next()??,
                host_id: f.next()??,
                length: f.next()??,
            };
            f.next().is_none().then_some(m)
        })
        .collect()
}

#[cfg(test)]
#[path = "userns_tests.rs"]
mod tests;
