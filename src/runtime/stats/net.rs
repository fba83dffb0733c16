//! Network counters of a pod: `/proc/thread-self/net/dev` read from a thread that entered the pod's pinned network namespace.

use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use rustix::thread::{move_into_link_name_space, LinkNameSpaceType};

use crate::error::{Error, Result};

/// The counters of one interface.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Interface {
    /// Interface name (`lo`, `eth0`).
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Packets received.
    pub rx_packets: u64,
    /// Receive errors.
    pub rx_errors: u64,
    /// Packets dropped on receive.
    pub rx_dropped: u64,
    /// Bytes sent.
    pub tx_bytes: u64,
    /// Packets sent.
    pub tx_packets: u64,
    /// Transmit errors.
    pub tx_errors: u64,
    /// Packets dropped on transmit.
    pub tx_dropped: u64,
}

/// The interfaces of the network namespace pinned at `netns`. A short-lived thread enters the
/// namespace (setns affects only the calling thread) and reads its own view of `net/dev`; the
/// thread ends with the read, so no other work ever runs in the pod's namespace.
pub fn read_netns(netns: &Path) -> Result<Vec<Interface>> {
    let ns: PathBuf = netns.to_path_buf();
    let what = || format!("network counters of {}", netns.display());
    let handle = std::thread::Builder::new()
        .name("bosun-netstat".into())
        .spawn(move || -> std::io::Result<String> {
            let f = std::fs::File::open(&ns)?;
            move_into_link_name_space(f.as_fd(), Some(LinkNameSpaceType::Network))?;
            std::fs::read_to_string("/proc/thread-self/net/dev")
        })
        .map_err(|e| Error::internal(format!("{}: spawn thread: {e}", what())))?;
    let text = handle
        .join()
        .map_err(|_| Error::internal(format!("{}: reader thread panicked", what())))?
        .map_err(|e| Error::internal(format!("{}: {e}", what())))?;
    Ok(parse_net_dev(&text))
}

/// Parses `/proc/net/dev`: two header lines, then `name: 8 receive and 8 transmit columns`.
pub fn parse_net_dev(text: &str) -> Vec<Interface> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|n| n.parse().ok())
                .collect::<Option<_>>()?;
            if v.len() < 16 {
                return None;
            }
            Some(Interface {
                name: name.trim().to_string(),
                rx_bytes: v[0],
                rx_packets: v[1],
                rx_errors: v[2],
                rx_dropped: v[3],
                tx_bytes: v[8],
                tx_packets: v[9],
                tx_errors: v[10],
                tx_dropped: v[11],
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const NET_DEV: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1200      12    0    0    0     0          0         0     1200      12    0    0    0     0       0          0
  eth0: 9876543   54321    3    4    0     0          0         7  1234567    4321    5    6    0     0       0          0
 bad: 1 2 3
";

    #[test]
    fn parses_receive_and_transmit_columns() {
        let ifs = parse_net_dev(NET_DEV);
        assert_eq!(ifs.len(), 2);
        assert_eq!(ifs[0].name, "lo");
        assert_eq!((ifs[0].rx_bytes, ifs[0].tx_bytes), (1200, 1200));
        let eth0 = &ifs[1];
        assert_eq!(
            (
                eth0.rx_bytes,
                eth0.rx_packets,
                eth0.rx_errors,
                eth0.rx_dropped
            ),
            (9_876_543, 54_321, 3, 4)
        );
        assert_eq!(
            (
                eth0.tx_bytes,
                eth0.tx_packets,
                eth0.tx_errors,
                eth0.tx_dropped
            ),
            (1_234_567, 4321, 5, 6)
        );
    }

    #[test]
    fn own_namespace_is_readable_and_a_missing_pin_is_an_error() {
        // Entering our own namespace is allowed without privileges.
        let ifs = read_netns(Path::new("/proc/self/ns/net")).expect("own netns");
        assert!(ifs.iter().any(|i| i.name == "lo"), "{ifs:?}");
        assert!(read_netns(Path::new("/nonexistent/netns")).is_err());
    }
}
