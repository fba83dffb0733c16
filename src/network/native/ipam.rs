//! The embedded network's IPAM: one address per pod subnet, recorded in a durable append-only
//! lease journal (`<data_dir>/<network>/leases`) under a lock held for the daemon's life.
//!
//! Lines are `+ <sandbox> <ip>[ <ip>]` (allocated) and `- <sandbox>` (released); each is
//! written with one `write` and made durable (`fdatasync`) before the caller goes on, so an
//! allocation is on disk before anything is built on it and a release is recorded exactly
//! once. A torn last line (a crash mid-write) is dropped when the journal is read. When most
//! lines are dead the journal is rewritten (temp file, fsync, rename, fsync dir).

use std::collections::{BTreeMap, HashSet};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config::cidr::Cidr;
use crate::error::{Error, ErrorKind, Result, ResultExt};

/// The journal's file name in the network's lease directory.
pub const LEASES: &str = "leases";
const LOCK: &str = "leases.lock";

/// The leases of one network.
#[derive(Debug)]
pub struct Leases {
    dir: PathBuf,
    journal: Arc<File>,
    _lock: File,
    by_id: BTreeMap<String, Vec<IpAddr>>,
    taken: HashSet<IpAddr>,
    /// The last address handed out per family (allocation goes on after it, as host-local's).
    last: [Option<IpAddr>; 2],
    lines: usize,
}

/// What a lease holder must do after the journal write: make it durable.
#[derive(Debug, Clone)]
pub struct Pending(Arc<File>);

impl Pending {
    /// `fdatasync` of the journal (outside the lease lock, so concurrent pods share commits).
    pub fn sync(&self) -> Result<()> {
        self.0.sync_data().ctx(|| "sync the lease journal")
    }
}

fn fam(ip: &IpAddr) -> usize {
    usize::from(ip.is_ipv6())
}

fn to_u128(ip: &IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(*a)),
        IpAddr::V6(a) => u128::from(*a),
    }
}

fn from_u128(v: u128, v4: bool) -> IpAddr {
    if v4 {
        IpAddr::from(std::net::Ipv4Addr::from(u32::try_from(v).unwrap_or(0)))
    } else {
        IpAddr::from(std::net::Ipv6Addr::from(v))
    }
}

/// The subnet's network address, gateway (its first host) and last usable host.
pub fn bounds(net: &Cidr) -> (u128, u128, u128) {
    let bits: u32 = if net.addr.is_ipv4() { 32 } else { 128 };
    let host_bits = bits - u32::from(net.prefix);
    let size: u128 = if host_bits >= 128 {
        u128::MAX
    } else {
        1u128 << host_bits
    };
    let base = to_u128(&net.addr) & !(size.wrapping_sub(1));
    // IPv4 keeps its broadcast address out; IPv6 has none.
    let last = base + size.saturating_sub(if net.addr.is_ipv4() { 2 } else { 1 });
    (base, base + 1, last)
}

/// The gateway (bridge) address of `net`.
pub fn gateway(net: &Cidr) -> IpAddr {
    from_u128(bounds(net).1, net.addr.is_ipv4())
}

impl Leases {
    /// Opens (creating) the journal in `dir`, takes its lock and reads it back.
    pub fn open(dir: &Path) -> Result<Leases> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let lock_path = dir.join(LOCK);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .ctx(|| format!("open {}", lock_path.display()))?;
        rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
            |_| {
                Error::precondition(format!(
                    "{} is held by another bosun daemon (one daemon per lease directory)",
                    lock_path.display()
                ))
            },
        )?;
        let path = dir.join(LEASES);
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .append(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        let mut text = String::new();
        file.read_to_string(&mut text)
            .ctx(|| format!("read {}", path.display()))?;
        let mut leases = Leases {
            dir: dir.to_path_buf(),
            journal: Arc::new(file),
            _lock: lock,
            by_id: BTreeMap::new(),
            taken: HashSet::new(),
            last: [None, None],
            lines: 0,
        };
        let complete = text.rfind('\n').map_or(0, |i| i + 1);
        if complete < text.len() {
            tracing::warn!(
                "{}: dropping a torn last line ({} bytes)",
                path.display(),
                text.len() - complete
            );
            leases
                .journal
                .set_len(complete as u64)
                .ctx(|| format!("truncate {}", path.display()))?;
        }
        for line in text[..complete].lines() {
            leases.lines += 1;
            if !leases.replay(line) {
                tracing::warn!("{}: ignoring line {line:?}", path.display());
            }
        }
        Ok(leases)
    }

    fn replay(&mut self, line: &str) -> bool {
        let mut w = line.split(' ');
        match (w.next(), w.next()) {
            (Some("+"), Some(id)) if !id.is_empty() => {
                let ips: Option<Vec<IpAddr>> = w.map(|s| s.parse().ok()).collect();
                let Some(ips) = ips else { return false };
                self.insert(id, ips);
                true
            }
            (Some("-"), Some(id)) if !id.is_empty() => {
                self.forget(id);
                true
            }
            _ => false,
        }
    }

    fn insert(&mut self, id: &str, ips: Vec<IpAddr>) {
        self.forget(id);
        for ip in &ips {
            self.taken.insert(*ip);
            self.last[fam(ip)] = Some(*ip);
        }
        self.by_id.insert(id.to_string(), ips);
    }

    fn forget(&mut self, id: &str) {
        for ip in self.by_id.remove(id).unwrap_or_default() {
            self.taken.remove(&ip);
        }
    }

    /// The addresses sandbox `id` holds.
    pub fn get(&self, id: &str) -> Option<&[IpAddr]> {
        self.by_id.get(id).map(Vec::as_slice)
    }

    /// Every sandbox holding a lease.
    pub fn ids(&self) -> Vec<String> {
        self.by_id.keys().cloned().collect()
    }

    /// One free address per subnet for sandbox `id` (its existing lease when it has one), with
    /// the journal line written; the caller syncs it ([`Pending::sync`]) before using them.
    pub fn allocate(&mut self, id: &str, subnets: &[Cidr]) -> Result<(Vec<IpAddr>, Pending)> {
        if let Some(ips) = self.by_id.get(id) {
            return Ok((ips.clone(), Pending(self.journal.clone())));
        }
        let mut ips = Vec::new();
        for net in subnets {
            ips.push(self.free(net)?);
        }
        let line = format!(
            "+ {id} {}\n",
            ips.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(" ")
        );
        self.append(&line)?;
        self.insert(id, ips.clone());
        Ok((ips, Pending(self.journal.clone())))
    }

    /// The next free address of `net` after the last one handed out.
    fn free(&self, net: &Cidr) -> Result<IpAddr> {
        let v4 = net.addr.is_ipv4();
        let (_, gw, last) = bounds(net);
        let (first, end) = (gw + 1, last);
        if first > end {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!("subnet {net} has no address for pods"),
            ));
        }
        let start = self.last[usize::from(!v4)]
            .map(|ip| to_u128(&ip))
            .filter(|v| *v >= first && *v < end)
            .map_or(first, |v| v + 1);
        // At most every address once; stops at the first free one.
        let span = end - first + 1;
        let tries = span.min(self.taken.len() as u128 + 4096);
        for i in 0..tries {
            let v = first + (start - first + i) % span;
            let ip = from_u128(v, v4);
            // A host-local lease file left by a CNI attach before bosun had its own IPAM.
            if !self.taken.contains(&ip) && !self.dir.join(ip.to_string()).exists() {
                return Ok(ip);
            }
        }
        Err(Error::new(
            ErrorKind::ResourceExhausted,
            format!("subnet {net}: no free address for another pod"),
        ))
    }

    /// Records that sandbox `id` gave its addresses back; false when it held none.
    pub fn release(&mut self, id: &str) -> Result<Option<Pending>> {
        if !self.by_id.contains_key(id) {
            return Ok(None);
        }
        self.append(&format!("- {id}\n"))?;
        self.forget(id);
        if self.lines > 1024 && self.lines > 4 * self.by_id.len() {
            if let Err(e) = self.compact() {
                tracing::warn!("compact the lease journal: {e}");
            }
        }
        Ok(Some(Pending(self.journal.clone())))
    }

    /// Appends `line` whole or not at all: a write a full disk cuts short is truncated away,
    /// or the next line would run on from the torn one and be lost at the next start
    /// (issue 28).
    fn append(&mut self, line: &str) -> Result<()> {
        let path = self.dir.join(LEASES);
        let journal = &*self.journal;
        let before = journal
            .metadata()
            .ctx(|| format!("stat {}", path.display()))?;
        if let Err(e) = (&*self.journal).write_all(line.as_bytes()) {
            let _ = journal.set_len(before.len());
            return Err(crate::store::space::name_fs(
                Error::from(e).context(format!("write {}", path.display())),
                &path,
            ));
        }
        self.lines += 1;
        Ok(())
    }

    /// Rewrites the journal with the live leases only.
    fn compact(&mut self) -> Result<()> {
        let path = self.dir.join(LEASES);
        let tmp = self.dir.join(format!("{LEASES}.tmp"));
        let text: String = self
            .by_id
            .iter()
            .map(|(id, ips)| {
                let ips: Vec<String> = ips.iter().map(ToString::to_string).collect();
                format!("+ {id} {}\n", ips.join(" "))
            })
            .collect();
        let written = File::create(&tmp)
            .and_then(|mut f| f.write_all(text.as_bytes()).and_then(|()| f.sync_all()))
            .and_then(|()| std::fs::rename(&tmp, &path))
            .ctx(|| format!("write {}", tmp.display()));
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        written?;
        File::open(&self.dir)
            .and_then(|d| d.sync_all())
            .ctx(|| format!("sync {}", self.dir.display()))?;
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        self.journal = Arc::new(file);
        self.lines = self.by_id.len();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::cidr;

    fn nets(s: &str) -> Vec<Cidr> {
        cidr::parse_list(s).expect("subnets")
    }

    #[test]
    fn allocates_after_the_gateway_and_survives_a_reopen() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut l = Leases::open(dir.path()).expect("open");
        let (a, p) = l.allocate("a", &nets("10.9.0.0/24,fd09::/64")).expect("a");
        p.sync().expect("sync");
        assert_eq!(
            a,
            [
                "10.9.0.2".parse::<IpAddr>().expect("ip"),
                "fd09::2".parse().expect("ip")
            ]
        );
        let (again, _) = l.allocate("a", &nets("10.9.0.0/24")).expect("again");
        assert_eq!(again, a, "idempotent");
        let (b, _) = l.allocate("b", &nets("10.9.0.0/24")).expect("b");
        assert_eq!(b, ["10.9.0.3".parse::<IpAddr>().expect("ip")]);
        assert!(l.release("a").expect("release").is_some());
        assert!(l.release("a").expect("twice").is_none(), "released once");
        drop(l);
        let mut l = Leases::open(dir.path()).expect("reopen");
        assert_eq!(l.ids(), ["b"]);
        // Goes on after the last handed out, not back to the freed .2.
        let (c, _) = l.allocate("c", &nets("10.9.0.0/24")).expect("c");
        assert_eq!(c, ["10.9.0.4".parse::<IpAddr>().expect("ip")]);
    }

    #[test]
    fn a_second_daemon_is_refused_and_a_torn_line_dropped() {
        let dir = tempfile::tempdir().expect("tmp");
        let l = Leases::open(dir.path()).expect("open");
        let e = Leases::open(dir.path()).expect_err("locked");
        assert_eq!(e.kind(), ErrorKind::FailedPrecondition, "{e}");
        drop(l);
        std::fs::write(dir.path().join(LEASES), "+ a 10.9.0.2\n+ b 10.9").expect("write");
        let l = Leases::open(dir.path()).expect("open");
        assert_eq!(l.ids(), ["a"]);
        let text = std::fs::read_to_string(dir.path().join(LEASES)).expect("read");
        assert_eq!(text, "+ a 10.9.0.2\n");
    }

    #[test]
    fn a_line_a_full_disk_cuts_short_is_taken_back() {
        let name = "a_line_a_full_disk_cuts_short_is_taken_back";
        let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
            return;
        };
        // 4086 bytes: the next line's first 10 fit in the journal's page, the rest do not.
        std::fs::write(fs.path().join(LEASES), "- pad\n".repeat(681)).expect("write");
        let mut l = Leases::open(fs.path()).expect("open");
        fs.fill();
        let e = l
            .allocate("a", &nets("10.9.0.0/24"))
            .expect_err("a full disk");
        assert_eq!(e.kind(), ErrorKind::NoSpace, "{e}");
        let journal = fs.path().join(LEASES);
        assert_eq!(std::fs::metadata(&journal).expect("stat").len(), 4086);
        fs.free();
        l.allocate("b", &nets("10.9.0.0/24")).expect("once freed");
        drop(l);
        assert_eq!(Leases::open(fs.path()).expect("reopen").ids(), ["b"]);
    }

    #[test]
    fn a_small_subnet_runs_out_and_skips_host_local_files() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(dir.path().join("10.9.0.2"), "old-cni-pod").expect("write");
        let mut l = Leases::open(dir.path()).expect("open");
        // /29: .0 network, .1 gateway, .7 broadcast; .2 held by host-local.
        for (i, want) in ["10.9.0.3", "10.9.0.4", "10.9.0.5", "10.9.0.6"]
            .iter()
            .enumerate()
        {
            let (ips, _) = l
                .allocate(&format!("p{i}"), &nets("10.9.0.0/29"))
                .expect("alloc");
            assert_eq!(ips[0].to_string(), *want);
        }
        let e = l.allocate("full", &nets("10.9.0.0/29")).expect_err("full");
        assert_eq!(e.kind(), ErrorKind::ResourceExhausted, "{e}");
        assert_eq!(gateway(&nets("10.9.0.128/25")[0]).to_string(), "10.9.0.129");
    }

    #[test]
    fn compaction_keeps_the_live_leases() {
        let dir = tempfile::tempdir().expect("tmp");
        let mut l = Leases::open(dir.path()).expect("open");
        for i in 0..700 {
            let id = format!("p{i}");
            l.allocate(&id, &nets("10.9.0.0/16")).expect("alloc");
            if i % 100 != 0 {
                l.release(&id).expect("release");
            }
        }
        let lines = std::fs::read_to_string(dir.path().join(LEASES))
            .expect("read")
            .lines()
            .count();
        assert!(lines < 1000, "{lines} lines: not compacted");
        drop(l);
        let l = Leases::open(dir.path()).expect("reopen");
        assert_eq!(l.ids().len(), 7);
    }
}
