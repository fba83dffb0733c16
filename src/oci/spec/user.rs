//! The process user: CRI run_as_* or the image USER, resolved in the image's /etc/passwd and /etc/group, read with every path lookup confined to the rootfs (openat2 RESOLVE_IN_ROOT).

use std::io::Read;
use std::path::Path;

use rustix::fs::{Mode, OFlags, ResolveFlags};

use crate::error::{Error, Result};
use crate::oci::spec::request::{Security, SupplementalGroupsPolicy};

/// runc refuses ids above `i32::MAX` (containerd's WithUser follows it, pkg/oci/spec_opts.go).
const MAX_ID: i64 = i32::MAX as i64;
/// /etc/passwd and /etc/group larger than this are refused (a hostile image cannot make the
/// daemon read gigabytes).
const MAX_FILE: u64 = 16 << 20;

/// The resolved process identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedUser {
    /// uid.
    pub uid: u32,
    /// Primary gid.
    pub gid: u32,
    /// Sorted, de-duplicated supplementary gids (including the primary gid, like containerd).
    pub additional_gids: Vec<u32>,
}

#[derive(Debug)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
}

#[derive(Debug)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

/// Reads `rel` (e.g. `etc/passwd`) inside `rootfs` with symlinks and `..` resolved as if
/// `rootfs` were `/`. `Ok(None)` when the file does not exist there.
fn read_in_root(rootfs: &Path, rel: &str) -> Result<Option<String>> {
    let ctx = || format!("read /{rel} in rootfs {}", rootfs.display());
    let root = rustix::fs::open(
        rootfs,
        OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::internal(format!("{}: open rootfs: {e}", ctx())))?;
    let fd = match rustix::fs::openat2(
        &root,
        rel,
        OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NOCTTY | OFlags::NONBLOCK,
        Mode::empty(),
        ResolveFlags::IN_ROOT | ResolveFlags::NO_MAGICLINKS,
    ) {
        Ok(fd) => fd,
        Err(rustix::io::Errno::NOENT) | Err(rustix::io::Errno::NOTDIR) => return Ok(None),
        Err(e) => return Err(Error::internal(format!("{}: {e}", ctx()))),
    };
    let st = rustix::fs::fstat(&fd).map_err(|e| Error::internal(format!("{}: {e}", ctx())))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(Error::invalid(format!("{}: not a regular file", ctx())));
    }
    let mut text = String::new();
    std::fs::File::from(fd)
        .take(MAX_FILE + 1)
        .read_to_string(&mut text)
        .map_err(|e| Error::invalid(format!("{}: {e}", ctx())))?;
    if text.len() as u64 > MAX_FILE {
        return Err(Error::invalid(format!(
            "{}: larger than {MAX_FILE} bytes",
            ctx()
        )));
    }
    Ok(Some(text))
}

/// Lines of a colon file, skipping blanks, comments and NIS `+`/`-` entries (runc's parser does).
fn records(text: &str) -> impl Iterator<Item = Vec<&str>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(['+', '-']))
        .map(|l| l.split(':').collect())
}

fn parse_passwd(text: &str) -> Vec<PasswdEntry> {
    records(text)
        .filter_map(|f| {
            Some(PasswdEntry {
                name: f.first()?.to_string(),
                uid: f.get(2)?.parse().ok()?,
                gid: f.get(3)?.parse().ok()?,
            })
        })
        .collect()
}

fn parse_group(text: &str) -> Vec<GroupEntry> {
    records(text)
        .filter_map(|f| {
            Some(GroupEntry {
                name: f.first()?.to_string(),
                gid: f.get(2)?.parse().ok()?,
                members: f
                    .get(3)
                    .map(|m| {
                        m.split(',')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(String::from)
                            .collect()
                    })
                    .unwrap_or_default(),
            })
        })
        .collect()
}

fn numeric_id(container: &str, what: &str, v: i64) -> Result<u32> {
    if (0..=MAX_ID).contains(&v) {
        Ok(v as u32)
    } else {
        Err(Error::invalid(format!(
            "container {container}: {what} {v} is out of range (0..={MAX_ID})"
        )))
    }
}

/// A user spec: `name`, `uid`, `uid:gid`, `name:group`, `uid:group`, `name:gid`.
fn parse_id(container: &str, what: &str, s: &str) -> Result<Result<u32, String>> {
    if s.is_empty() {
        return Err(Error::invalid(format!(
            "container {container}: empty {what}"
        )));
    }
    match s.parse::<i64>() {
        Ok(v) => numeric_id(container, what, v).map(Ok),
        Err(_) if s.bytes().all(|b| b.is_ascii_digit()) => Err(Error::invalid(format!(
            "container {container}: {what} {s} is out of range"
        ))),
        Err(_) => Ok(Err(s.to_string())),
    }
}

/// Resolves the process user following containerd: `run_as_username` wins over `run_as_user`;
/// `run_as_group` needs one of them; without either the image USER applies, else root. Names are
/// looked up in the rootfs; a numeric uid missing from /etc/passwd is fine (gid 0 unless given).
/// Supplementary groups: the primary gid, the /etc/group memberships of the user (policy Merge,
/// containerd's WithAdditionalGIDs) and `supplemental_groups`, sorted and de-duplicated.
pub fn resolve_user(
    container: &str,
    security: &Security,
    image_user: Option<&str>,
    rootfs: &Path,
) -> Result<ResolvedUser> {
    let user_part: Option<String> = match (&security.run_as_username, security.run_as_user) {
        (Some(name), _) if !name.is_empty() => Some(name.clone()),
        (_, Some(uid)) => Some(numeric_id(container, "run_as_user", uid)?.to_string()),
        _ => None,
    };
    let spec = match (user_part, security.run_as_group) {
        (Some(u), Some(g)) => format!("{u}:{}", numeric_id(container, "run_as_group", g)?),
        (Some(u), None) => u,
        (None, Some(g)) => {
            return Err(Error::invalid(format!(
                "container {container}: run_as_group {g} is set without run_as_user or \
                 run_as_username"
            )))
        }
        (None, None) => image_user
            .filter(|u| !u.is_empty())
            .unwrap_or("0")
            .to_string(),
    };

    let (user_s, group_s) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec.as_str(), None),
    };
    let user = parse_id(container, "user", user_s)?;
    let group = group_s
        .map(|g| parse_id(container, "group", g))
        .transpose()?;

    let passwd = parse_passwd(&read_in_root(rootfs, "etc/passwd")?.unwrap_or_default());
    let (uid, mut gid, username) = match &user {
        Ok(uid) => match passwd.iter().find(|p| p.uid == *uid) {
            Some(p) => (*uid, p.gid, Some(p.name.clone())),
            None => (*uid, 0, None),
        },
        Err(name) => match passwd.iter().find(|p| &p.name == name) {
            Some(p) => (p.uid, p.gid, Some(p.name.clone())),
            None => {
                return Err(Error::invalid(format!(
                    "container {container}: user {name:?} not found in the image's /etc/passwd"
                )))
            }
        },
    };

    let needs_groups = matches!(group, Some(Err(_)))
        || security.supplemental_groups_policy == SupplementalGroupsPolicy::Merge;
    let groups = if needs_groups {
        parse_group(&read_in_root(rootfs, "etc/group")?.unwrap_or_default())
    } else {
        Vec::new()
    };
    match group {
        Some(Ok(g)) => gid = g,
        Some(Err(name)) => match groups.iter().find(|g| g.name == name) {
            Some(g) => gid = g.gid,
            None => {
                return Err(Error::invalid(format!(
                    "container {container}: group {name:?} not found in the image's /etc/group"
                )))
            }
        },
        // containerd: a bare numeric uid takes the passwd entry's gid; `uid:gid` takes gid as is.
        None => {}
    }

    let mut additional = vec![gid];
    if security.supplemental_groups_policy == SupplementalGroupsPolicy::Merge {
        if let Some(name) = &username {
            additional.extend(
                groups
                    .iter()
                    .filter(|g| &g.name != name && g.members.iter().any(|m| m == name))
                    .map(|g| g.gid),
            );
        }
    }
    for g in &security.supplemental_groups {
        additional.push(numeric_id(container, "supplemental group", *g)?);
    }
    additional.sort_unstable();
    additional.dedup();
    Ok(ResolvedUser {
        uid,
        gid,
        additional_gids: additional,
    })
}

#[cfg(test)]
#[path = "user_tests.rs"]
mod tests;
