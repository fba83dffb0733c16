//! A pod's `hostname`, `hosts` and `resolv.conf` files and its `/dev/shm` tmpfs, in the pod dir.

use std::ffi::CString;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use rustix::mount::MountFlags;

use crate::config::DEFAULT_SHM_SIZE;
use crate::error::{Error, Result, ResultExt};
use crate::store::atomic::write_atomic_nosync;

/// The kubelet's limit on search domains.
pub const MAX_DNS_SEARCHES: usize = 32;
/// The kubelet's limit on the length of the search line.
pub const MAX_DNS_SEARCH_CHARS: usize = 2048;

/// CRI `DNSConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DnsConfig {
    /// Name server addresses.
    pub servers: Vec<String>,
    /// Search domains.
    pub searches: Vec<String>,
    /// resolv.conf options (`ndots:5`, `edns0`).
    pub options: Vec<String>,
}

/// What the pod's files are made from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFilesConfig {
    /// The pod hostname (the node's for host-network pods).
    pub hostname: String,
    /// The pod's addresses, each written as `IP<TAB>hostname` in `hosts` (may be empty).
    pub ips: Vec<IpAddr>,
    /// `None`: copy `host_resolv_conf`.
    pub dns: Option<DnsConfig>,
    /// The host's resolver file (normally `/etc/resolv.conf`).
    pub host_resolv_conf: PathBuf,
    /// `Some(bytes)`: mount a pod tmpfs of that size at `<dir>/shm`; `None` (host IPC): none.
    pub shm_size: Option<u64>,
}

impl Default for PodFilesConfig {
    fn default() -> Self {
        PodFilesConfig {
            hostname: String::new(),
            ips: Vec::new(),
            dns: None,
            host_resolv_conf: PathBuf::from("/etc/resolv.conf"),
            shm_size: Some(DEFAULT_SHM_SIZE),
        }
    }
}

/// The host paths of a pod's files (for [`crate::oci::SandboxContext`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodFiles {
    /// `<dir>/hostname`.
    pub hostname: PathBuf,
    /// `<dir>/hosts`.
    pub hosts: PathBuf,
    /// `<dir>/resolv.conf`.
    pub resolv_conf: PathBuf,
    /// `<dir>/shm` when the pod has its own shm tmpfs.
    pub shm: Option<PathBuf>,
}

impl PodFiles {
    /// Writes the files atomically into `dir` (which must exist) and mounts the shm tmpfs;
    /// all or nothing. Rerunning it on the same dir is safe (files replaced, shm kept).
    pub fn write(dir: &Path, cfg: &PodFilesConfig) -> Result<PodFiles> {
        let resolv = match &cfg.dns {
            Some(dns) => resolv_conf(dns)?,
            None => std::fs::read(&cfg.host_resolv_conf)
                .ctx(|| format!("read {}", cfg.host_resolv_conf.display()))?,
        };
        let files = PodFiles {
            hostname: dir.join("hostname"),
            hosts: dir.join("hosts"),
            resolv_conf: dir.join("resolv.conf"),
            shm: cfg.shm_size.map(|_| dir.join("shm")),
        };
        // Renamed into place, not fsynced: they live in the state dir and after a power cut
        // the pod's namespaces are gone and the sandbox NOTREADY (six fsyncs were ~10 ms of
        // every RunPodSandbox here, issue 13).
        let res = (|| -> Result<()> {
            write_atomic_nosync(&files.hostname, format!("{}\n", cfg.hostname).as_bytes())?;
            write_atomic_nosync(&files.hosts, hosts(&cfg.hostname, &cfg.ips).as_bytes())?;
            write_atomic_nosync(&files.resolv_conf, &resolv)?;
            if let (Some(shm), Some(size)) = (&files.shm, cfg.shm_size) {
                mount_shm(shm, size)?;
            }
            Ok(())
        })();
        match res {
            Ok(()) => Ok(files),
            Err(e) => {
                let _ = PodFiles::remove(dir);
                Err(e.context(format!("pod files in {}", dir.display())))
            }
        }
    }

    /// Unmounts the shm tmpfs and removes the files from `dir`; missing pieces are fine.
    pub fn remove(dir: &Path) -> Result<()> {
        let shm = dir.join("shm");
        super::unmount_all(&shm)?;
        match std::fs::remove_dir(&shm) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::from(e).context(format!("remove {}", shm.display())))
            }
            _ => {}
        }
        for name in ["hostname", "hosts", "resolv.conf"] {
            super::remove_file(&dir.join(name))?;
        }
        Ok(())
    }
}

/// The pod `hosts` file: the kubelet's managed header, then `IP<TAB>hostname` per pod address.
pub fn hosts(hostname: &str, ips: &[IpAddr]) -> String {
    let mut out = String::from(
        "127.0.0.1\tlocalhost\n\
         ::1\tlocalhost ip6-localhost ip6-loopback\n\
         fe00::0\tip6-localnet\n\
         fe00::0\tip6-mcastprefix\n\
         fe00::1\tip6-allnodes\n\
         fe00::2\tip6-allrouters\n",
    );
    if !hostname.is_empty() {
        for ip in ips {
            let _ = writeln!(out, "{ip}\t{hostname}");
        }
    }
    out
}

/// `resolv.conf` from a CRI DNSConfig, validated (addresses, the kubelet's search limits, no
/// whitespace inside a search domain or option).
pub fn resolv_conf(dns: &DnsConfig) -> Result<Vec<u8>> {
    let bad = |what: &str, v: &str| Error::invalid(format!("dns_config: {what} {v:?}"));
    let word_ok = |s: &str| !s.is_empty() && !s.contains(char::is_whitespace);
    if dns.searches.len() > MAX_DNS_SEARCHES {
        return Err(Error::invalid(format!(
            "dns_config: {} search domains (at most {MAX_DNS_SEARCHES})",
            dns.searches.len()
        )));
    }
    let search = dns.searches.join(" ");
    if search.len() > MAX_DNS_SEARCH_CHARS {
        return Err(Error::invalid(format!(
            "dns_config: search line of {} characters (at most {MAX_DNS_SEARCH_CHARS})",
            search.len()
        )));
    }
    let mut out = String::new();
    if let Some(s) = dns.searches.iter().find(|s| !word_ok(s)) {
        return Err(bad("search domain", s));
    }
    if !search.is_empty() {
        let _ = writeln!(out, "search {search}");
    }
    for server in &dns.servers {
        let ip: IpAddr = server.parse().map_err(|_| bad("server", server))?;
        let _ = writeln!(out, "nameserver {ip}");
    }
    if let Some(o) = dns.options.iter().find(|o| !word_ok(o)) {
        return Err(bad("option", o));
    }
    if !dns.options.is_empty() {
        let _ = writeln!(out, "options {}", dns.options.join(" "));
    }
    Ok(out.into_bytes())
}

/// Mounts `tmpfs` at `path` (created when missing) unless something is mounted there already.
fn mount_shm(path: &Path, size: u64) -> Result<()> {
    if size == 0 {
        return Err(Error::invalid("shm size must be positive"));
    }
    match std::fs::create_dir(path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
            return Err(Error::from(e).context(format!("create {}", path.display())))
        }
        _ => {}
    }
    if is_mount_point(path)? {
        return Ok(());
    }
    let data = CString::new(format!("mode=1777,size={size}"))
        .map_err(|e| Error::internal(e.to_string()))?;
    rustix::mount::mount(
        "shm",
        path,
        "tmpfs",
        MountFlags::NOSUID | MountFlags::NODEV | MountFlags::NOEXEC,
        data.as_c_str(),
    )
    .ctx(|| format!("mount shm tmpfs at {}", path.display()))
}

fn is_mount_point(path: &Path) -> Result<bool> {
    let me = std::fs::metadata(path).ctx(|| format!("stat {}", path.display()))?;
    let parent =
        std::fs::metadata(path.join("..")).ctx(|| format!("stat {}/..", path.display()))?;
    Ok(me.dev() != parent.dev())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_has_loopback_and_the_pod_lines() {
        let ips = [
            "10.0.0.5".parse().expect("ip"),
            "fd00::5".parse().expect("ip"),
        ];
        let h = hosts("web-0", &ips);
        assert!(h.starts_with("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n"));
        assert!(h.ends_with("10.0.0.5\tweb-0\nfd00::5\tweb-0\n"), "{h}");
        assert!(!hosts("web-0", &[]).contains("web-0"));
    }

    #[test]
    fn resolv_conf_from_dns_config() {
        let dns = DnsConfig {
            servers: vec!["10.96.0.10".into(), "fd00::a".into()],
            searches: vec!["ns.svc.cluster.local".into(), "cluster.local".into()],
            options: vec!["ndots:5".into(), "edns0".into()],
        };
        let text = String::from_utf8(resolv_conf(&dns).expect("valid")).expect("utf8");
        assert_eq!(
            text,
            "search ns.svc.cluster.local cluster.local\nnameserver 10.96.0.10\n\
             nameserver fd00::a\noptions ndots:5 edns0\n"
        );
        assert_eq!(resolv_conf(&DnsConfig::default()).expect("empty"), b"");
    }

    #[test]
    fn resolv_conf_validation() {
        let with = |f: fn(&mut DnsConfig)| {
            let mut d = DnsConfig::default();
            f(&mut d);
            resolv_conf(&d).expect_err("invalid").to_string()
        };
        assert!(with(|d| d.servers = vec!["not-an-ip".into()]).contains("not-an-ip"));
        assert!(with(|d| d.searches = vec!["a b".into()]).contains("search domain"));
        assert!(with(|d| d.options = vec![String::new()]).contains("option"));
        assert!(with(|d| d.searches = (0..33).map(|i| format!("d{i}")).collect()).contains("33"));
        assert!(
            with(|d| d.searches = (0..30).map(|i| "x".repeat(70) + &i.to_string()).collect())
                .contains("characters")
        );
    }

    #[test]
    fn host_resolv_conf_is_copied_and_remove_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let host = dir.path().join("host-resolv");
        std::fs::write(&host, "nameserver 1.1.1.1\n").expect("write");
        let cfg = PodFilesConfig {
            hostname: "pod-a".into(),
            host_resolv_conf: host,
            shm_size: None,
            ..PodFilesConfig::default()
        };
        let files = PodFiles::write(dir.path(), &cfg).expect("write");
        let read = |p: &Path| std::fs::read_to_string(p).expect("read");
        assert_eq!(read(&files.hostname), "pod-a\n");
        assert_eq!(read(&files.resolv_conf), "nameserver 1.1.1.1\n");
        assert!(files.shm.is_none());
        PodFiles::remove(dir.path()).expect("remove");
        PodFiles::remove(dir.path()).expect("remove again");
        assert!(!files.hosts.exists());
    }
}
