//! The pod's Kubernetes status (phase, conditions, container statuses) and its PodView.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
    ContainerStatus, ContainerUser, LinuxContainerUser, PodCondition, PodIP, PodStatus,
    VolumeMountStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::record::Transition;
use super::state::{CState, Inst, PostStart};
use super::worker::Worker;
use crate::pod::api::{LogRef, PodView, ProbeReport};
use crate::pod::conditions::{self, PodFacts};
use crate::pod::phase::{self, Phase};
use crate::pod::probe_result::ProbeKind;
use crate::pod::resources;
use crate::pod::translate::ContainerKind;
use crate::pod::volumes;
use crate::runtime::ContainerState as RtState;

/// A Kubernetes time from unix nanoseconds (`None` for 0 or out of range).
pub fn time(ns: i64) -> Option<Time> {
    if ns <= 0 {
        return None;
    }
    k8s_openapi::jiff::Timestamp::from_nanosecond(i128::from(ns))
        .ok()
        .map(Time)
}

impl Worker {
    /// Whether container `c` will be restarted after its current exit.
    fn will_restart(&self, c: &CState) -> bool {
        if self.termination.as_ref().is_some_and(|t| t.delete) || self.rec.finished {
            return false;
        }
        let code = c.current.as_ref().and_then(Inst::exited);
        match (c.kind, code) {
            (_, None) => false,
            (ContainerKind::Sidecar, Some(_)) => !self.apps_done(),
            (ContainerKind::Init, Some(0)) => false,
            (ContainerKind::Init, Some(_)) => self.policy() != phase::RestartPolicy::Never,
            (ContainerKind::App, Some(code)) => self.policy().restarts(code),
        }
    }

    fn phase_containers(&self) -> Vec<phase::Container> {
        self.cs
            .iter()
            .map(|c| phase::Container {
                name: c.name().to_string(),
                kind: c.phase_kind(),
                state: c.phase_state(self.will_restart(c)),
            })
            .collect()
    }

    /// The pod phase now.
    pub fn phase(&self) -> Phase {
        if self.rec.failure.is_some() {
            // Refused, evicted or preempted: Failed whatever its containers did.
            return Phase::Failed;
        }
        let deleting = self.termination.as_ref().is_some_and(|t| t.delete);
        phase::phase(
            self.policy(),
            &self.phase_containers(),
            deleting || self.rec.finished,
        )
    }

    /// Builds the view: the pod with its status, events, probe results, log files.
    /// The last result of every probe, by container and kind: what the probers reported
    /// (changes and failures) with the later unchanged successes of live probes folded in.
    fn probe_reports(&self) -> Vec<ProbeReport> {
        let mut reports = self.probe_reports.clone();
        for c in &self.cs {
            let Some((_, Some(probes))) = &c.probes else {
                continue;
            };
            for kind in ProbeKind::ALL {
                let Some(slot) = probes.last(kind).filter(|s| s.ok && s.at_ns > 0) else {
                    continue;
                };
                let key = (c.name().to_string(), kind.as_str().to_string());
                if reports.get(&key).is_some_and(|r| r.at_ns >= slot.at_ns) {
                    continue;
                }
                let report =
                    ProbeReport::new(c.name(), kind, slot.result, String::new(), slot.at_ns);
                reports.insert(key, report);
            }
        }
        // Keyed by (container, probe): already in that order.
        reports.into_values().collect()
    }

    /// Saves the conditions' transition times when one changed, so a daemon restart keeps
    /// them; not once a delete began (the record is about to go).
    fn keep_transitions(&mut self) {
        if self.gone || self.rec.deletion.is_some() {
            return;
        }
        let at = |t: &conditions::Tracked| Transition {
            status: t.condition.status,
            at_s: t.last_transition,
        };
        // Compared in place: this runs at every view build, a change is rare.
        let unchanged = self.conditions.len() == self.rec.conditions.len()
            && self
                .conditions
                .iter()
                .all(|t| self.rec.conditions.get(t.condition.kind.as_str()) == Some(&at(t)));
        if unchanged {
            return;
        }
        self.rec.conditions = self
            .conditions
            .iter()
            .map(|t| (t.condition.kind.as_str().to_string(), at(t)))
            .collect();
        if let Err(e) = self.rec.save(&self.sh.pods_dir) {
            tracing::warn!(pod = %self.key(), error = %e, "record condition transitions");
        }
    }

    pub fn build_view(&mut self) -> PodView {
        let phase = self.phase();
        let containers = self.phase_containers();
        let gates: Vec<(String, Option<bool>)> = self
            .rec
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.readiness_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| {
                let st = self
                    .rec
                    .gates
                    .get(&g.condition_type)
                    .map(|c| c.status == "True");
                (g.condition_type.clone(), st)
            })
            .collect();
        let facts = PodFacts {
            sandbox_ready: self.sandbox.as_ref().is_some_and(|s| s.ready),
            phase,
        };
        let now_s = crate::runtime::status::now_ns() / 1_000_000_000;
        let computed = conditions::conditions(facts, &containers, &gates);
        self.conditions = conditions::track(&self.conditions, computed, now_s);
        self.keep_transitions();
        let mut conds: Vec<PodCondition> = self
            .conditions
            .iter()
            .map(|t| PodCondition {
                type_: t.condition.kind.as_str().to_string(),
                status: if t.condition.status { "True" } else { "False" }.to_string(),
                reason: (!t.condition.reason.is_empty()).then(|| t.condition.reason.clone()),
                message: (!t.condition.message.is_empty()).then(|| t.condition.message.clone()),
                last_transition_time: time(t.last_transition * 1_000_000_000),
                ..Default::default()
            })
            .collect();
        for (name, g) in &self.rec.gates {
            conds.push(PodCondition {
                type_: name.clone(),
                status: g.status.clone(),
                reason: (!g.reason.is_empty()).then(|| g.reason.clone()),
                message: (!g.message.is_empty()).then(|| g.message.clone()),
                last_transition_time: time(g.last_transition_ns),
                ..Default::default()
            });
        }
        if let Some(f) = self.rec.failure.as_ref().filter(|f| f.disruption) {
            conds.push(PodCondition {
                type_: "DisruptionTarget".to_string(),
                status: "True".to_string(),
                reason: Some("TerminationByKubelet".to_string()),
                message: Some(f.message.clone()),
                last_transition_time: time(f.at_ns),
                ..Default::default()
            });
        }
        let host_network = self.rec.host_network();
        // A host-network pod's IP is the node's, as the kubelet reports it, once it has a sandbox.
        let ip = match &self.sandbox {
            Some(_) if host_network => Some(self.sh.host_ip.clone()),
            Some(s) => s.ip.clone(),
            None => None,
        };
        let statuses: Vec<(ContainerKind, ContainerStatus)> = self
            .cs
            .iter()
            .map(|c| (c.kind, self.container_status(c)))
            .collect();
        let init_statuses: Vec<_> = statuses
            .iter()
            .filter(|(k, _)| *k != ContainerKind::App)
            .map(|(_, s)| s.clone())
            .collect();
        let app_statuses: Vec<_> = statuses
            .into_iter()
            .filter(|(k, _)| *k == ContainerKind::App)
            .map(|(_, s)| s)
            .collect();
        let status = PodStatus {
            phase: Some(phase.as_str().to_string()),
            conditions: Some(conds),
            host_ip: Some(self.sh.host_ip.clone()),
            pod_ip: ip.clone(),
            pod_ips: ip.map(|ip| vec![PodIP { ip }]),
            start_time: time(self.rec.created_ns),
            qos_class: Some(resources::qos_class(&self.rec.pod).as_str().to_string()),
            reason: self.rec.failure.as_ref().map(|f| f.reason.clone()),
            message: self.rec.failure.as_ref().map(|f| f.message.clone()),
            init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
            container_statuses: Some(app_statuses),
            ..Default::default()
        };
        let mut pod = self.rec.pod.clone();
        pod.status = Some(status);
        let probes = self.probe_reports();
        PodView {
            pod,
            events: self.events.list(),
            probes,
            source: self.rec.source.clone(),
            sandbox_id: self
                .sandbox
                .as_ref()
                .map(|s| s.id.clone())
                .unwrap_or_default(),
            user_namespace: self
                .sandbox
                .as_ref()
                .and_then(|s| s.userns.as_ref())
                .map(|ns| {
                    crate::oci::userns::map_text(&ns.uids)
                        .trim_end()
                        .replace('\n', ", ")
                })
                .unwrap_or_default(),
            logs: self
                .cs
                .iter()
                .map(|c| LogRef {
                    container: c.name().to_string(),
                    current: c.current.as_ref().map(|i| i.log_path.clone()),
                    previous: c.previous.as_ref().map(|i| i.log_path.clone()),
                    container_id: c.current.as_ref().map(|i| i.id.clone()),
                })
                .collect(),
        }
    }

    fn terminated(&self, c: &CState, i: &Inst) -> ContainerStateTerminated {
        let term_path = volumes::termination_message_path(
            &self.rec.dir(&self.sh.pods_dir),
            c.name(),
            i.attempt,
        );
        // Read here, at the pod layer, as the kubelet does (the runtime reports only its own
        // reasons in the status message).
        let message = volumes::with_runtime_message(
            &i.status.message,
            volumes::termination_message(
                &term_path,
                c.spec.termination_message_policy.as_deref(),
                std::path::Path::new(&i.log_path),
                i.status.exit_code,
            ),
        );
        let reason = if i.status.reason.is_empty() {
            crate::runtime::status::reason_for(i.status.exit_code, false).to_string()
        } else {
            i.status.reason.clone()
        };
        ContainerStateTerminated {
            exit_code: i.status.exit_code,
            reason: Some(reason),
            message: (!message.is_empty()).then_some(message),
            started_at: time(i.status.started_ns),
            finished_at: time(i.status.finished_ns),
            container_id: Some(format!("bosun://{}", i.id)),
            ..Default::default()
        }
    }

    fn container_status(&self, c: &CState) -> ContainerStatus {
        let waiting = |reason: &str, message: Option<String>| ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some(reason.to_string()),
                message,
            }),
            ..Default::default()
        };
        let last_term = |i: &Inst| ContainerState {
            terminated: Some(self.terminated(c, i)),
            ..Default::default()
        };
        let previous = c.previous.as_ref().filter(|p| p.exited().is_some());
        let (state, last) = match &c.current {
            None => {
                let (reason, msg) = match &c.waiting {
                    Some((r, m)) => (r.as_str(), Some(m.clone())),
                    None if c.kind == ContainerKind::App && !self.initialized => {
                        ("PodInitializing", None)
                    }
                    None => ("ContainerCreating", None),
                };
                (waiting(reason, msg), None)
            }
            Some(i) => match i.state() {
                RtState::Running if c.post_start == PostStart::Done => (
                    ContainerState {
                        running: Some(ContainerStateRunning {
                            started_at: time(i.status.started_ns),
                        }),
                        ..Default::default()
                    },
                    previous.map(last_term),
                ),
                RtState::Running | RtState::Created => {
                    (waiting("ContainerCreating", None), previous.map(last_term))
                }
                RtState::Exited if self.will_restart(c) => {
                    let (r, m) = c
                        .waiting
                        .clone()
                        .unwrap_or_else(|| ("CrashLoopBackOff".into(), String::new()));
                    (
                        waiting(&r, (!m.is_empty()).then_some(m)),
                        Some(last_term(i)),
                    )
                }
                RtState::Exited => (last_term(i), previous.map(last_term)),
                RtState::Unknown => (waiting("ContainerStatusUnknown", None), None),
            },
        };
        ContainerStatus {
            name: c.name().to_string(),
            image: c.spec.image.clone().unwrap_or_default(),
            image_id: c
                .current
                .as_ref()
                .map(|i| i.image_id.clone())
                .unwrap_or_default(),
            container_id: c.current.as_ref().map(|i| format!("bosun://{}", i.id)),
            ready: c.ready && c.current.as_ref().is_some_and(Inst::running),
            started: Some(c.is_started()),
            restart_count: c.restart_count() as i32,
            state: Some(state),
            last_state: last,
            user: c
                .current
                .as_ref()
                .and_then(|i| i.status.user.as_ref())
                .map(|u| ContainerUser {
                    linux: Some(LinuxContainerUser {
                        uid: i64::from(u.uid),
                        gid: i64::from(u.gid),
                        supplemental_groups: Some(u.groups.iter().map(|g| i64::from(*g)).collect()),
                    }),
                }),
            volume_mounts: c.current.as_ref().map(|i| volume_mounts(&c.spec, i)),
            ..Default::default()
        }
    }
}

/// The kubelet's `volumeMounts` status: each volumeMount as created, `recursiveReadOnly`
/// resolved to Enabled or Disabled.
fn volume_mounts(spec: &k8s_openapi::api::core::v1::Container, i: &Inst) -> Vec<VolumeMountStatus> {
    spec.volume_mounts
        .iter()
        .flatten()
        .filter_map(|vm| {
            let m = i
                .mounts
                .iter()
                .find(|m| m.container_path == vm.mount_path)?;
            Some(VolumeMountStatus {
                name: vm.name.clone(),
                mount_path: vm.mount_path.clone(),
                read_only: Some(m.readonly),
                recursive_read_only: vm.recursive_read_only.as_ref().map(|_| {
                    if m.recursive_read_only {
                        "Enabled"
                    } else {
                        "Disabled"
                    }
                    .to_string()
                }),
            })
        })
        .collect()
}
