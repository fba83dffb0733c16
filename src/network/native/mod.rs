//! bosun's embedded pod network, made in-process: bridge, per-pod veth pair, addresses and
//! routes over rtnetlink, IPAM in a durable lease journal, masquerade and hostPort maps in one
//! bosun-owned nftables table (used when the CNI conf dir holds no config).
//!
//! Per pod: one lease line, one veth pair (host side `bsn<id prefix>` on the bridge, `eth0` made
//! directly in the pod's netns), its addresses and default routes set from a dedicated thread
//! that enters the netns (never a tokio worker), and one map element per hostPort and address.
//! The table itself is built once per network (atomically, in one nf_tables transaction), checked
//! at every attach and rebuilt from the pods' elements when it was changed behind bosun's back.

pub mod claim;
mod ipam;
mod link;
mod netlink;
mod nft;
mod plan;

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::error::{Error, ErrorKind, Result};
use crate::network::{Attachment, NetworkStatus, PodNetwork, POD_IFNAME, REASON_NOT_READY};

use claim::Claim;
pub use claim::{Owner, CLAIMS_DIR};
use ipam::Leases;
use netlink::{Family, Socket};
pub use plan::Plan;

/// The host-side veth name of sandbox `id` (deterministic, so teardown needs no record).
pub fn veth_name(id: &str) -> String {
    let tail: String = id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(12)
        .collect();
    format!("bsn{tail}")
}

/// What the network holds while the daemon runs.
struct State {
    /// This daemon's registration of the network on the host (see [`claim`]).
    claim: Claim,
    leases: Leases,
    /// The hostPort elements each sandbox holds in the table.
    pods: BTreeMap<String, Vec<nft::Element>>,
    /// The spec the table was last built from (checked at each attach).
    built: Option<nft::Spec>,
    /// The bridge's index and the subnets its addresses were set for.
    bridge: Option<(u32, Vec<crate::config::cidr::Cidr>)>,
}

struct Inner {
    /// The daemon the network belongs to.
    owner: Owner,
    /// The host's registry of embedded networks ([`CLAIMS_DIR`]).
    claims_dir: PathBuf,
    state: Mutex<Option<State>>,
    /// Why the last table build failed (NetworkReady false until one succeeds).
    failure: Mutex<Option<String>>,
}

/// The embedded network (a cheap handle).
#[derive(Clone)]
pub struct Native {
    inner: Arc<Inner>,
}

impl Default for Native {
    fn default() -> Self {
        Native::new(Owner::default(), PathBuf::from(CLAIMS_DIR))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn os(what: impl std::fmt::Display) -> impl FnOnce(io::Error) -> Error {
    move |e| Error::internal(format!("{what}: {e}"))
}

/// Runs `f` on a new thread (it may enter a network namespace: the thread ends with it).
async fn on_thread<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("bosun-netns".into())
        .stack_size(256 << 10)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| Error::internal(format!("pod network thread: {e}")))?;
    rx.await
        .map_err(|_| Error::internal("pod network thread died"))?
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::internal(format!("pod network task: {e}")))?
}

impl Native {
    /// The embedded network of daemon `owner`, registered in `claims_dir` once used; nothing
    /// is touched until it is used.
    pub fn new(owner: Owner, claims_dir: PathBuf) -> Native {
        Native {
            inner: Arc::new(Inner {
                owner,
                claims_dir,
                state: Mutex::new(None),
                failure: Mutex::new(None),
            }),
        }
    }

    /// NetworkReady for `plan`.
    pub fn status(&self, plan: &Plan) -> NetworkStatus {
        let problem = match self.inner.state.try_lock() {
            Ok(mut st) => self.inner.state(&mut st, plan).err(),
            _ => None,
        }
        .map(|e| e.message().to_string())
        .or_else(|| lock(&self.inner.failure).clone());
        match problem {
            None => NetworkStatus {
                ready: true,
                name: plan.name.clone(),
                reason: String::new(),
                message: plan.describe(),
            },
            Some(m) => NetworkStatus {
                ready: false,
                name: String::new(),
                reason: REASON_NOT_READY.into(),
                message: format!("network {:?}: {m}", plan.name),
            },
        }
    }

    /// Opens the network's state for `plan` now (at start, when it is the active network): a
    /// clash with another daemon's network is an error then, not at the first pod.
    pub fn open_now(&self, plan: &Plan) -> Result<()> {
        self.inner
            .state(&mut lock(&self.inner.state), plan)
            .map(drop)
    }

    /// Attaches `pod`: lease, veth pair, addresses and routes, hostPort elements. On error the
    /// caller runs [`Native::detach`], which undoes whatever was made.
    pub async fn attach(&self, pod: &PodNetwork, plan: Arc<Plan>) -> Result<Attachment> {
        let mappings = plan::mappings(pod)?;
        let inner = self.inner.clone();
        let pod = pod.clone();
        let name = plan.name.clone();
        let ips = on_thread(move || inner.attach(&pod, &plan, &mappings)).await?;
        Ok(Attachment { network: name, ips })
    }

    /// Detaches sandbox `id`: its veth, its hostPort elements, then its lease. Idempotent.
    pub async fn detach(&self, id: &str, plan: Option<Arc<Plan>>) -> Result<()> {
        let inner = self.inner.clone();
        let id = id.to_string();
        blocking(move || inner.detach(&id, plan.as_deref())).await
    }

    /// Whether sandbox `id` is attached: its lease and its veth exist.
    pub async fn check(&self, id: &str, plan: Arc<Plan>) -> Result<()> {
        let inner = self.inner.clone();
        let id = id.to_string();
        blocking(move || {
            let mut guard = lock(&inner.state);
            if !inner.open_if_ours(&mut guard, &plan)? {
                return Err(Error::not_found(format!("sandbox {id}: not attached")));
            }
            let st = inner.state(&mut guard, &plan)?;
            if st.leases.get(&id).is_none() {
                return Err(Error::not_found(format!("sandbox {id}: not attached")));
            }
            let mut sock = Socket::open(Family::Route).map_err(os("netlink"))?;
            let veth = veth_name(&id);
            match link::index(&mut sock, &veth).map_err(os("netlink"))? {
                Some(_) => Ok(()),
                None => Err(Error::internal(format!(
                    "sandbox {id}: its veth {veth} is gone"
                ))),
            }
        })
        .await
    }

    /// After recovery: releases what sandboxes not in `attached` hold, takes up the elements
    /// of those that are, and rebuilds the table (`active`: the embedded network is in use).
    pub async fn reconcile(&self, attached: &[PodNetwork], plan: Option<Arc<Plan>>) -> Result<()> {
        let inner = self.inner.clone();
        let attached = attached.to_vec();
        blocking(move || inner.reconcile(&attached, plan.as_deref())).await
    }
}

impl Inner {
    /// Registers `plan`'s network for this daemon, then opens its lease journal (refused when
    /// another daemon's network shares a piece of it, see [`claim`]).
    fn open(&self, plan: &Plan) -> Result<State> {
        let claim = Claim::take(&self.claims_dir, &self.owner, plan)?;
        claim::check_owner(&plan.lease_dir, &self.owner)?;
        let leases = Leases::open(&plan.lease_dir)?;
        claim::own(&plan.lease_dir, &self.owner)?;
        Ok(State {
            claim,
            leases,
            pods: BTreeMap::new(),
            built: None,
            bridge: None,
        })
    }

    /// The state, opened when it is not, its claim following `plan` (a pod CIDR may change
    /// the subnets).
    fn state<'a>(&self, guard: &'a mut Option<State>, plan: &Plan) -> Result<&'a mut State> {
        if guard.is_none() {
            *guard = Some(self.open(plan)?);
        }
        let st = guard
            .as_mut()
            .ok_or_else(|| Error::internal("lease state not open"))?;
        if !st.claim.covers(&self.owner, plan) {
            st.claim.update(&self.claims_dir, &self.owner, plan)?;
        }
        Ok(st)
    }

    /// The state for a teardown or recovery that may find nothing of this daemon's to undo:
    /// false when there is no journal, or it belongs to another daemon (one that owns it, or
    /// runs on a network that shares a piece of this one): nothing of ours can be in it, and
    /// tearing down a pod that never used the embedded network needs no lock of it (issue 28).
    fn open_if_ours(&self, guard: &mut Option<State>, plan: &Plan) -> Result<bool> {
        if guard.is_some() {
            return Ok(true);
        }
        if !plan.lease_dir.join(ipam::LEASES).exists() {
            return Ok(false);
        }
        if let Some(root) = claim::foreign_owner(&plan.lease_dir, &self.owner) {
            tracing::debug!(owner = %root.display(), "embedded network: another daemon's lease journal; nothing of ours");
            return Ok(false);
        }
        match self.open(plan) {
            Ok(st) => {
                *guard = Some(st);
                Ok(true)
            }
            Err(e) if e.kind() == ErrorKind::FailedPrecondition => {
                tracing::debug!("embedded network: not this daemon's: {e}");
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    fn attach(
        &self,
        pod: &PodNetwork,
        plan: &Plan,
        mappings: &[plan::Mapping],
    ) -> Result<Vec<IpAddr>> {
        let id = &pod.id;
        let fail = |what: &str| {
            let what = format!("sandbox {id}: pod network: {what}");
            move |e: io::Error| Error::internal(format!("{what}: {e}"))
        };
        // Host-side sockets first: after setns this thread is in the pod's netns.
        let mut route = Socket::open(Family::Route).map_err(fail("netlink"))?;
        let mut filter = Socket::open(Family::Netfilter).map_err(fail("netlink"))?;
        let netns =
            File::open(&pod.netns).map_err(fail(&format!("open {}", pod.netns.display())))?;
        let (ips, pending) = {
            let mut guard = lock(&self.state);
            let st = self.state(&mut guard, plan)?;
            st.leases.allocate(id, &plan.subnets)?
        };
        pending.sync()?;
        crate::failpoint_check!("net.attach.leased")?;
        let bridge = self.bridge(&mut route, plan)?;
        let veth = veth_name(id);
        let make = |route: &mut Socket| {
            link::create_veth(
                route,
                &veth,
                POD_IFNAME,
                std::os::fd::AsFd::as_fd(&netns),
                bridge,
            )
        };
        match make(&mut route) {
            Err(e) if e.raw_os_error() == Some(libc::EEXIST) => {
                // Left by an attach of this sandbox that was interrupted: start again.
                link::delete(&mut route, &veth).map_err(fail("delete stale veth"))?;
                make(&mut route)
            }
            r => r,
        }
        .map_err(fail(&format!("create veth {veth}")))?;
        crate::failpoint_check!("net.attach.veth")?;
        let host = link::index(&mut route, &veth)
            .map_err(fail("veth"))?
            .ok_or_else(|| Error::internal(format!("sandbox {id}: veth {veth} vanished")))?;
        link::set_hairpin(&mut route, host).map_err(fail("hairpin"))?;
        self.configure_pod(&netns, &ips, plan)
            .map_err(|e| e.context(format!("sandbox {id}: pod network: in its netns")))?;
        crate::failpoint_check!("net.attach.configured")?;
        self.add_elements(&mut filter, id, &ips, mappings, plan)?;
        crate::failpoint_check!("net.attach.done")?;
        Ok(ips)
    }

    /// The bridge's index: made, brought up and given the gateway addresses when missing.
    fn bridge(&self, route: &mut Socket, plan: &Plan) -> Result<u32> {
        let fail = |e: io::Error| Error::internal(format!("bridge {}: {e}", plan.bridge));
        let current = link::index(route, &plan.bridge).map_err(fail)?;
        let known = lock(&self.state).as_ref().and_then(|s| s.bridge.clone());
        if let (Some(i), Some((k, subnets))) = (current, &known) {
            if i == *k && *subnets == plan.subnets {
                return Ok(i);
            }
        }
        let index = link::ensure_bridge(route, &plan.bridge).map_err(fail)?;
        link::set_up(route, index).map_err(fail)?;
        for net in &plan.subnets {
            link::add_address(route, index, ipam::gateway(net), net.prefix).map_err(fail)?;
        }
        plan::host_sysctls(plan)?;
        if let Some(st) = lock(&self.state).as_mut() {
            st.bridge = Some((index, plan.subnets.clone()));
        }
        Ok(index)
    }

    /// In the pod's netns (this thread enters it for good): eth0 up, addresses, routes.
    fn configure_pod(&self, netns: &File, ips: &[IpAddr], plan: &Plan) -> Result<()> {
        rustix::thread::move_into_link_name_space(
            std::os::fd::AsFd::as_fd(netns),
            Some(rustix::thread::LinkNameSpaceType::Network),
        )
        .map_err(|e| Error::internal(format!("setns: {e}")))?;
        let mut sock = Socket::open(Family::Route).map_err(os("netlink"))?;
        let eth0 = link::index(&mut sock, POD_IFNAME)
            .map_err(os("eth0"))?
            .ok_or_else(|| Error::internal("eth0 is missing"))?;
        link::set_up(&mut sock, eth0).map_err(os("eth0 up"))?;
        for (ip, net) in ips.iter().zip(&plan.subnets) {
            link::add_address(&mut sock, eth0, *ip, net.prefix)
                .map_err(os(format!("address {ip}/{}", net.prefix)))?;
        }
        if plan.default_route {
            for net in &plan.subnets {
                let gw = ipam::gateway(net);
                link::add_default_route(&mut sock, eth0, gw)
                    .map_err(os(format!("default route via {gw}")))?;
            }
        }
        Ok(())
    }

    /// Makes sure the table is whole (rebuilding it with every pod's elements when not), then
    /// adds this pod's hostPort elements.
    fn add_elements(
        &self,
        sock: &mut Socket,
        id: &str,
        ips: &[IpAddr],
        mappings: &[plan::Mapping],
        plan: &Plan,
    ) -> Result<()> {
        let mut guard = lock(&self.state);
        let st = self.state(&mut guard, plan)?;
        self.ensure_table(sock, st, plan)?;
        let elements = plan::elements(mappings, ips);
        if elements.is_empty() {
            return Ok(());
        }
        nft::add(sock, &plan.table, &elements).map_err(|(i, e)| {
            let busy = matches!(e.raw_os_error(), Some(libc::EBUSY) | Some(libc::EEXIST));
            if busy {
                Error::new(
                    ErrorKind::AlreadyExists,
                    format!(
                        "sandbox {id}: hostPort: {} is already mapped to another pod",
                        plan::describe_ports(mappings)
                    ),
                )
            } else {
                Error::internal(format!(
                    "sandbox {id}: nftables table {}: add hostPort map elements (message {i}): {e}",
                    plan.table
                ))
            }
        })?;
        st.pods.insert(id.to_string(), elements);
        Ok(())
    }

    /// Rebuilds the table unless it is the one last built and still has all its rules.
    fn ensure_table(&self, sock: &mut Socket, st: &mut State, plan: &Plan) -> Result<()> {
        let spec = plan.nft_spec();
        let intact = st.built.as_ref() == Some(&spec)
            && nft::count_rules(sock, &spec.table)
                .map_err(os(format!("nftables table {}", spec.table)))?
                == Some(nft::rule_count(&spec));
        if intact {
            return Ok(());
        }
        if st.built.is_some() {
            tracing::warn!(table = %spec.table, "nftables table changed behind bosun's back: rebuilding it");
        }
        self.rebuild(sock, st, &spec)
    }

    fn rebuild(&self, sock: &mut Socket, st: &mut State, spec: &nft::Spec) -> Result<()> {
        // One element per key: a clash (only possible after a failed add) keeps the first.
        let mut seen = std::collections::HashSet::new();
        let mut all = Vec::new();
        for els in st.pods.values_mut() {
            els.retain(|e| seen.insert((e.map, e.key.clone())));
            all.extend(els.iter().cloned());
        }
        match sock.batch(nft::build(spec, &all)) {
            Ok(()) => {
                st.built = Some(spec.clone());
                *lock(&self.failure) = None;
                tracing::info!(table = %spec.table, elements = all.len(), "nftables table built");
                Ok(())
            }
            Err((i, e)) => {
                let msg = format!(
                    "build nftables table inet {} (message {i} refused): {e}",
                    spec.table
                );
                *lock(&self.failure) = Some(msg.clone());
                st.built = None;
                Err(Error::internal(msg))
            }
        }
    }

    fn detach(&self, id: &str, plan: Option<&Plan>) -> Result<()> {
        let fail = |what: &str| {
            let what = format!("sandbox {id}: pod network teardown: {what}");
            move |e: io::Error| Error::internal(format!("{what}: {e}"))
        };
        let mut guard = lock(&self.state);
        let Some(plan) = plan else { return Ok(()) };
        // Nothing was ever leased here by this daemon: nothing to undo.
        if !self.open_if_ours(&mut guard, plan)? {
            return Ok(());
        }
        let st = self.state(&mut guard, plan)?;
        if st.leases.get(id).is_none() && !st.pods.contains_key(id) {
            return Ok(());
        }
        let mut route = Socket::open(Family::Route).map_err(fail("netlink"))?;
        // Off the bridge before the address is given back: the pod can no longer answer for
        // it. The pair goes with the pod's netns (see link::unplug).
        link::unplug(&mut route, &veth_name(id)).map_err(fail("unplug veth"))?;
        crate::failpoint!("net.detach.unplugged");
        if let Some(elements) = st.pods.get(id).cloned() {
            let mut filter = Socket::open(Family::Netfilter).map_err(fail("netlink"))?;
            nft::remove(&mut filter, &plan.table, &elements).map_err(fail("hostPort elements"))?;
            st.pods.remove(id);
            crate::failpoint!("net.detach.elements-removed");
        }
        // Written, not fdatasynced: kill -9 cannot lose the line, and after a power cut the
        // start releases every lease whose sandbox is not READY anyway.
        st.leases.release(id)?;
        Ok(())
    }

    fn reconcile(&self, attached: &[PodNetwork], plan: Option<&Plan>) -> Result<()> {
        let Some(plan) = plan else { return Ok(()) };
        let mut guard = lock(&self.state);
        if !plan.active && !self.open_if_ours(&mut guard, plan)? {
            return Ok(());
        }
        let st = self.state(&mut guard, plan)?;
        let live: BTreeMap<&str, &PodNetwork> =
            attached.iter().map(|p| (p.id.as_str(), p)).collect();
        let mut route = Socket::open(Family::Route).map_err(os("netlink"))?;
        let mut pendings = Vec::new();
        for id in st.leases.ids() {
            match live.get(id.as_str()) {
                Some(pod) => {
                    let ips = st
                        .leases
                        .get(&id)
                        .map(<[IpAddr]>::to_vec)
                        .unwrap_or_default();
                    match plan::mappings(pod) {
                        Ok(m) => {
                            st.pods.insert(id.clone(), plan::elements(&m, &ips));
                        }
                        Err(e) => tracing::warn!(sandbox = %id, "recovery: hostPorts: {e}"),
                    }
                }
                None => {
                    tracing::info!(sandbox = %id, "recovery: releasing the pod network of a sandbox that is not attached");
                    link::delete(&mut route, &veth_name(&id)).map_err(os("delete veth"))?;
                    st.pods.remove(&id);
                    pendings.extend(st.leases.release(&id)?);
                }
            }
        }
        if plan.active || !st.pods.is_empty() {
            let mut filter = Socket::open(Family::Netfilter).map_err(os("netlink"))?;
            self.rebuild(&mut filter, st, &plan.nft_spec())?;
        }
        drop(guard);
        for p in pendings {
            p.sync()?;
        }
        Ok(())
    }
}
