//! A [`Network`] for unit tests: hands out addresses from 10.99.0.0/16, records every call and
//! fails on demand.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Mutex, PoisonError};

use super::{Attachment, Network, NetworkStatus, PodNetwork, REASON_NOT_READY};
use crate::error::{Error, Result};

/// One call the fake saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// attach(id).
    Attach(String),
    /// detach(id) (counted whether or not it was attached).
    Detach(String),
    /// check(id).
    Check(String),
    /// defer_detach(id).
    Defer(String),
}

#[derive(Default)]
struct State {
    calls: Vec<Call>,
    attached: BTreeMap<String, IpAddr>,
    next: u8,
    fail_attach: Option<String>,
    fail_detach: Option<String>,
    deferred: BTreeMap<String, PodNetwork>,
    not_ready: Option<String>,
    pod_cidr: String,
}

/// The fake network.
#[derive(Default)]
pub struct FakeNetwork {
    state: Mutex<State>,
}

impl FakeNetwork {
    fn st(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.st().calls.clone()
    }
    /// Sandboxes attached now, with their address.
    pub fn attached(&self) -> BTreeMap<String, IpAddr> {
        self.st().attached.clone()
    }
    /// Makes the next attaches fail with `msg` (after allocating, as a failing chain would).
    pub fn fail_attach(&self, msg: &str) {
        self.st().fail_attach = Some(msg.to_string());
    }
    /// Makes detaches fail with `msg` (`None`: succeed again).
    pub fn fail_detach(&self, msg: Option<&str>) {
        self.st().fail_detach = msg.map(str::to_string);
    }
    /// Reports not ready with `msg`.
    pub fn set_not_ready(&self, msg: &str) {
        self.st().not_ready = Some(msg.to_string());
    }
    /// The pod CIDR last set.
    pub fn pod_cidr(&self) -> String {
        self.st().pod_cidr.clone()
    }
}

#[tonic::async_trait]
impl Network for FakeNetwork {
    fn status(&self) -> NetworkStatus {
        match &self.st().not_ready {
            Some(m) => NetworkStatus {
                ready: false,
                name: String::new(),
                reason: REASON_NOT_READY.into(),
                message: m.clone(),
            },
            None => NetworkStatus {
                ready: true,
                name: "fake".into(),
                ..Default::default()
            },
        }
    }

    async fn attach(&self, pod: &PodNetwork) -> Result<Attachment> {
        let mut st = self.st();
        st.calls.push(Call::Attach(pod.id.clone()));
        if let Some(m) = &st.not_ready {
            return Err(Error::precondition(format!("pod network not ready: {m}")));
        }
        st.next = st.next.wrapping_add(1);
        let ip = IpAddr::V4(Ipv4Addr::new(10, 99, 0, st.next));
        st.attached.insert(pod.id.clone(), ip);
        if let Some(m) = st.fail_attach.clone() {
            return Err(Error::internal(m));
        }
        Ok(Attachment {
            network: "fake".into(),
            ips: vec![ip],
        })
    }

    async fn detach(&self, pod: &PodNetwork) -> Result<()> {
        let mut st = self.st();
        st.calls.push(Call::Detach(pod.id.clone()));
        if st.deferred.contains_key(&pod.id) {
            return Ok(());
        }
        if let Some(m) = &st.fail_detach {
            return Err(Error::internal(m.clone()));
        }
        st.attached.remove(&pod.id);
        Ok(())
    }

    async fn defer_detach(&self, pod: &PodNetwork) -> Result<PodNetwork> {
        let mut st = self.st();
        st.calls.push(Call::Defer(pod.id.clone()));
        st.deferred.insert(pod.id.clone(), pod.clone());
        Ok(pod.clone())
    }

    fn deferred(&self) -> Vec<PodNetwork> {
        self.st().deferred.values().cloned().collect()
    }

    async fn retry_detach(&self, pod: &PodNetwork) -> Result<()> {
        let mut st = self.st();
        st.calls.push(Call::Detach(pod.id.clone()));
        if let Some(m) = &st.fail_detach {
            return Err(Error::internal(m.clone()));
        }
        st.attached.remove(&pod.id);
        st.deferred.remove(&pod.id);
        Ok(())
    }

    async fn check(&self, pod: &PodNetwork) -> Result<()> {
        let mut st = self.st();
        st.calls.push(Call::Check(pod.id.clone()));
        if st.attached.contains_key(&pod.id) {
            Ok(())
        } else {
            Err(Error::not_found(format!(
                "sandbox {}: not attached",
                pod.id
            )))
        }
    }

    fn set_pod_cidr(&self, cidr: &str) -> Result<()> {
        if !cidr.trim().is_empty() {
            crate::config::cidr::parse_list(cidr)?;
        }
        self.st().pod_cidr = cidr.to_string();
        Ok(())
    }
}
