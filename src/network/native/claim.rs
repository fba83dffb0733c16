//! Whose embedded network is whose: a host-wide registry of the running daemons' bridges,
//! subnets, tables and lease directories, and the lease directory's owner (issue 28).
//!
//! Two daemons on one host (a CI runner's two test daemons, a node and a developer's daemon)
//! must not share a bridge, a subnet, an nftables table or a lease journal: with separate
//! IPAM they would hand out the same addresses, and one's recovery would release what the
//! other's pods hold. A daemon takes its claim when its embedded network is first used (at
//! start when it is the active network): a file in [`CLAIMS_DIR`] naming it (pid, root,
//! socket) and what its network holds, `flock`ed for the daemon's life, so a claim left by a
//! killed daemon is seen as stale and dropped. A claim that would clash with a live one is
//! refused, naming that daemon and the `[network]` keys to change.
//!
//! The lease directory also records its owner (`<lease dir>/owner`: the owning daemon's
//! root), so a daemon never takes over another's journal while that one is down (its pods,
//! and their addresses, outlive it); a journal whose owner's root is gone is taken over.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::Plan;
use crate::config::cidr::{self, Cidr};
use crate::error::{Error, Result, ResultExt};

/// The registry of running daemons' embedded networks (tmpfs: gone at reboot, with them).
pub const CLAIMS_DIR: &str = "/run/bosun-networks";
/// The lease directory's owner file.
const OWNER_FILE: &str = "owner";

/// The daemon a network belongs to, as another daemon is told about it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    /// Its process id.
    pub pid: u32,
    /// Its root directory (`--root`).
    pub root: PathBuf,
    /// Its CRI socket (empty for an in-process runtime).
    pub socket: PathBuf,
}

impl std::fmt::Display for Owner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {}, root {}", self.pid, self.root.display())?;
        if !self.socket.as_os_str().is_empty() {
            write!(f, ", socket {}", self.socket.display())?;
        }
        Ok(())
    }
}

/// One daemon's claim as written in the registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    owner: Owner,
    name: String,
    bridge: String,
    subnets: Vec<String>,
    lease_dir: PathBuf,
}

impl Entry {
    fn of(owner: &Owner, plan: &Plan) -> Entry {
        Entry {
            owner: owner.clone(),
            name: plan.table.clone(),
            bridge: plan.bridge.clone(),
            subnets: plan.subnets.iter().map(ToString::to_string).collect(),
            lease_dir: plan.lease_dir.clone(),
        }
    }

    /// What `self` shares with `other`: `(what, config key)` per clash.
    fn clashes(&self, other: &Entry) -> Vec<(String, &'static str)> {
        let mut out = Vec::new();
        if self.bridge == other.bridge {
            out.push((format!("bridge {}", self.bridge), "bridge"));
        }
        let parse =
            |v: &[String]| -> Vec<Cidr> { v.iter().filter_map(|s| cidr::parse(s).ok()).collect() };
        for a in parse(&self.subnets) {
            if let Some(b) = parse(&other.subnets).into_iter().find(|b| overlap(&a, b)) {
                out.push((format!("subnet {a} (theirs: {b})"), "subnet"));
            }
        }
        if self.name == other.name {
            out.push((format!("nftables table inet {}", self.name), "name"));
        }
        if self.lease_dir == other.lease_dir {
            let dir = self.lease_dir.display();
            out.push((format!("lease directory {dir}"), "data_dir"));
        }
        out
    }
}

/// Whether two subnets share an address.
pub fn overlap(a: &Cidr, b: &Cidr) -> bool {
    if a.addr.is_ipv4() != b.addr.is_ipv4() {
        return false;
    }
    let bits: u32 = if a.addr.is_ipv4() { 32 } else { 128 };
    let prefix = u32::from(a.prefix.min(b.prefix));
    let value = |ip: &std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v) => u128::from(u32::from(*v)),
        std::net::IpAddr::V6(v) => u128::from(*v),
    };
    let shift = bits - prefix;
    let net = |ip| value(ip).checked_shr(shift).unwrap_or(0);
    net(&a.addr) == net(&b.addr)
}

/// A daemon's registered claim; dropped (the file removed) when the network is closed.
#[derive(Debug)]
pub struct Claim {
    path: PathBuf,
    file: File,
    entry: Entry,
}

/// `flock` `file` without waiting; false when another holder has it.
fn try_lock(file: &File, exclusive: bool) -> bool {
    use rustix::fs::FlockOperation::{NonBlockingLockExclusive, NonBlockingLockShared};
    let op = if exclusive {
        NonBlockingLockExclusive
    } else {
        NonBlockingLockShared
    };
    rustix::fs::flock(file, op).is_ok()
}

/// The claim file's name for the daemon on `root` (FNV-1a of the path: names stay short).
fn file_name(root: &Path) -> String {
    let h = root
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3)
        });
    format!("{h:016x}.json")
}

impl Claim {
    /// Registers `plan` for `owner` in `dir`: FailedPrecondition naming the live daemon whose
    /// embedded network it would share a bridge, subnet, table or lease directory with.
    pub fn take(dir: &Path, owner: &Owner, plan: &Plan) -> Result<Claim> {
        let entry = Entry::of(owner, plan);
        let path = dir.join(file_name(&owner.root));
        let _registry = registry_lock(dir)?;
        check(dir, &path, &entry)?;
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        // A killed daemon of this root may still be closing its files (its root lock is
        // released with them): wait a moment for its hold on this file to go.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while !try_lock(&file, true) {
            if std::time::Instant::now() >= deadline {
                return Err(Error::precondition(format!(
                    "{} is held by another process of this daemon's root",
                    path.display()
                )));
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        write_entry(&mut file, &entry).ctx(|| format!("write {}", path.display()))?;
        Ok(Claim { path, file, entry })
    }

    /// Whether the claim is for `plan` as it is now.
    pub fn covers(&self, owner: &Owner, plan: &Plan) -> bool {
        self.entry == Entry::of(owner, plan)
    }

    /// Re-registers the claim for a changed `plan` (a pod CIDR set by the kubelet), checked
    /// as [`Claim::take`] checks a new one.
    pub fn update(&mut self, dir: &Path, owner: &Owner, plan: &Plan) -> Result<()> {
        let entry = Entry::of(owner, plan);
        let _registry = registry_lock(dir)?;
        check(dir, &self.path, &entry)?;
        write_entry(&mut self.file, &entry).ctx(|| format!("write {}", self.path.display()))?;
        self.entry = entry;
        Ok(())
    }
}

impl Drop for Claim {
    /// Removes the claim; the last one out removes the registry too (leave the node as found).
    fn drop(&mut self) {
        let Some(dir) = self.path.parent() else {
            return;
        };
        let registry = registry_lock(dir);
        let _ = std::fs::remove_file(&self.path);
        if registry.is_ok() {
            remove_if_unused(dir);
        }
    }
}

/// The registry's lock file, in its directory.
const LOCK_FILE: &str = ".lock";

/// The registry's own lock, held while a claim is checked, written or removed.
fn registry_lock(dir: &Path) -> Result<File> {
    let path = dir.join(LOCK_FILE);
    // The last claim's owner removes the lock file and the directory (under this lock): a
    // lock taken meanwhile on the unlinked file guards nothing, so take the new one.
    for _ in 0..100 {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let file = match OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).ctx(|| format!("open {}", path.display())),
        };
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| Error::internal(format!("lock {}: {e}", path.display())))?;
        if same_file(&file, &path) {
            return Ok(file);
        }
    }
    Err(Error::internal(format!(
        "lock {}: removed under us again and again",
        path.display()
    )))
}

/// Whether `file` is still the one at `path`.
fn same_file(file: &File, path: &Path) -> bool {
    match (rustix::fs::fstat(file), rustix::fs::stat(path)) {
        (Ok(a), Ok(b)) => a.st_dev == b.st_dev && a.st_ino == b.st_ino,
        _ => false,
    }
}

/// Removes the registry's lock file and directory when no claim is left in it (the caller
/// holds the registry lock).
fn remove_if_unused(dir: &Path) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    if rd.flatten().all(|e| e.file_name() == LOCK_FILE) {
        let _ = std::fs::remove_file(dir.join(LOCK_FILE));
        let _ = std::fs::remove_dir(dir);
    }
}

fn write_entry(file: &mut File, entry: &Entry) -> std::io::Result<()> {
    let text = serde_json::to_vec_pretty(entry).map_err(std::io::Error::other)?;
    file.set_len(0)?;
    file.rewind()?;
    file.write_all(&text)
}

/// Every live claim in `dir` but `mine` against `entry`; stale ones (their daemon is gone)
/// are removed.
fn check(dir: &Path, mine: &Path, entry: &Entry) -> Result<()> {
    let rd = std::fs::read_dir(dir).ctx(|| format!("read {}", dir.display()))?;
    for e in rd.flatten() {
        let path = e.path();
        if path == mine || path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let Ok(mut file) = File::open(&path) else {
            continue;
        };
        if try_lock(&file, false) {
            // Nobody holds it: its daemon is gone.
            let _ = std::fs::remove_file(&path);
            continue;
        }
        let mut text = String::new();
        if file.read_to_string(&mut text).is_err() {
            continue;
        }
        let Ok(other) = serde_json::from_str::<Entry>(&text) else {
            continue;
        };
        let clashes = entry.clashes(&other);
        if !clashes.is_empty() {
            return Err(refusal(&other.owner, &clashes));
        }
    }
    Ok(())
}

/// The refusal naming the other daemon, what is shared and the keys to change.
fn refusal(other: &Owner, clashes: &[(String, &'static str)]) -> Error {
    let what: Vec<&str> = clashes.iter().map(|(w, _)| w.as_str()).collect();
    let mut keys: Vec<&str> = Vec::new();
    for (_, k) in clashes {
        if !keys.contains(k) {
            keys.push(k);
        }
    }
    Error::precondition(format!(
        "embedded pod network: {} already belong to the running bosun daemon ({other}): two \
         daemons on one bridge or subnet hand out the same addresses; change this daemon's \
         [network] {} (or give it a CNI config in network.conf_dir)",
        what.join(", "),
        keys.join(", ")
    ))
}

/// The root of the daemon that owns the lease journal in `dir`, if recorded.
pub fn lease_owner(dir: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(dir.join(OWNER_FILE)).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    v.get("root")?.as_str().map(PathBuf::from)
}

/// Why the lease journal in `dir` is not `me`'s to use: another daemon's root that still
/// exists owns it. `None`: it is ours, unowned, or its owner's root is gone.
pub fn foreign_owner(dir: &Path, me: &Owner) -> Option<PathBuf> {
    lease_owner(dir).filter(|root| *root != me.root && root.exists())
}

/// Refuses a lease journal another daemon owns ([`foreign_owner`]), naming it.
pub fn check_owner(dir: &Path, me: &Owner) -> Result<()> {
    match foreign_owner(dir, me) {
        None => Ok(()),
        Some(root) => Err(Error::precondition(format!(
            "embedded pod network: the lease journal in {} belongs to the bosun daemon with \
             root {} (its pods keep their addresses while it is down); give this daemon its \
             own [network] data_dir or name",
            dir.display(),
            root.display()
        ))),
    }
}

/// Records `me` as the owner of the lease journal in `dir` (after its lock is taken).
pub fn own(dir: &Path, me: &Owner) -> Result<()> {
    if lease_owner(dir).as_deref() == Some(me.root.as_path()) {
        return Ok(());
    }
    if let Some(root) = lease_owner(dir) {
        tracing::warn!(
            dir = %dir.display(),
            previous = %root.display(),
            "embedded pod network: taking over a lease journal whose owner's root is gone"
        );
    }
    let text = serde_json::json!({ "root": me.root }).to_string();
    crate::store::atomic::write_atomic(&dir.join(OWNER_FILE), text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NetworkConfig;
    use crate::error::ErrorKind;

    fn plan(name: &str, bridge: &str, subnet: &str, data: &Path) -> Plan {
        let cfg = NetworkConfig {
            name: name.into(),
            bridge: bridge.into(),
            subnet: subnet.into(),
            data_dir: data.to_path_buf(),
            ..NetworkConfig::default()
        };
        Plan::new(&cfg, None, true).expect("plan")
    }

    fn owner(root: &Path) -> Owner {
        Owner {
            pid: 4242,
            root: root.to_path_buf(),
            socket: root.join("bosun.sock"),
        }
    }

    #[test]
    fn a_clash_with_a_live_daemon_is_refused_naming_it_and_the_keys() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (reg, data) = (tmp.path().join("reg"), tmp.path().join("ipam"));
        let a = owner(&tmp.path().join("a"));
        let first = Claim::take(&reg, &a, &plan("n1", "br1", "10.7.0.0/16", &data)).expect("a");
        // Same network as a's: everything clashes.
        let b = owner(&tmp.path().join("b"));
        let e = Claim::take(&reg, &b, &plan("n1", "br1", "10.7.0.0/16", &data)).expect_err("b");
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
        let msg = e.to_string();
        for want in [
            "pid 4242",
            &format!("root {}", a.root.display()),
            &format!("socket {}", a.socket.display()),
            "bridge br1",
            "subnet 10.7.0.0/16",
            "table inet n1",
            "[network] bridge, subnet, name, data_dir (",
        ] {
            assert!(msg.contains(want), "{want:?} missing: {msg}");
        }
        // Only an overlapping subnet: refused, naming the subnet key alone.
        let e = Claim::take(&reg, &b, &plan("n2", "br2", "10.7.3.0/24", &data)).expect_err("b");
        assert!(e.to_string().contains("[network] subnet ("), "{e}");
        // Nothing shared: fine; and once a is gone its stale claim does not count.
        let ok = Claim::take(&reg, &b, &plan("n2", "br2", "10.8.0.0/24", &data)).expect("b");
        drop(ok);
        drop(first);
        let ok = Claim::take(&reg, &b, &plan("n1", "br1", "10.7.0.0/16", &data)).expect("b");
        drop(ok);
    }

    #[test]
    fn the_last_claim_out_removes_the_registry() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (reg, data) = (tmp.path().join("reg"), tmp.path().join("ipam"));
        let a = Claim::take(
            &reg,
            &owner(&tmp.path().join("a")),
            &plan("n1", "br1", "10.7.0.0/16", &data),
        );
        let b = Claim::take(
            &reg,
            &owner(&tmp.path().join("b")),
            &plan("n2", "br2", "10.8.0.0/16", &data),
        );
        drop(a.expect("a"));
        assert!(
            reg.join(LOCK_FILE).exists(),
            "b's claim still needs the registry"
        );
        drop(b.expect("b"));
        assert!(!reg.exists(), "the registry outlived its last claim");
        // A registry removed under a waiting locker: the new one is taken, not the old.
        let first = registry_lock(&reg).expect("lock");
        std::fs::remove_file(reg.join(LOCK_FILE)).expect("unlink");
        let second = registry_lock(&reg).expect("lock again");
        assert!(same_file(&second, &reg.join(LOCK_FILE)));
        assert!(!same_file(&first, &reg.join(LOCK_FILE)));
    }

    #[test]
    fn a_killed_daemons_claim_is_stale() {
        let tmp = tempfile::tempdir().expect("tmp");
        let reg = tmp.path().join("reg");
        let p = plan("n1", "br1", "10.7.0.0/16", &tmp.path().join("ipam"));
        let a = owner(&tmp.path().join("a"));
        let claim = Claim::take(&reg, &a, &p).expect("a");
        let copy = std::fs::read(&claim.path).expect("read");
        drop(claim);
        // What kill -9 leaves: the file, nobody holding its lock (and no drop removing the
        // registry).
        std::fs::create_dir_all(&reg).expect("registry");
        let stale = reg.join("0000000000000000.json");
        std::fs::write(&stale, copy).expect("write");
        let b = owner(&tmp.path().join("b"));
        let _b = Claim::take(&reg, &b, &p).expect("a's daemon is gone");
        assert!(!stale.exists(), "a stale claim is removed");
    }

    #[test]
    fn subnets_overlap_within_a_family_only() {
        let c = |s: &str| cidr::parse(s).expect("cidr");
        assert!(overlap(&c("10.86.0.0/16"), &c("10.86.4.0/24")));
        assert!(overlap(&c("0.0.0.0/0"), &c("10.1.0.0/16")));
        assert!(!overlap(&c("10.86.0.0/16"), &c("10.87.0.0/16")));
        assert!(!overlap(&c("10.86.0.0/16"), &c("fd86::/64")));
        assert!(overlap(&c("fd86::/64"), &c("fd86::1:0/112")));
    }

    #[test]
    fn a_lease_journal_is_its_owners_while_the_owners_root_exists() {
        let tmp = tempfile::tempdir().expect("tmp");
        let dir = tmp.path().join("ipam/n1");
        std::fs::create_dir_all(&dir).expect("mkdir");
        let a = owner(&tmp.path().join("a"));
        std::fs::create_dir_all(&a.root).expect("root a");
        let b = owner(&tmp.path().join("b"));
        check_owner(&dir, &b).expect("unowned");
        own(&dir, &a).expect("own");
        check_owner(&dir, &a).expect("a's");
        let e = check_owner(&dir, &b).expect_err("a's, not b's");
        assert!(e.to_string().contains(&a.root.display().to_string()), "{e}");
        std::fs::remove_dir_all(&a.root).expect("a gone");
        check_owner(&dir, &b).expect("its owner is gone");
        own(&dir, &b).expect("taken over");
        assert_eq!(lease_owner(&dir), Some(b.root.clone()));
    }
}
