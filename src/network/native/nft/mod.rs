//! bosun's nftables table for the embedded network, spoken as nf_tables netlink messages: the
//! fixed rules (hostPort DNAT through maps, masquerade once per network, the localhost guard)
//! and the per-pod hostPort map elements.
//!
//! ```text
//! table inet <network> {
//!   map hp4   { type inet_proto . inet_service : ipv4_addr . inet_service }   # any host address
//!   map hp4ip { type ipv4_addr . inet_proto . inet_service : ipv4_addr . inet_service }
//!   map hp6 / hp6ip: the same for IPv6
//!   chain prerouting  { type nat hook prerouting priority dstnat;  fib daddr type local jump hostports }
//!   chain output      { type nat hook output priority dstnat;      fib daddr type local jump hostports }
//!   chain hostports   { <fam> daddr . l4proto . th dport in @hpNip: mark |= 0x2000, dnat to the map's value
//!                       l4proto . th dport in @hpN: mark |= 0x2000, dnat to the map's value }
//!   chain postrouting { type nat hook postrouting priority srcnat;
//!                       mark 0x2000 and saddr 127.0.0.0/8 (or the pod subnet): masquerade
//!                       [masquerade on] saddr in subnet, daddr not in subnet or multicast: masquerade }
//!   chain guard       { type filter hook prerouting priority -110;
//!                       iifname <bridge> ip daddr 127.0.0.0/8 drop }   # route_localnet's risk
//! }
//! ```

mod expr;
mod rules;

use std::io;
use std::net::IpAddr;

use self::expr::{value, NF_ACCEPT};
pub use self::rules::rule_count;
use self::rules::rules;
use super::netlink::{Msg, Socket, F_APPEND, F_CREATE};
use crate::config::cidr::Cidr;

const NEWTABLE: u16 = 0;
const DELTABLE: u16 = 2;
const NEWCHAIN: u16 = 3;
const NEWRULE: u16 = 6;
const GETRULE: u16 = 7;
const NEWSET: u16 = 9;
const NEWSETELEM: u16 = 12;
const DELSETELEM: u16 = 14;

/// `NFPROTO_INET`, `_IPV4`, `_IPV6`.
const INET: u8 = 1;
const IPV4: u8 = 2;
const IPV6: u8 = 10;

/// The packet mark bit that asks postrouting to masquerade a hostPort connection (portmap's).
pub const MASQ_MARK: u32 = 0x2000;

const SET_MAP: u32 = 0x8;
const TYPE_IPADDR: u32 = 7;
const TYPE_IP6ADDR: u32 = 8;
const TYPE_INET_PROTOCOL: u32 = 12;
const TYPE_INET_SERVICE: u32 = 13;

/// What the table is built from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spec {
    /// The table's name (the network's).
    pub table: String,
    /// The bridge (the localhost guard's interface).
    pub bridge: String,
    /// The pod subnets (one per family).
    pub subnets: Vec<Cidr>,
    /// Masquerade traffic leaving the pod subnet.
    pub masquerade: bool,
}

/// One hostPort map element: which map, its key and its value.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Element {
    /// The map's name.
    pub map: &'static str,
    /// Key bytes (concatenated, each field padded to 4 bytes).
    pub key: Vec<u8>,
    /// Value bytes (address, port padded to 4 bytes).
    pub value: Vec<u8>,
}

/// The protocol number of `tcp`/`udp`/`sctp`.
pub fn proto_number(p: &str) -> Option<u8> {
    match p {
        "tcp" => Some(6),
        "udp" => Some(17),
        "sctp" => Some(132),
        _ => None,
    }
}

fn ip_bytes(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

fn port_reg(p: u16) -> [u8; 4] {
    let b = p.to_be_bytes();
    [b[0], b[1], 0, 0]
}

/// The element mapping `host_ip` (None: any local address) `proto` `host_port` to
/// `pod_ip:container_port`; `None` when the host address's family is not the pod's.
pub fn element(
    host_ip: Option<IpAddr>,
    proto: u8,
    host_port: u16,
    pod_ip: IpAddr,
    container_port: u16,
) -> Option<Element> {
    if host_ip.is_some_and(|h| h.is_ipv4() != pod_ip.is_ipv4()) {
        return None;
    }
    let v4 = pod_ip.is_ipv4();
    let mut key = Vec::new();
    if let Some(h) = host_ip {
        key.extend(ip_bytes(&h));
    }
    key.extend([proto, 0, 0, 0]);
    key.extend(port_reg(host_port));
    let mut value = ip_bytes(&pod_ip);
    value.extend(port_reg(container_port));
    let map = match (v4, host_ip.is_some()) {
        (true, false) => "hp4",
        (true, true) => "hp4ip",
        (false, false) => "hp6",
        (false, true) => "hp6ip",
    };
    Some(Element { map, key, value })
}

fn concat(types: &[u32]) -> u32 {
    types.iter().fold(0, |acc, t| (acc << 6) | t)
}

/// The batch that (re)creates the whole table from `spec` with `elements`, atomically.
pub fn build(spec: &Spec, elements: &[Element]) -> Vec<Msg> {
    let t = spec.table.as_str();
    let mut msgs = Vec::new();
    // `add; delete; add`: the delete cannot fail on a missing table.
    for kind in [NEWTABLE, DELTABLE, NEWTABLE] {
        let mut m = Msg::nft(kind, if kind == NEWTABLE { F_CREATE } else { 0 }, INET);
        m.str(1, t);
        if kind == NEWTABLE {
            m.be32(2, 0);
        }
        msgs.push(m);
    }
    let base: [(&str, &str, u32, i32); 4] = [
        ("prerouting", "nat", 0, -100),
        ("output", "nat", 3, -100),
        ("postrouting", "nat", 4, 100),
        ("guard", "filter", 0, -110),
    ];
    for (name, kind, hook, prio) in base {
        let mut m = Msg::nft(NEWCHAIN, F_CREATE, INET);
        m.str(1, t)
            .str(3, name)
            .begin(4)
            .be32(1, hook)
            .be32(2, prio as u32)
            .end()
            .be32(5, NF_ACCEPT)
            .str(7, kind);
        msgs.push(m);
    }
    let mut m = Msg::nft(NEWCHAIN, F_CREATE, INET);
    m.str(1, t).str(3, "hostports");
    msgs.push(m);
    let mut id = 1u32;
    for net in &spec.subnets {
        let (addr_type, alen) = if net.addr.is_ipv4() {
            (TYPE_IPADDR, 4)
        } else {
            (TYPE_IP6ADDR, 16)
        };
        let suffix = if net.addr.is_ipv4() { "4" } else { "6" };
        for with_ip in [false, true] {
            let name = format!("hp{suffix}{}", if with_ip { "ip" } else { "" });
            let mut key = vec![TYPE_INET_PROTOCOL, TYPE_INET_SERVICE];
            let mut key_len = 8;
            if with_ip {
                key.insert(0, addr_type);
                key_len += alen;
            }
            let mut m = Msg::nft(NEWSET, F_CREATE, INET);
            m.str(1, t)
                .str(2, &name)
                .be32(3, SET_MAP)
                .be32(4, concat(&key))
                .be32(5, key_len)
                .be32(6, concat(&[addr_type, TYPE_INET_SERVICE]))
                .be32(7, alen + 4)
                .be32(10, id);
            id += 1;
            msgs.push(m);
        }
    }
    for (chain, exprs) in rules(spec) {
        let mut m = Msg::nft(NEWRULE, F_CREATE | F_APPEND, INET);
        m.str(1, t).str(2, chain).begin(4);
        for e in &exprs {
            e.encode(&mut m);
        }
        m.end();
        msgs.push(m);
    }
    msgs.extend(elements_msg(t, NEWSETELEM, elements));
    msgs
}

/// One message per map adding (`NEWSETELEM`) or deleting (`DELSETELEM`) `elements`.
fn elements_msg(table: &str, kind: u16, elements: &[Element]) -> Vec<Msg> {
    let mut maps: Vec<&str> = elements.iter().map(|e| e.map).collect();
    maps.sort_unstable();
    maps.dedup();
    maps.into_iter()
        .map(|map| {
            let flags = if kind == NEWSETELEM { F_CREATE } else { 0 };
            let mut m = Msg::nft(kind, flags, INET);
            m.str(1, table).str(2, map).begin(3);
            for e in elements.iter().filter(|e| e.map == map) {
                m.begin(1);
                value(&mut m, 1, &e.key);
                if kind == NEWSETELEM {
                    value(&mut m, 2, &e.value);
                }
                m.end();
            }
            m.end();
            m
        })
        .collect()
}

/// Adds `elements` in one transaction. An element whose key another pod holds fails the
/// whole batch (`EBUSY`/`EEXIST`).
pub fn add(sock: &mut Socket, table: &str, elements: &[Element]) -> Result<(), (usize, io::Error)> {
    sock.batch(elements_msg(table, NEWSETELEM, elements))
}

/// Deletes `elements`; ones already gone are fine (each is retried alone when the batch
/// fails).
pub fn remove(sock: &mut Socket, table: &str, elements: &[Element]) -> io::Result<()> {
    if elements.is_empty()
        || sock
            .batch(elements_msg(table, DELSETELEM, elements))
            .is_ok()
    {
        return Ok(());
    }
    for e in elements {
        match sock.batch(elements_msg(table, DELSETELEM, std::slice::from_ref(e))) {
            Ok(()) => {}
            Err((_, err)) if err.raw_os_error() == Some(libc::ENOENT) => {}
            Err((_, err)) => return Err(err),
        }
    }
    Ok(())
}

/// The number of rules table `table` has now; `None` when it does not exist.
pub fn count_rules(sock: &mut Socket, table: &str) -> io::Result<Option<usize>> {
    let mut m = Msg::nft(GETRULE, 0, INET);
    m.str(1, table);
    match sock.dump(m) {
        Ok(replies) => Ok(Some(
            replies
                .iter()
                .filter(|r| r.kind == ((super::netlink::SUBSYS_NFTABLES << 8) | NEWRULE))
                .count(),
        )),
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::expr::{Expr, CMP_EQ};
    use super::rules::addr_in;
    use super::*;
    use crate::config::cidr;

    fn spec(subnets: &str, masquerade: bool) -> Spec {
        Spec {
            table: "t".into(),
            bridge: "br".into(),
            subnets: cidr::parse_list(subnets).expect("subnets"),
            masquerade,
        }
    }

    #[test]
    fn rule_counts_follow_families_and_masquerade() {
        // pre + out, 2 dnat, 2 marked masq (subnet, localhost), guard.
        assert_eq!(rule_count(&spec("10.1.0.0/24", false)), 7);
        assert_eq!(rule_count(&spec("10.1.0.0/24", true)), 8);
        // v6 adds 2 dnat, 1 marked masq (subnet), 1 masquerade.
        assert_eq!(rule_count(&spec("10.1.0.0/24,fd01::/64", true)), 12);
    }

    #[test]
    fn elements_pad_fields_to_registers() {
        let e = element(None, 6, 8080, "10.1.0.5".parse().expect("ip"), 80).expect("same family");
        assert_eq!(e.map, "hp4");
        assert_eq!(e.key, [6, 0, 0, 0, 0x1f, 0x90, 0, 0]);
        assert_eq!(e.value, [10, 1, 0, 5, 0, 80, 0, 0]);
        let e = element(
            Some("127.0.0.1".parse().expect("ip")),
            17,
            53,
            "10.1.0.5".parse().expect("ip"),
            53,
        )
        .expect("same family");
        assert_eq!(e.map, "hp4ip");
        assert_eq!(e.key.len(), 12);
        let v6 = element(None, 6, 1, "fd01::5".parse().expect("ip"), 1).expect("v6");
        assert_eq!((v6.map, v6.value.len()), ("hp6", 20));
        assert!(element(
            Some("127.0.0.1".parse().expect("ip")),
            6,
            1,
            "fd01::5".parse().expect("ip"),
            1
        )
        .is_none());
        assert_eq!(proto_number("sctp"), Some(132));
        assert_eq!(proto_number("icmp"), None);
    }

    #[test]
    fn prefix_masks() {
        let [_, Expr::Bitwise { mask, .. }, Expr::Cmp { data, .. }] =
            addr_in(12, &cidr::parse("10.1.2.3/20").expect("cidr"), CMP_EQ)
        else {
            panic!("shape");
        };
        assert_eq!(mask, [255, 255, 240, 0]);
        assert_eq!(data, [10, 1, 0, 0]);
    }

    #[test]
    fn build_makes_one_transaction_with_every_piece() {
        let s = spec("10.1.0.0/24,fd01::/64", true);
        let el = element(None, 6, 80, "10.1.0.9".parse().expect("ip"), 80).expect("el");
        let msgs = build(&s, &[el]);
        // 3 table, 5 chains, 4 sets, 12 rules, 1 element message.
        assert_eq!(msgs.len(), 3 + 5 + 4 + 12 + 1);
    }
}
