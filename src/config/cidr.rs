//! `address/prefix` strings (`[network] subnet`, pod CIDRs, CNI result addresses), parsed.

use std::net::IpAddr;

use crate::error::{Error, Result};

/// An address with a prefix length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

/// Parses `10.1.2.3/16` or `fd00::1/64`; the prefix must fit the family.
pub fn parse(s: &str) -> Result<Cidr> {
    let bad = || {
        Error::invalid(format!(
            "{:?} is not an address/prefix",
            crate::error::echo(s)
        ))
    };
    let (a, p) = s.trim().split_once('/').ok_or_else(bad)?;
    let addr: IpAddr = a.parse().map_err(|_| bad())?;
    let prefix: u8 = p.parse().map_err(|_| bad())?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    if prefix > max {
        return Err(bad());
    }
    Ok(Cidr { addr, prefix })
}

/// Parses a comma-separated list (`10.0.0.0/24,fd00::/64`); at least one, at most one per
/// family.
pub fn parse_list(s: &str) -> Result<Vec<Cidr>> {
    let list = s
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(parse)
        .collect::<Result<Vec<_>>>()?;
    if list.is_empty() {
        return Err(Error::invalid("no subnet given"));
    }
    let v4 = list.iter().filter(|c| c.addr.is_ipv4()).count();
    if v4 > 1 || list.len() - v4 > 1 {
        return Err(Error::invalid(format!(
            "{:?}: at most one IPv4 and one IPv6 subnet",
            crate::error::echo(s)
        )));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_both_families_and_refuses_junk() {
        let c = parse("10.1.2.3/16").expect("v4");
        assert_eq!((c.addr.to_string(), c.prefix), ("10.1.2.3".into(), 16));
        assert_eq!(parse("fd00::1/64").expect("v6").to_string(), "fd00::1/64");
        for bad in ["10.1.2.3", "10.1.2.3/33", "x/8", "fd00::/129", ""] {
            assert!(parse(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(parse_list("10.0.0.0/24, fd00::/64").expect("dual").len(), 2);
        assert!(parse_list("10.0.0.0/24,10.1.0.0/24").is_err());
        assert!(parse_list(" , ").is_err());
    }
}
