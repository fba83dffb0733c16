//! The fixed rules of bosun's table, chain by chain: hostPort DNAT, masquerade, the localhost guard.

use std::net::IpAddr;

use super::expr::*;
use super::{ip_bytes, Spec, IPV4, IPV6, MASQ_MARK};
use crate::config::cidr::Cidr;

fn is(family: u8) -> [Expr; 2] {
    [
        Expr::Meta {
            key: META_NFPROTO,
            dreg: REG_1,
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CMP_EQ,
            data: vec![family],
        },
    ]
}

/// `saddr`/`daddr` (by header offset) within `net` (op EQ) or not (NEQ).
pub(super) fn addr_in(offset: u32, net: &Cidr, op: u32) -> [Expr; 3] {
    let len = if net.addr.is_ipv4() { 4 } else { 16 };
    let mut mask = vec![0u8; len];
    for (i, b) in mask.iter_mut().enumerate() {
        let bits = usize::from(net.prefix).saturating_sub(i * 8).min(8);
        *b = if bits == 0 { 0 } else { 0xffu8 << (8 - bits) };
    }
    let masked: Vec<u8> = ip_bytes(&net.addr)
        .iter()
        .zip(&mask)
        .map(|(a, m)| a & m)
        .collect();
    [
        Expr::Payload {
            base: BASE_NETWORK,
            offset,
            len: len as u32,
            dreg: REG_1,
        },
        Expr::Bitwise {
            reg: REG_1,
            mask,
            xor: vec![0u8; len],
        },
        Expr::Cmp {
            sreg: REG_1,
            op,
            data: masked,
        },
    ]
}

fn saddr_off(v4: bool) -> u32 {
    if v4 {
        12
    } else {
        8
    }
}

fn daddr_off(v4: bool) -> u32 {
    if v4 {
        16
    } else {
        24
    }
}

/// The hostports rule for one map: load its key, look it up (loading the value), mark, DNAT.
fn dnat_rule(v4: bool, with_ip: bool) -> Vec<Expr> {
    let family = if v4 { IPV4 } else { IPV6 };
    let alen: u32 = if v4 { 4 } else { 16 };
    let mut e: Vec<Expr> = is(family).into();
    let mut reg = REG32;
    if with_ip {
        e.push(Expr::Payload {
            base: BASE_NETWORK,
            offset: daddr_off(v4),
            len: alen,
            dreg: reg,
        });
        reg += alen / 4;
    }
    e.push(Expr::Meta {
        key: META_L4PROTO,
        dreg: reg,
    });
    e.push(Expr::Payload {
        base: BASE_TRANSPORT,
        offset: 2,
        len: 2,
        dreg: reg + 1,
    });
    let set = match (v4, with_ip) {
        (true, false) => "hp4",
        (true, true) => "hp4ip",
        (false, false) => "hp6",
        (false, true) => "hp6ip",
    };
    e.push(Expr::Lookup {
        set,
        sreg: REG32,
        dreg: REG_VALUE,
    });
    e.extend(set_mark());
    e.push(Expr::Dnat {
        family,
        addr: REG_VALUE,
        proto: REG_VALUE + alen / 4,
    });
    e
}

/// `meta mark set meta mark | MASQ_MARK`.
fn set_mark() -> [Expr; 3] {
    [
        Expr::Meta {
            key: META_MARK,
            dreg: REG_MARK,
        },
        Expr::Bitwise {
            reg: REG_MARK,
            mask: (!MASQ_MARK).to_ne_bytes().to_vec(),
            xor: MASQ_MARK.to_ne_bytes().to_vec(),
        },
        Expr::MetaSet {
            key: META_MARK,
            sreg: REG_MARK,
        },
    ]
}

/// `meta mark & MASQ_MARK != 0`.
fn marked() -> [Expr; 3] {
    [
        Expr::Meta {
            key: META_MARK,
            dreg: REG_1,
        },
        Expr::Bitwise {
            reg: REG_1,
            mask: MASQ_MARK.to_ne_bytes().to_vec(),
            xor: vec![0; 4],
        },
        Expr::Cmp {
            sreg: REG_1,
            op: CMP_NEQ,
            data: vec![0; 4],
        },
    ]
}

/// The rules, chain by chain, in order.
pub(super) fn rules(spec: &Spec) -> Vec<(&'static str, Vec<Expr>)> {
    let mut out = Vec::new();
    for chain in ["prerouting", "output"] {
        out.push((
            chain,
            vec![
                Expr::FibDaddrType,
                Expr::Cmp {
                    sreg: REG_1,
                    op: CMP_EQ,
                    data: RTN_LOCAL.to_ne_bytes().to_vec(),
                },
                Expr::Verdict {
                    code: NFT_JUMP,
                    chain: Some("hostports"),
                },
            ],
        ));
    }
    for net in &spec.subnets {
        let v4 = net.addr.is_ipv4();
        out.push(("hostports", dnat_rule(v4, true)));
        out.push(("hostports", dnat_rule(v4, false)));
    }
    for net in &spec.subnets {
        let v4 = net.addr.is_ipv4();
        let family = if v4 { IPV4 } else { IPV6 };
        let mut sources = vec![*net];
        if v4 {
            sources.push(Cidr {
                addr: IpAddr::from([127, 0, 0, 0]),
                prefix: 8,
            });
        }
        for src in sources {
            let mut e: Vec<Expr> = is(family).into();
            e.extend(marked());
            e.extend(addr_in(saddr_off(v4), &src, CMP_EQ));
            e.push(Expr::Masq);
            out.push(("postrouting", e));
        }
        if spec.masquerade {
            let multicast = if v4 {
                Cidr {
                    addr: IpAddr::from([224, 0, 0, 0]),
                    prefix: 4,
                }
            } else {
                Cidr {
                    addr: IpAddr::from([0xff00, 0, 0, 0, 0, 0, 0, 0]),
                    prefix: 8,
                }
            };
            let mut e: Vec<Expr> = is(family).into();
            e.extend(addr_in(saddr_off(v4), net, CMP_EQ));
            e.extend(addr_in(daddr_off(v4), net, CMP_NEQ));
            e.extend(addr_in(daddr_off(v4), &multicast, CMP_NEQ));
            e.push(Expr::Masq);
            out.push(("postrouting", e));
        }
        if v4 {
            let mut name = spec.bridge.as_bytes().to_vec();
            name.push(0);
            let mut e = vec![
                Expr::Meta {
                    key: META_IIFNAME,
                    dreg: REG_1,
                },
                Expr::Cmp {
                    sreg: REG_1,
                    op: CMP_EQ,
                    data: name,
                },
            ];
            e.extend(is(IPV4));
            e.extend(addr_in(
                daddr_off(true),
                &Cidr {
                    addr: IpAddr::from([127, 0, 0, 0]),
                    prefix: 8,
                },
                CMP_EQ,
            ));
            e.push(Expr::Verdict {
                code: NF_DROP as i32,
                chain: None,
            });
            out.push(("guard", e));
        }
    }
    out
}

/// How many rules a table built from `spec` has (the integrity check's expectation).
pub fn rule_count(spec: &Spec) -> usize {
    rules(spec).len()
}
