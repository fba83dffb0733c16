//! `hostUsers: false`: the pod's user namespace range, chosen as the kubelet chooses it (65536
//! ids per pod, the lowest free block from 65536 up; ids below stay the host's) and kept for the
//! pod's lifetime, and the mappings its volume mounts get.

use std::collections::BTreeSet;
use std::sync::{Mutex, PoisonError};

use crate::error::{Error, Result};
use crate::oci::{IdMapping, MountRequest, UserNamespace};

/// Ids per pod (the kubelet's default: 0..65535 inside).
pub const IDS_PER_POD: u32 = 65_536;

/// The pod's user namespace with host ids `host..host + IDS_PER_POD`.
pub fn mapping(host: u32) -> UserNamespace {
    let range = IdMapping {
        container_id: 0,
        host_id: host,
        length: IDS_PER_POD,
    };
    UserNamespace {
        uids: vec![range],
        gids: vec![range],
    }
}

/// The first host id of the lowest block not holding any of `used` (first host ids of the
/// pods' namespaces); `None` when every block is taken.
pub fn pick(used: impl IntoIterator<Item = u32>) -> Option<u32> {
    let mut taken: Vec<u32> = used.into_iter().map(|h| h / IDS_PER_POD).collect();
    taken.sort_unstable();
    taken.dedup();
    // Block 0 is the host's own users; the last block's end must fit in 32 bits.
    (1..u32::MAX / IDS_PER_POD)
        .find(|b| taken.binary_search(b).is_err())
        .map(|b| b * IDS_PER_POD)
}

/// Ranges picked for sandboxes being created, until their RunPodSandbox records them (so two
/// pods never pick the same, with no lock held across the creation).
#[derive(Debug, Default)]
pub struct Picks(Mutex<BTreeSet<u32>>);

/// A range picked for a sandbox being created; released on drop (by then the sandbox records
/// it, or its creation failed).
#[derive(Debug)]
pub struct Picked<'a> {
    picks: &'a Picks,
    host: u32,
    /// The pod's mappings.
    pub ns: UserNamespace,
}

impl Picks {
    /// Picks the lowest block neither in `held` (first host ids of recorded sandboxes' ranges)
    /// nor picked already.
    pub fn pick(&self, held: impl IntoIterator<Item = u32>) -> Result<Picked<'_>> {
        let mut picked = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let host = pick(held.into_iter().chain(picked.iter().copied())).ok_or_else(|| {
            Error::precondition("hostUsers: false: every user namespace range is taken")
        })?;
        picked.insert(host);
        Ok(Picked {
            picks: self,
            host,
            ns: mapping(host),
        })
    }
}

impl Drop for Picked<'_> {
    fn drop(&mut self) {
        let mut picked = self.picks.0.lock().unwrap_or_else(PoisonError::into_inner);
        picked.remove(&self.host);
    }
}

/// The first host id of a user namespace (what [`pick`] compares).
pub fn first_host_id(ns: &UserNamespace) -> Option<u32> {
    ns.uids.first().map(|m| m.host_id)
}

/// ID-maps `mounts` (the pod's volumes) with the pod's own mappings, as the kubelet asks the
/// runtime to: files keep their owners on the host and inside.
pub fn map_volumes(mounts: &mut [MountRequest], ns: &UserNamespace) {
    for m in mounts {
        m.uid_mappings = ns.uids.clone();
        m.gid_mappings = ns.gids.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_lowest_free_block_above_the_hosts() {
        assert_eq!(pick([]), Some(65_536));
        assert_eq!(pick([65_536, 196_608]), Some(131_072));
        assert_eq!(pick([65_536, 131_072]), Some(196_608));
        // A namespace starting inside a block (given over CRI) takes that block.
        assert_eq!(pick([70_000]), Some(131_072));
        let all = (1..u32::MAX / IDS_PER_POD).map(|b| b * IDS_PER_POD);
        assert_eq!(pick(all), None);
    }

    #[test]
    fn a_pick_is_held_until_dropped() {
        let picks = Picks::default();
        let a = picks.pick([65_536]).expect("a");
        let b = picks.pick([65_536]).expect("b");
        assert_eq!((a.host, b.host), (131_072, 196_608));
        drop(a);
        assert_eq!(picks.pick([65_536]).expect("again").host, 131_072);
    }

    #[test]
    fn mapping_covers_the_block_and_volumes_get_it() {
        let ns = mapping(131_072);
        assert_eq!(ns.host_root(), Some((131_072, 131_072)));
        assert_eq!(first_host_id(&ns), Some(131_072));
        let mut mounts = vec![MountRequest::default(), MountRequest::default()];
        map_volumes(&mut mounts, &ns);
        assert!(mounts
            .iter()
            .all(|m| m.uid_mappings == ns.uids && m.gid_mappings == ns.gids));
        crate::oci::userns::check_pod("t", &ns).expect("a valid pod namespace");
    }
}
