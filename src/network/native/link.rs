//! rtnetlink operations the embedded network needs: the bridge, a pod's veth pair (its peer
//! made directly in the pod's netns), addresses, routes, hairpin, and link removal.

use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, BorrowedFd};

use super::netlink::{Msg, Socket, F_CREATE, F_EXCL, F_REPLACE};

const RTM_NEWLINK: u16 = 16;
const RTM_DELLINK: u16 = 17;
const RTM_GETLINK: u16 = 18;
const RTM_SETLINK: u16 = 19;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;

const IFLA_ADDRESS: u16 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_MASTER: u16 = 10;
const IFLA_PROTINFO: u16 = 12;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFLA_BRPORT_MODE: u16 = 4;

const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const IFA_FLAGS: u16 = 8;
const IFA_F_NODAD: u32 = 0x02;

const RTA_OIF: u16 = 4;
const RTA_GATEWAY: u16 = 5;

const IFF_UP: u32 = 1;
const AF_UNSPEC: u8 = 0;
const AF_INET: u8 = 2;
const AF_BRIDGE: u8 = 7;
const AF_INET6: u8 = 10;

/// `struct ifinfomsg` for link `index`; `up` sets IFF_UP (and only it) in the change mask.
fn ifinfo(family: u8, index: u32, up: bool) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0] = family;
    b[4..8].copy_from_slice(&index.to_ne_bytes());
    if up {
        b[8..12].copy_from_slice(&IFF_UP.to_ne_bytes());
        b[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
    }
    b
}

fn family(ip: &IpAddr) -> u8 {
    if ip.is_ipv4() {
        AF_INET
    } else {
        AF_INET6
    }
}

fn octets(ip: &IpAddr) -> Vec<u8> {
    match ip {
        IpAddr::V4(a) => a.octets().to_vec(),
        IpAddr::V6(a) => a.octets().to_vec(),
    }
}

/// The index of link `name`, `None` when there is none.
pub fn index(sock: &mut Socket, name: &str) -> io::Result<Option<u32>> {
    let mut m = Msg::new(RTM_GETLINK, 0);
    m.raw(&ifinfo(AF_UNSPEC, 0, false)).str(IFLA_IFNAME, name);
    match sock.request(m) {
        Ok(replies) => Ok(replies
            .iter()
            .find(|r| r.kind == RTM_NEWLINK)
            .and_then(|r| r.payload.get(4..8))
            .map(|b| u32::from_ne_bytes([b[0], b[1], b[2], b[3]]))),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Creates bridge `name` (up, with a fixed random MAC so it does not change as ports come and
/// go) unless it exists; its index.
pub fn ensure_bridge(sock: &mut Socket, name: &str) -> io::Result<u32> {
    if let Some(i) = index(sock, name)? {
        return Ok(i);
    }
    let mut mac: [u8; 6] = rand::random();
    mac[0] = (mac[0] | 0x02) & !0x01;
    let mut m = Msg::new(RTM_NEWLINK, F_CREATE | F_EXCL);
    m.raw(&ifinfo(AF_UNSPEC, 0, true))
        .str(IFLA_IFNAME, name)
        .attr(IFLA_ADDRESS, &mac)
        .begin(IFLA_LINKINFO)
        .str(IFLA_INFO_KIND, "bridge")
        .end();
    match sock.request(m) {
        Ok(_) => {}
        // Made meanwhile by someone else: use it.
        Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    index(sock, name)?.ok_or_else(|| io::Error::other("bridge vanished after its creation"))
}

/// Brings link `index` up.
pub fn set_up(sock: &mut Socket, index: u32) -> io::Result<()> {
    let mut m = Msg::new(RTM_NEWLINK, 0);
    m.raw(&ifinfo(AF_UNSPEC, index, true));
    sock.request(m).map(drop)
}

/// Adds (or refreshes) `ip/prefix` on link `index`, without duplicate address detection (a
/// tentative IPv6 address would be unusable for a second).
pub fn add_address(sock: &mut Socket, index: u32, ip: IpAddr, prefix: u8) -> io::Result<()> {
    let mut hdr = [0u8; 8];
    hdr[0] = family(&ip);
    hdr[1] = prefix;
    hdr[2] = IFA_F_NODAD as u8;
    hdr[4..8].copy_from_slice(&index.to_ne_bytes());
    let mut m = Msg::new(RTM_NEWADDR, F_CREATE | F_REPLACE);
    m.raw(&hdr);
    let o = octets(&ip);
    if ip.is_ipv4() {
        m.attr(IFA_LOCAL, &o);
    }
    m.attr(IFA_ADDRESS, &o).u32(IFA_FLAGS, IFA_F_NODAD);
    sock.request(m).map(drop)
}

/// Adds the default route via `gateway` on link `index` (main table).
pub fn add_default_route(sock: &mut Socket, index: u32, gateway: IpAddr) -> io::Result<()> {
    // struct rtmsg: family, dst_len, src_len, tos, table (main), protocol (boot), scope
    // (universe), type (unicast), flags.
    let hdr = [family(&gateway), 0, 0, 0, 254, 3, 0, 1, 0, 0, 0, 0];
    let mut m = Msg::new(RTM_NEWROUTE, F_CREATE | F_REPLACE);
    m.raw(&hdr)
        .attr(RTA_GATEWAY, &octets(&gateway))
        .u32(RTA_OIF, index);
    sock.request(m).map(drop)
}

/// Creates veth `host` (up, enslaved to `master`) with its peer `peer` made directly in the
/// network namespace `netns` (down: the kernel cannot open a peer before the pair is linked,
/// ENOTCONN; the pod side brings it up).
pub fn create_veth(
    sock: &mut Socket,
    host: &str,
    peer: &str,
    netns: BorrowedFd<'_>,
    master: u32,
) -> io::Result<()> {
    let fd = u32::try_from(netns.as_raw_fd()).map_err(|_| io::Error::other("bad netns fd"))?;
    let mut m = Msg::new(RTM_NEWLINK, F_CREATE | F_EXCL);
    m.raw(&ifinfo(AF_UNSPEC, 0, true))
        .str(IFLA_IFNAME, host)
        .u32(IFLA_MASTER, master)
        .begin(IFLA_LINKINFO)
        .str(IFLA_INFO_KIND, "veth")
        .begin(IFLA_INFO_DATA)
        .begin(VETH_INFO_PEER)
        .raw(&ifinfo(AF_UNSPEC, 0, false))
        .str(IFLA_IFNAME, peer)
        .u32(IFLA_NET_NS_FD, fd)
        .end()
        .end()
        .end();
    sock.request(m).map(drop)
}

/// Turns hairpin mode on for bridge port `index` (a pod reaching its own hostPort: with
/// br_netfilter the DNATed frame goes back out the port it came in). `RTM_SETLINK` with
/// `AF_BRIDGE` reaches the bridge's port settings (`RTM_NEWLINK` ignores them).
pub fn set_hairpin(sock: &mut Socket, index: u32) -> io::Result<()> {
    let mut m = Msg::new(RTM_SETLINK, 0);
    m.raw(&ifinfo(AF_BRIDGE, index, false))
        .begin(IFLA_PROTINFO)
        .attr(IFLA_BRPORT_MODE, &[1])
        .end();
    sock.request(m).map(drop)
}

/// Takes link `name` down and off its bridge (one request, well under a millisecond);
/// false when there is none. A pod's veth is unplugged rather than deleted: deleting a
/// netdevice waits for an RCU barrier (15-30 ms here, issue 13), while the pod's network
/// namespace, released right after, takes the pair with it in the kernel's own time.
pub fn unplug(sock: &mut Socket, name: &str) -> io::Result<bool> {
    let mut b = ifinfo(AF_UNSPEC, 0, false);
    // Change mask IFF_UP with the flag clear: down.
    b[12..16].copy_from_slice(&IFF_UP.to_ne_bytes());
    let mut m = Msg::new(RTM_NEWLINK, 0);
    m.raw(&b).str(IFLA_IFNAME, name).u32(IFLA_MASTER, 0);
    match sock.request(m) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Deletes link `name` (a veth takes its peer along); false when there was none.
pub fn delete(sock: &mut Socket, name: &str) -> io::Result<bool> {
    let mut m = Msg::new(RTM_DELLINK, 0);
    m.raw(&ifinfo(AF_UNSPEC, 0, false)).str(IFLA_IFNAME, name);
    match sock.request(m) {
        Ok(_) => Ok(true),
        Err(e) if e.raw_os_error() == Some(libc::ENODEV) => Ok(false),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::super::netlink::attrs;
    use super::*;

    #[test]
    fn veth_request_nests_the_peer_with_its_netns() {
        let mut m = Msg::new(RTM_NEWLINK, F_CREATE | F_EXCL);
        m.raw(&ifinfo(AF_UNSPEC, 0, true))
            .str(IFLA_IFNAME, "vh")
            .begin(IFLA_LINKINFO)
            .str(IFLA_INFO_KIND, "veth")
            .begin(IFLA_INFO_DATA)
            .begin(VETH_INFO_PEER)
            .raw(&ifinfo(AF_UNSPEC, 0, true))
            .str(IFLA_IFNAME, "eth0")
            .u32(IFLA_NET_NS_FD, 9);
        let b = m.bytes();
        let top = attrs(&b[16..], 16);
        assert_eq!(top[0], (IFLA_IFNAME, &b"vh\0"[..]));
        let info = attrs(top[1].1, 0);
        assert_eq!(info[0], (IFLA_INFO_KIND, &b"veth\0"[..]));
        let data = attrs(info[1].1, 0);
        assert_eq!(data[0].0, VETH_INFO_PEER);
        let peer = attrs(data[0].1, 16);
        assert_eq!(peer[0], (IFLA_IFNAME, &b"eth0\0"[..]));
        assert_eq!(peer[1], (IFLA_NET_NS_FD, &9u32.to_ne_bytes()[..]));
        let flags = u32::from_ne_bytes([b[24], b[25], b[26], b[27]]);
        assert_eq!(flags, IFF_UP, "created up");
    }
}
