//! The nf_tables expressions bosun's rules are made of, and their netlink encoding.

use crate::network::native::netlink::Msg;

const REG_VERDICT: u32 = 0;
pub(super) const REG_1: u32 = 1;
/// `NFT_REG32_00`: concatenated keys start here.
pub(super) const REG32: u32 = 8;
/// Where map values (address, port) are loaded.
pub(super) const REG_VALUE: u32 = REG32 + 8;
/// Where the packet mark is computed.
pub(super) const REG_MARK: u32 = REG32 + 14;

pub(super) const META_MARK: u32 = 3;
pub(super) const META_IIFNAME: u32 = 6;
pub(super) const META_NFPROTO: u32 = 15;
pub(super) const META_L4PROTO: u32 = 16;
pub(super) const BASE_NETWORK: u32 = 1;
pub(super) const BASE_TRANSPORT: u32 = 2;
pub(super) const CMP_EQ: u32 = 0;
pub(super) const CMP_NEQ: u32 = 1;
pub(super) const NF_DROP: u32 = 0;
pub(super) const NF_ACCEPT: u32 = 1;
pub(super) const NFT_JUMP: i32 = -3;
pub(super) const RTN_LOCAL: u32 = 2;

/// An nf_tables expression.
pub(super) enum Expr {
    Meta {
        key: u32,
        dreg: u32,
    },
    MetaSet {
        key: u32,
        sreg: u32,
    },
    Payload {
        base: u32,
        offset: u32,
        len: u32,
        dreg: u32,
    },
    Cmp {
        sreg: u32,
        op: u32,
        data: Vec<u8>,
    },
    Bitwise {
        reg: u32,
        mask: Vec<u8>,
        xor: Vec<u8>,
    },
    Lookup {
        set: &'static str,
        sreg: u32,
        dreg: u32,
    },
    Dnat {
        family: u8,
        addr: u32,
        proto: u32,
    },
    Masq,
    FibDaddrType,
    Verdict {
        code: i32,
        chain: Option<&'static str>,
    },
}

pub(super) fn value(m: &mut Msg, kind: u16, data: &[u8]) {
    m.begin(kind).attr(1, data).end();
}

impl Expr {
    pub(super) fn encode(&self, m: &mut Msg) {
        let name = match self {
            Expr::Meta { .. } | Expr::MetaSet { .. } => "meta",
            Expr::Payload { .. } => "payload",
            Expr::Cmp { .. } => "cmp",
            Expr::Bitwise { .. } => "bitwise",
            Expr::Lookup { .. } => "lookup",
            Expr::Dnat { .. } => "nat",
            Expr::Masq => "masq",
            Expr::FibDaddrType => "fib",
            Expr::Verdict { .. } => "immediate",
        };
        m.begin(1).str(1, name).begin(2);
        match self {
            Expr::Meta { key, dreg } => {
                m.be32(1, *dreg).be32(2, *key);
            }
            Expr::MetaSet { key, sreg } => {
                m.be32(2, *key).be32(3, *sreg);
            }
            Expr::Payload {
                base,
                offset,
                len,
                dreg,
            } => {
                m.be32(1, *dreg)
                    .be32(2, *base)
                    .be32(3, *offset)
                    .be32(4, *len);
            }
            Expr::Cmp { sreg, op, data } => {
                m.be32(1, *sreg).be32(2, *op);
                value(m, 3, data);
            }
            Expr::Bitwise { reg, mask, xor } => {
                m.be32(1, *reg)
                    .be32(2, *reg)
                    .be32(3, u32::try_from(mask.len()).unwrap_or(0));
                value(m, 4, mask);
                value(m, 5, xor);
            }
            Expr::Lookup { set, sreg, dreg } => {
                m.str(1, set).be32(2, *sreg).be32(3, *dreg);
            }
            Expr::Dnat {
                family,
                addr,
                proto,
            } => {
                m.be32(1, 1)
                    .be32(2, u32::from(*family))
                    .be32(3, *addr)
                    .be32(5, *proto);
            }
            Expr::Masq => {}
            Expr::FibDaddrType => {
                // dreg, result = addrtype, flags = daddr
                m.be32(1, REG_1).be32(2, 3).be32(3, 2);
            }
            Expr::Verdict { code, chain } => {
                m.be32(1, REG_VERDICT).begin(2).begin(2);
                m.be32(1, *code as u32);
                if let Some(c) = chain {
                    m.str(2, c);
                }
                m.end().end();
            }
        }
        m.end().end();
    }
}
