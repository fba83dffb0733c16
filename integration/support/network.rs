//! A pod network per test daemon: its own bridge, /24 subnet, lease dir, nftables table (the
//! network's name) and empty CNI conf dir (so bosun's embedded network is used), no masquerade
//! and no default route (pod traffic cannot leave the machine); Debian's plugins behind logging
//! wrappers for the tests that write a CNI config; the real state observed (links, leases, nft
//! map elements); on drop the bridge, the table, portmap's iptables rules and chains and the
//! forwarding sysctls are put back.

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

/// Where Debian's containernetworking-plugins installs the plugins.
pub const DEBIAN_PLUGINS: &str = "/usr/lib/cni";
/// The plugins the CNI config tests run (and the integration tests need installed).
pub const PLUGINS: [&str; 4] = ["loopback", "bridge", "host-local", "portmap"];
/// portmap's shared nat chains (created on the first mapping, never removed by portmap).
const SHARED_CHAINS: [&str; 3] = [
    "CNI-HOSTPORT-DNAT",
    "CNI-HOSTPORT-SETMARK",
    "CNI-HOSTPORT-MASQ",
];
/// Subnets handed out in this process; the forwarding sysctl and whether nftables had a
/// `table ip nat` before the first network; how many networks are alive.
struct Registry {
    subnets: HashSet<(u8, u8)>,
    forward_before: Option<String>,
    forward6_before: Option<String>,
    nat_before: Option<bool>,
    alive: usize,
}

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        Mutex::new(Registry {
            subnets: HashSet::new(),
            forward_before: None,
            forward6_before: None,
            nat_before: None,
            alive: 0,
        })
    })
}

fn reg() -> std::sync::MutexGuard<'static, Registry> {
    registry()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

const FORWARD: &str = "/proc/sys/net/ipv4/ip_forward";
const FORWARD6: &str = "/proc/sys/net/ipv6/conf/all/forwarding";

/// One test daemon's pod network.
#[derive(Debug, Clone)]
pub struct TestNet {
    /// CNI network name (unique: portmap's rule comments and host-local's dir carry it).
    pub name: String,
    /// Bridge name (≤ 15 chars).
    pub bridge: String,
    /// The /24's second and third octets: `10.A.B.0/24`.
    octets: (u8, u8),
    /// host-local's lease directory.
    pub data_dir: PathBuf,
    /// The CNI conf dir (empty: embedded default).
    pub conf_dir: PathBuf,
    /// Wrappers that log each call to [`TestNet::calls`] then exec Debian's plugin.
    pub bin_dir: PathBuf,
}

impl TestNet {
    /// A network for the daemon in scratch dir `dir`.
    pub fn new(dir: &Path) -> std::io::Result<TestNet> {
        let suffix: String = dir
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .chars()
            .rev()
            .take(8)
            .collect::<String>()
            .chars()
            .rev()
            .filter(char::is_ascii_alphanumeric)
            .collect();
        let octets = pick_subnet(&suffix);
        let net = TestNet {
            name: format!("bosun-it-{suffix}"),
            bridge: format!("bt{suffix}"),
            octets,
            data_dir: dir.join("cni-ipam"),
            conf_dir: dir.join("cni-net.d"),
            bin_dir: dir.join("cni-bin"),
        };
        std::fs::create_dir_all(&net.conf_dir)?;
        std::fs::create_dir_all(&net.bin_dir)?;
        for p in PLUGINS {
            net.wrap(p, &format!("exec {DEBIAN_PLUGINS}/{p}"))?;
        }
        let mut r = reg();
        if r.alive == 0 && r.forward_before.is_none() {
            r.forward_before = std::fs::read_to_string(FORWARD).ok();
            r.forward6_before = std::fs::read_to_string(FORWARD6).ok();
            r.nat_before = Some(nat_table_exists());
        }
        r.alive += 1;
        Ok(net)
    }

    /// Installs plugin `name` as a logging wrapper running `body` (sh).
    pub fn wrap(&self, name: &str, body: &str) -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let path = self.bin_dir.join(name);
        let log = self.calls_log();
        std::fs::write(
            &path,
            format!(
                "#!/bin/sh\necho \"$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME {name}\" >> {}\n{body}\n",
                log.display()
            ),
        )?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
    }

    fn calls_log(&self) -> PathBuf {
        self.bin_dir.with_file_name("cni-calls.log")
    }

    /// Every plugin call so far as `(command, container id, ifname, plugin)`.
    pub fn calls(&self) -> Vec<(String, String, String, String)> {
        std::fs::read_to_string(self.calls_log())
            .unwrap_or_default()
            .lines()
            .map(|l| {
                let mut w = l.split(' ').map(str::to_string);
                let mut next = || w.next().unwrap_or_default();
                (next(), next(), next(), next())
            })
            .collect()
    }

    /// How many times `plugin` ran `command` for sandbox `id`.
    pub fn count(&self, command: &str, id: &str, plugin: &str) -> usize {
        self.calls()
            .iter()
            .filter(|c| c.0 == command && c.1 == id && c.3 == plugin)
            .count()
    }

    /// `10.A.B.0/24`.
    pub fn subnet(&self) -> String {
        format!("10.{}.{}.0/24", self.octets.0, self.octets.1)
    }

    /// The bridge's address (host-local's gateway: the subnet's first address).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, self.octets.0, self.octets.1, 1)
    }

    /// Whether `ip` is in the subnet.
    pub fn contains(&self, ip: &str) -> bool {
        ip.parse::<Ipv4Addr>().is_ok_and(|a| {
            let o = a.octets();
            o[0] == 10 && (o[1], o[2]) == self.octets
        })
    }

    /// Every address leased now: the embedded network's journal (`<data_dir>/<name>/leases`)
    /// and host-local's lease files (one per address, named by it) of a CNI config test.
    pub fn leases(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .journal()
            .into_values()
            .flatten()
            .chain(self.host_local_leases())
            .collect();
        out.sort();
        out
    }

    /// host-local's lease files.
    pub fn host_local_leases(&self) -> Vec<String> {
        let dir = self.data_dir.join(&self.name);
        super::cri::entries(&dir)
            .into_iter()
            .filter(|n| n.parse::<std::net::IpAddr>().is_ok())
            .collect()
    }

    /// The embedded network's lease journal lines.
    pub fn journal_lines(&self) -> Vec<String> {
        std::fs::read_to_string(self.data_dir.join(&self.name).join("leases"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// The live leases of the journal: sandbox id → addresses.
    pub fn journal(&self) -> std::collections::BTreeMap<String, Vec<String>> {
        let mut live = std::collections::BTreeMap::new();
        for l in self.journal_lines() {
            let mut w = l.split(' ');
            match (w.next(), w.next()) {
                (Some("+"), Some(id)) => {
                    live.insert(id.to_string(), w.map(str::to_string).collect());
                }
                (Some("-"), Some(id)) => {
                    live.remove(id);
                }
                _ => {}
            }
        }
        live
    }

    /// The host-side veths on the bridge.
    pub fn veths(&self) -> Vec<String> {
        Command::new("ip")
            .args(["-o", "link", "show", "master", &self.bridge])
            .output()
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .filter_map(|l| l.split(": ").nth(1))
                    .map(|n| n.split('@').next().unwrap_or(n).to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `nft -j list table inet <name>`, parsed; `None` when the table does not exist.
    pub fn nft_table(&self) -> Option<serde_json::Value> {
        nft_list_table("inet", &self.name)
    }

    /// The hostPort map elements of the table, one `map: element JSON` each.
    pub fn nft_elements(&self) -> Vec<String> {
        let Some(t) = self.nft_table() else {
            return Vec::new();
        };
        let items = t["nftables"].as_array().cloned().unwrap_or_default();
        items
            .iter()
            .filter_map(|i| i.get("map"))
            .flat_map(|m| {
                let name = m["name"].as_str().unwrap_or_default().to_string();
                m["elem"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .into_iter()
                    .map(move |e| format!("{name}: {e}"))
            })
            .collect()
    }

    /// How many rules the table has (0 when it does not exist).
    pub fn nft_rules(&self) -> usize {
        self.nft_table()
            .and_then(|t| t["nftables"].as_array().cloned())
            .map_or(0, |items| {
                items.iter().filter(|i| i.get("rule").is_some()).count()
            })
    }

    /// Deletes the table behind the daemon's back (a flush, a reboot of the firewall).
    pub fn delete_table(&self) -> bool {
        Command::new("nft")
            .args(["delete", "table", "inet", &self.name])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Flushes the table's rules behind the daemon's back (chains and maps stay).
    pub fn flush_table(&self) -> bool {
        Command::new("nft")
            .args(["flush", "table", "inet", &self.name])
            .status()
            .is_ok_and(|s| s.success())
    }

    /// A CNI config in the conf dir: Debian's bridge plugin (through the logging wrappers)
    /// with host-local leases in the same lease dir, no gateway route, no NAT.
    pub fn write_conflist(&self) -> std::io::Result<()> {
        self.write_conflist_with(false)
    }

    /// [`TestNet::write_conflist`], with bridge's `ipMasq` (a chain and a POSTROUTING rule
    /// per pod, named after the sandbox) and portmap after bridge when `masquerade`: two plugin
    /// calls per ADD (bridge, portmap) and per DEL (portmap, bridge), as the embedded network
    /// ran before it was made in-process.
    pub fn write_conflist_with(&self, masquerade: bool) -> std::io::Result<()> {
        let mut plugins = vec![serde_json::json!({
            "type": "bridge",
            "bridge": self.bridge,
            "isGateway": true,
            "ipMasq": masquerade,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": self.subnet()}]],
                "dataDir": self.data_dir,
            }
        })];
        if masquerade {
            plugins.push(serde_json::json!({
                "type": "portmap",
                "capabilities": {"portMappings": true},
            }));
        }
        std::fs::write(
            self.conf_dir.join("10-plugins.conflist"),
            serde_json::json!({
                "cniVersion": "1.0.0",
                "name": self.name,
                "plugins": plugins,
            })
            .to_string(),
        )
    }

    /// The daemon config section.
    pub fn toml(&self) -> String {
        format!(
            "[network]\nconf_dir = {:?}\nbin_dirs = [{:?}]\nname = {:?}\nbridge = {:?}\nsubnet = {:?}\ndata_dir = {:?}\nmasquerade = false\ndefault_route = false\nplugin_timeout_secs = 20\n",
            self.conf_dir.display().to_string(),
            self.bin_dir.display().to_string(),
            self.name,
            self.bridge,
            self.subnet(),
            self.data_dir.display().to_string(),
        )
    }

    /// `config` with this network's keys added to its `[network]` section (created when
    /// missing); keys the config already sets are kept.
    pub fn merge_into(&self, config: &str) -> String {
        let ours = self.toml();
        let Some(at) = config.find("[network]\n") else {
            return format!("{config}\n{ours}");
        };
        let head = at + "[network]\n".len();
        let missing: String = ours
            .lines()
            .skip(1)
            .filter(|l| {
                let key = l.split(" =").next().unwrap_or_default();
                !config[head..]
                    .lines()
                    .any(|c| c.trim_start().starts_with(&format!("{key} ")))
            })
            .map(|l| format!("{l}\n"))
            .collect();
        format!("{}{missing}{}", &config[..head], &config[head..])
    }

    /// What of this network is on the machine: the bridge, veths on it, hostPort map
    /// elements, iptables lines naming it.
    pub fn leftovers(&self) -> Vec<String> {
        let mut out = Vec::new();
        if Path::new("/sys/class/net").join(&self.bridge).exists() {
            out.push(format!("bridge {}", self.bridge));
        }
        for v in self.veths() {
            out.push(format!("veth {v}"));
        }
        for e in self.nft_elements() {
            out.push(format!("nft element {e}"));
        }
        for l in iptables_save() {
            if l.contains(&self.name) || l.contains(&self.subnet()) {
                out.push(format!("iptables: {l}"));
            }
        }
        out
    }

    /// Removes the veths left on the bridge, the bridge, the network's nftables table and any
    /// iptables rule or per-pod chain naming the network; restores the forwarding sysctls when
    /// the last test network of this process goes. Errors are ignored.
    pub fn cleanup(&self) {
        for v in self.veths() {
            let _ = Command::new("ip").args(["link", "del", &v]).output();
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .output();
        self.delete_table();
        let lines = iptables_save();
        let mut chains = Vec::new();
        for l in &lines {
            if let Some(rule) = l.strip_prefix("-A ") {
                if l.contains(&format!("\\\"{}\\\"", self.name)) || l.contains(&self.subnet()) {
                    iptables_rule("-D", rule);
                    if let Some(target) = rule.split(" -j ").nth(1) {
                        let target = target.split_whitespace().next().unwrap_or_default();
                        // Per-pod chains (portmap's CNI-DN-, bridge's masquerade CNI-…).
                        if target.starts_with("CNI-") && !SHARED_CHAINS.contains(&target) {
                            chains.push(target.to_string());
                        }
                    }
                }
            }
        }
        for c in chains {
            let _ = Command::new("iptables")
                .args(["-t", "nat", "-F", &c])
                .output();
            let _ = Command::new("iptables")
                .args(["-t", "nat", "-X", &c])
                .output();
        }
        remove_empty_shared_chains();
        let mut r = reg();
        r.subnets.remove(&self.octets);
        r.alive = r.alive.saturating_sub(1);
        if r.alive == 0 {
            if let Some(before) = r.forward_before.take() {
                let _ = std::fs::write(FORWARD, before);
            }
            if let Some(before) = r.forward6_before.take() {
                let _ = std::fs::write(FORWARD6, before);
            }
            if r.nat_before.take() == Some(false) {
                remove_empty_nat_table();
            }
        }
    }
}

/// `nft -j list table <family> <name>`, parsed; `None` when the table does not exist.
fn nft_list_table(family: &str, name: &str) -> Option<serde_json::Value> {
    let o = Command::new("nft")
        .args(["-j", "list", "table", family, name])
        .output()
        .ok()?;
    if !o.status.success() {
        return None;
    }
    serde_json::from_slice(&o.stdout).ok()
}

fn nat_table_exists() -> bool {
    nft_list_table("ip", "nat").is_some()
}

/// The `table ip nat` the CNI plugins' iptables (nft backend) made, once no rule is left in it:
/// iptables deletes its chains' rules and its own chains but never the table.
fn remove_empty_nat_table() {
    let empty = nft_list_table("ip", "nat")
        .and_then(|v| {
            let items = v.get("nftables")?.as_array()?;
            Some(!items.iter().any(|i| {
                i.get("rule").is_some() || i.get("set").is_some() || i.get("map").is_some()
            }))
        })
        .unwrap_or(false);
    if empty {
        let _ = Command::new("nft")
            .args(["delete", "table", "ip", "nat"])
            .output();
    }
}

/// `iptables-save -t nat` lines.
pub fn iptables_save() -> Vec<String> {
    Command::new("iptables-save")
        .args(["-t", "nat"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// Runs `iptables -t nat <op> <rule as iptables-save prints it>` (quotes honoured).
fn iptables_rule(op: &str, rule: &str) {
    let mut args = vec!["-t".to_string(), "nat".to_string(), op.to_string()];
    args.extend(bosun::network::firewall::split_rule(rule));
    let _ = Command::new("iptables").args(&args).output();
}

/// Drops portmap's shared chains (and the jumps to them) when no pod mapping is left in them
/// and no hostPort test of this process is running.
fn remove_empty_shared_chains() {
    if HOSTPORT_TESTS.load(Ordering::SeqCst) > 0 {
        return;
    }
    let lines = iptables_save();
    if lines
        .iter()
        .any(|l| l.starts_with("-A CNI-HOSTPORT-DNAT ") && l.contains("-j CNI-DN-"))
    {
        return;
    }
    for l in &lines {
        if let Some(rule) = l.strip_prefix("-A ") {
            let chain = rule.split(' ').next().unwrap_or_default();
            if !SHARED_CHAINS.contains(&chain)
                && SHARED_CHAINS
                    .iter()
                    .any(|c| rule.contains(&format!("-j {c}")))
            {
                iptables_rule("-D", rule);
            }
        }
    }
    for op in ["-F", "-X"] {
        for c in SHARED_CHAINS {
            let _ = Command::new("iptables").args(["-t", "nat", op, c]).output();
        }
    }
}

static HOSTPORT_TESTS: AtomicUsize = AtomicUsize::new(0);

/// Held by a test that maps host ports: meanwhile no daemon cleanup removes portmap's shared
/// chains under it. Declare it after the daemon so it is dropped first.
pub struct HostPortGuard(());

impl HostPortGuard {
    /// Marks a hostPort test running.
    pub fn new() -> HostPortGuard {
        HOSTPORT_TESTS.fetch_add(1, Ordering::SeqCst);
        HostPortGuard(())
    }
}

impl Drop for HostPortGuard {
    fn drop(&mut self) {
        HOSTPORT_TESTS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A `10.A.B.0/24` nobody on this machine routes and this process has not handed out.
fn pick_subnet(seed: &str) -> (u8, u8) {
    let routes = Command::new("ip")
        .args(["-4", "route", "show"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    let mut h: u32 = seed.bytes().fold(2166136261u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(16777619)
    });
    let mut r = reg();
    loop {
        let a = 200 + (h % 40) as u8;
        let b = ((h / 40) % 256) as u8;
        let taken = routes.contains(&format!("10.{a}.{b}.")) || r.subnets.contains(&(a, b));
        if !taken {
            r.subnets.insert((a, b));
            return (a, b);
        }
        h = h.wrapping_add(7919);
    }
}
