//! The embedded network's plan from the config (and the kubelet's pod CIDR), checked before
//! anything is made: names, subnets, hostPort mappings, and the host sysctls it needs.

use std::net::IpAddr;
use std::path::PathBuf;

use super::nft;
use crate::config::cidr::{self, Cidr};
use crate::config::NetworkConfig;
use crate::error::{Error, Result, ResultExt};
use crate::network::PodNetwork;

/// The embedded network as configured now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The network's name (also its nftables table's).
    pub name: String,
    /// The nftables table (`inet`).
    pub table: String,
    /// The bridge.
    pub bridge: String,
    /// The pod subnets, IPv4 first.
    pub subnets: Vec<Cidr>,
    /// The lease journal's directory.
    pub lease_dir: PathBuf,
    /// Masquerade traffic leaving the subnets.
    pub masquerade: bool,
    /// Pods get a default route via the bridge.
    pub default_route: bool,
    /// The embedded network is the one new pods get (the conf dir has no config).
    pub active: bool,
}

impl Plan {
    /// The plan from `cfg`; `pod_cidr` (UpdateRuntimeConfig), when set, replaces the subnet.
    pub fn new(cfg: &NetworkConfig, pod_cidr: Option<&str>, active: bool) -> Result<Plan> {
        cfg.check_names()?;
        let mut subnets = match pod_cidr {
            Some(text) => cidr::parse_list(text)
                .map_err(|e| e.context("pod CIDR from UpdateRuntimeConfig"))?,
            None => cfg.subnets()?,
        };
        subnets.sort_by_key(|c| c.addr.is_ipv6());
        Ok(Plan {
            name: cfg.name.clone(),
            table: cfg.name.clone(),
            bridge: cfg.bridge.clone(),
            subnets,
            lease_dir: cfg.data_dir.join(&cfg.name),
            masquerade: cfg.masquerade,
            default_route: cfg.default_route,
            active,
        })
    }

    /// The table spec.
    pub(super) fn nft_spec(&self) -> nft::Spec {
        nft::Spec {
            table: self.table.clone(),
            bridge: self.bridge.clone(),
            subnets: self.subnets.clone(),
            masquerade: self.masquerade,
        }
    }

    /// What Status says about it.
    pub fn describe(&self) -> String {
        let subnets: Vec<String> = self.subnets.iter().map(ToString::to_string).collect();
        format!(
            "network {:?}: embedded (no CNI config): bridge {}, subnet {}, leases in {}, nftables table inet {}{}",
            self.name,
            self.bridge,
            subnets.join(","),
            self.lease_dir.display(),
            self.table,
            if self.masquerade { ", masquerade" } else { "" }
        )
    }
}

/// One hostPort mapping, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    host_ip: Option<IpAddr>,
    proto: u8,
    protocol: String,
    host_port: u16,
    container_port: u16,
}

/// The pod's hostPort mappings, checked (a bad one is InvalidArgument naming it).
pub fn mappings(pod: &PodNetwork) -> Result<Vec<Mapping>> {
    pod.port_mappings
        .iter()
        .map(|p| {
            let bad = |what: &str| {
                Error::invalid(format!(
                    "port mapping {}:{}/{}: {what}",
                    p.host_port,
                    p.container_port,
                    crate::error::echo(&p.protocol)
                ))
            };
            let proto = nft::proto_number(&p.protocol)
                .ok_or_else(|| bad("protocol must be tcp, udp or sctp"))?;
            let host_port = u16::try_from(p.host_port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("host port must be 1-65535"))?;
            let container_port = u16::try_from(p.container_port)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad("container port must be 1-65535"))?;
            let host_ip = match p.host_ip.as_str() {
                "" => None,
                s => Some(
                    s.parse::<IpAddr>()
                        .map_err(|_| bad("host IP is not an address"))?,
                )
                .filter(|ip| !ip.is_unspecified()),
            };
            Ok(Mapping {
                host_ip,
                proto,
                protocol: p.protocol.clone(),
                host_port,
                container_port,
            })
        })
        .collect()
}

/// The map elements of `mappings` for a pod with addresses `ips`.
pub(super) fn elements(mappings: &[Mapping], ips: &[IpAddr]) -> Vec<nft::Element> {
    let mut out: Vec<nft::Element> = mappings
        .iter()
        .flat_map(|m| {
            ips.iter().filter_map(move |ip| {
                nft::element(m.host_ip, m.proto, m.host_port, *ip, m.container_port)
            })
        })
        .collect();
    out.sort();
    out.dedup_by(|a, b| a.map == b.map && a.key == b.key);
    out
}

/// `8080/tcp, 127.0.0.1:53/udp` (for errors).
pub(super) fn describe_ports(mappings: &[Mapping]) -> String {
    mappings
        .iter()
        .map(|m| match m.host_ip {
            Some(ip) => format!("{ip}:{}/{}", m.host_port, m.protocol),
            None => format!("{}/{}", m.host_port, m.protocol),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes `value` to sysctl file `path` unless it holds it already.
fn sysctl(path: &str, value: &str) -> Result<()> {
    if std::fs::read_to_string(path).is_ok_and(|v| v.trim() == value) {
        return Ok(());
    }
    std::fs::write(path, value).ctx(|| format!("write {path}"))
}

/// What the host needs for the network: forwarding (the bridge is the pods' gateway, as the
/// bridge plugin's isGateway), and `route_localnet` on the bridge so hostPorts answer on
/// 127.0.0.1 (the table's guard drops what else that would let in).
pub(super) fn host_sysctls(plan: &Plan) -> Result<()> {
    for net in &plan.subnets {
        if net.addr.is_ipv4() {
            sysctl("/proc/sys/net/ipv4/ip_forward", "1")?;
            sysctl(
                &format!("/proc/sys/net/ipv4/conf/{}/route_localnet", plan.bridge),
                "1",
            )?;
        } else {
            sysctl("/proc/sys/net/ipv6/conf/all/forwarding", "1")?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::network::PortMap;

    #[test]
    fn config_keys_and_the_pod_cidr() {
        let cfg = NetworkConfig {
            bridge: "bt1".into(),
            subnet: "fd77::/64,10.77.0.0/24".into(),
            data_dir: "/tmp/ipam".into(),
            ..NetworkConfig::default()
        };
        let p = Plan::new(&cfg, None, true).expect("plan");
        assert_eq!(p.subnets[0].to_string(), "10.77.0.0/24", "IPv4 first");
        assert_eq!(p.lease_dir, PathBuf::from("/tmp/ipam/bosun"));
        assert_eq!(p.table, "bosun");
        assert!(p.masquerade && p.default_route, "the defaults");
        assert!(p.describe().contains("bridge bt1"), "{}", p.describe());
        let p = Plan::new(&cfg, Some("10.5.0.0/24"), true).expect("pod cidr");
        assert_eq!(p.subnets.len(), 1);
        let bad = |cfg: NetworkConfig, key: &str| {
            let e = Plan::new(&cfg, None, true).expect_err(key);
            assert!(e.to_string().contains(key), "{e}");
        };
        bad(
            NetworkConfig {
                subnet: "nope".into(),
                ..cfg.clone()
            },
            "network.subnet",
        );
        bad(
            NetworkConfig {
                bridge: "a-very-long-bridge-name".into(),
                ..cfg.clone()
            },
            "network.bridge",
        );
        bad(
            NetworkConfig {
                name: "a b".into(),
                ..cfg.clone()
            },
            "network.name",
        );
        let e = Plan::new(&cfg, Some("x"), true).expect_err("bad pod cidr");
        assert!(e.to_string().contains("pod CIDR"), "{e}");
    }

    #[test]
    fn mappings_are_checked_and_become_elements_per_family() {
        let pod = PodNetwork {
            port_mappings: vec![
                PortMap {
                    host_port: 8080,
                    container_port: 80,
                    protocol: "tcp".into(),
                    host_ip: String::new(),
                },
                PortMap {
                    host_port: 53,
                    container_port: 53,
                    protocol: "udp".into(),
                    host_ip: "127.0.0.1".into(),
                },
            ],
            ..PodNetwork::default()
        };
        let m = mappings(&pod).expect("valid");
        let ips: Vec<IpAddr> = vec![
            "10.1.0.2".parse().expect("ip"),
            "fd01::2".parse().expect("ip"),
        ];
        let els = elements(&m, &ips);
        // 8080 on both families, 53 on IPv4 only (127.0.0.1 is an IPv4 host address).
        let maps: Vec<&str> = els.iter().map(|e| e.map).collect();
        assert_eq!(maps, ["hp4", "hp4ip", "hp6"]);
        assert_eq!(describe_ports(&m), "8080/tcp, 127.0.0.1:53/udp");
        let mut bad = pod.clone();
        bad.port_mappings[0].protocol = "icmp".into();
        let e = mappings(&bad).expect_err("icmp");
        assert!(e.to_string().contains("8080:80/icmp"), "{e}");
        bad.port_mappings[0].protocol = "tcp".into();
        bad.port_mappings[0].host_ip = "nope".into();
        assert!(mappings(&bad).is_err());
    }
}
