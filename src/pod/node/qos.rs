//! The pod cgroup hierarchy of supervised pods: `kubepods` (limited to allocatable), `burstable` and `besteffort` below it, one cgroup per pod.

use k8s_openapi::api::core::v1::Pod;

use super::capacity::Amounts;
use super::requests::{pod_cgroup, PodCgroup};
use crate::cgroups::hierarchy::{Hierarchy, Limits, Name};
use crate::error::{Error, Result};
use crate::pod::resources::{self, QosClass, CPU_PERIOD};

/// The QoS hierarchy below the configured cgroup root.
#[derive(Debug)]
pub struct QosCgroups {
    hierarchy: Box<dyn Hierarchy>,
    /// The root's components (`[]` for `/`).
    root: Name,
    pids_limit: i64,
    /// What `kubepods` is limited to (allocatable enforcement); `None`: unlimited.
    limit: Option<Amounts>,
    /// `kubepods` and the QoS cgroups exist (made with the first pod: a daemon that only
    /// serves a kubelet over CRI makes none).
    made: std::sync::Mutex<bool>,
}

fn qos_part(q: QosClass) -> Option<&'static str> {
    match q {
        QosClass::Guaranteed => None,
        QosClass::Burstable => Some("burstable"),
        QosClass::BestEffort => Some("besteffort"),
    }
}

impl QosCgroups {
    /// The hierarchy below `root`; nothing is made yet.
    pub fn new(
        hierarchy: Box<dyn Hierarchy>,
        root: Name,
        pids_limit: i64,
        limit: Option<Amounts>,
    ) -> QosCgroups {
        QosCgroups {
            hierarchy,
            root,
            pids_limit,
            limit,
            made: std::sync::Mutex::new(false),
        }
    }

    /// What `kubepods` may use (when allocatable is enforced).
    pub fn limit(&self) -> Option<&Amounts> {
        self.limit.as_ref()
    }

    /// `kubepods` (or `kubepods/<qos>`).
    fn name(&self, qos: Option<&str>) -> Name {
        let mut n = self.root.clone();
        n.push("kubepods".into());
        n.extend(qos.map(str::to_string));
        n
    }

    /// The pod's cgroup: `kubepods[/<qos>]/pod<uid>`.
    pub fn pod_name(&self, uid: &str, qos: QosClass) -> Name {
        let mut n = self.name(qos_part(qos));
        n.push(format!("pod{uid}"));
        n
    }

    /// Makes `kubepods` with `limit` (shares of its cpu, its memory when enforced, pids) and
    /// the two QoS cgroups below it.
    fn init(&self, burstable_cpu_milli: i64) -> Result<()> {
        let limit = self.limit.as_ref();
        let top = Limits {
            cpu_shares: limit.map(|l| resources::cpu_shares(Some(l.cpu_milli as f64 / 1000.0))),
            cpu_quota: None,
            cpu_period: CPU_PERIOD,
            memory: limit.map(|l| l.memory).filter(|m| *m > 0),
            pids: limit.map(|l| l.pids).filter(|p| *p > 0),
        };
        let name = self.name(None);
        self.hierarchy
            .ensure(&name, &top)
            .map_err(|e| Error::internal(format!("pod cgroup {}: {e}", name.join("/"))))?;
        self.set_burstable_now(burstable_cpu_milli)?;
        let be = Limits {
            cpu_shares: Some(2),
            cpu_period: CPU_PERIOD,
            ..Limits::default()
        };
        let name = self.name(Some("besteffort"));
        self.hierarchy
            .ensure(&name, &be)
            .map_err(|e| Error::internal(format!("pod cgroup {}: {e}", name.join("/"))))
    }

    /// The burstable cgroup's shares follow the sum of its pods' cpu requests.
    pub fn set_burstable(&self, cpu_milli: i64) -> Result<()> {
        if !*self.made.lock().unwrap_or_else(|p| p.into_inner()) {
            return Ok(());
        }
        self.set_burstable_now(cpu_milli)
    }

    fn set_burstable_now(&self, cpu_milli: i64) -> Result<()> {
        let l = Limits {
            cpu_shares: Some(resources::cpu_shares(Some(cpu_milli as f64 / 1000.0))),
            cpu_period: CPU_PERIOD,
            ..Limits::default()
        };
        let name = self.name(Some("burstable"));
        self.hierarchy
            .ensure(&name, &l)
            .map_err(|e| Error::internal(format!("pod cgroup {}: {e}", name.join("/"))))
    }

    /// Makes the pod's cgroup with its limits; returns the CRI `cgroup_parent` for it.
    pub fn ensure_pod(&self, uid: &str, pod: &Pod) -> Result<(String, PodCgroup)> {
        {
            let mut made = self.made.lock().unwrap_or_else(|p| p.into_inner());
            if !*made {
                self.init(0)?;
                *made = true;
            }
        }
        let c = pod_cgroup(pod, self.pids_limit);
        let name = self.pod_name(uid, c.qos);
        let l = Limits {
            cpu_shares: Some(c.cpu_shares),
            cpu_quota: c.cpu_quota,
            cpu_period: CPU_PERIOD,
            memory: c.memory_limit,
            pids: c.pids_limit,
        };
        self.hierarchy
            .ensure(&name, &l)
            .map_err(|e| Error::internal(format!("pod cgroup {}: {e}", name.join("/"))))?;
        Ok((self.hierarchy.parent(&name), c))
    }

    /// Removes the pod's cgroup, killing whatever is left in it first (the kubelet does the
    /// same for the cgroups of terminated pods).
    pub fn remove_pod(&self, uid: &str, qos: QosClass) -> Result<()> {
        let name = self.pod_name(uid, qos);
        for pid in self.hierarchy.procs(&name) {
            if let Some(p) = rustix::process::Pid::from_raw(pid) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::KILL);
            }
        }
        let mut last = Ok(());
        for _ in 0..20 {
            last = self.hierarchy.remove(&name);
            if last.is_ok() {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        last.map_err(|e| Error::internal(format!("pod cgroup {}: {e}", name.join("/"))))
    }

    /// The directory of `kubepods` (allocatable memory), of a pod's cgroup, for the stats readers.
    pub fn dir_of(&self, name: &Name) -> String {
        self.hierarchy.dir(name)
    }

    /// `kubepods`'s name.
    pub fn pods_name(&self) -> Name {
        self.name(None)
    }
}
