//! Node-pressure eviction of supervised pods: the housekeeping loop (signals, thresholds, conditions), disk reclaim first, then the ranked pod.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::worker::Msg;
use super::{owned_by, Shared};
use crate::cgroups::hierarchy;
use crate::config::eviction::Threshold;
use crate::config::Config;
use crate::image::service::Images;
use crate::pod::labels;
use crate::pod::node::admission::Admitted;
use crate::pod::node::eviction::Observations;
use crate::pod::node::qos::QosCgroups;
use crate::pod::node::rank::{self, Candidate, ContainerUsage};
use crate::pod::node::requests::container_requests;
use crate::pod::node::thresholds::Resource;
use crate::pod::node::{self, capacity, signals, Node, EVICTED};
use crate::runtime::{ContainerState, Filter, SandboxState};

/// The node of this daemon: `[node]` (checked at load) on this machine, pod cgroups (made
/// with the first pod) and the host's signals.
pub fn open_node(config: &Config, images: &Arc<Images>) -> Node {
    let settings = node::settings(config);
    let cgroups = crate::cgroups::detect();
    let enforce = config.node.enforce_pods_allocatable;
    let limit = enforce.then(|| capacity::pods_cgroup_limit(&settings.allocation));
    let qos = config.node.cgroups_per_qos.then(|| {
        let h = hierarchy::open(
            config.cgroup_driver,
            cgroups.version(),
            Path::new("/sys/fs/cgroup"),
        );
        let root = config.node.cgroup_root.clone();
        QosCgroups::new(h, root, config.node.pod_pids_limit, limit)
    });
    let pods = qos.as_ref().zip(limit).map(|(q, l)| signals::PodsCgroup {
        dir: q.dir_of(&q.pods_name()),
        memory: l.memory,
        pids: (settings.allocation.reserved.pids > 0).then_some(l.pids),
    });
    let source = signals::Host {
        cgroups,
        pods,
        nodefs: config.root.clone(),
        imagefs: images.root().to_path_buf(),
        memory_capacity: settings.allocation.capacity.memory,
    };
    tracing::info!(
        capacity = ?settings.allocation.capacity,
        allocatable = ?settings.allocation.allocatable,
        thresholds = settings.thresholds.len(),
        "node resources"
    );
    Node::new(settings, qos, Box::new(source))
}

async fn observe(node: &Arc<Node>) -> Observations {
    let n = node.clone();
    tokio::task::spawn_blocking(move || n.observe())
        .await
        .unwrap_or_default()
}

/// Starts the housekeeping loop (none without thresholds).
pub fn spawn(sh: Arc<Shared>) {
    if sh.node.settings.thresholds.is_empty() {
        return;
    }
    tokio::spawn(async move {
        // A fixed period, not a sleep after each pass: a crossing is seen at most one interval
        // (plus one reading) after it happens, however long acting on the last one took.
        let mut tick = tokio::time::interval(sh.node.settings.housekeeping);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let obs = observe(&sh.node).await;
            let decision = sh.node.track(&obs);
            if let Some(t) = decision.act_on {
                if let Some(uid) = act(&sh, t, &obs).await {
                    // Like the kubelet: wait for the evicted pod to be gone, then look again.
                    sh.node.wait_released(&uid, node::CLEANUP_TIMEOUT).await;
                    tick.reset_immediately();
                }
            }
        }
    });
}

/// Acts on threshold `t`: disk reclaim first where it applies, else the first evictable pod
/// in rank order. Returns the pod evicted.
async fn act(sh: &Arc<Shared>, t: Threshold, obs: &Observations) -> Option<String> {
    let resource = t.signal.resource();
    // The moment pressure is acted on (hack/bench/eviction.sh measures the reaction to it).
    tracing::info!(
        signal = t.signal.as_str(),
        available = obs.get(&t.signal).map_or(-1.0, |o| o.available),
        "eviction threshold met: attempting to reclaim {}",
        resource.as_str()
    );
    sh.node.event(
        true,
        "EvictionThresholdMet",
        format!("Attempting to reclaim {}", resource.as_str()),
    );
    // Without supervised pods bosun is some kubelet's CRI runtime (or idle): that kubelet owns
    // image and container GC, so nothing is reclaimed or evicted behind its back.
    let active = sh.node.active();
    if active.is_empty() {
        tracing::warn!(
            signal = t.signal.as_str(),
            "eviction threshold met, no supervised pods: nothing reclaimed or evicted"
        );
        return None;
    }
    if t.signal.reclaims_disk() {
        reclaim_disk(sh).await;
        let after = observe(&sh.node).await;
        if sh.node.still_met(&after).is_empty() {
            tracing::info!(
                resource = resource.as_str(),
                "reclaimed without evicting pods"
            );
            return None;
        }
    }
    let mut candidates = Vec::new();
    for a in &active {
        candidates.push(candidate(sh, a, resource).await);
    }
    rank::rank(resource, &mut candidates);
    for c in candidates {
        let Some(a) = active.iter().find(|a| a.uid == c.uid) else {
            continue;
        };
        if a.critical {
            tracing::warn!(pod = %a.key, "eviction: a critical pod is never evicted");
            continue;
        }
        let grace = sh.node.eviction_grace(&t, pod_grace(sh, &c.uid));
        let message = rank::message(&t, obs.get(&t.signal), &c);
        tracing::info!(pod = %a.key, signal = t.signal.as_str(), message = %message, "evicting");
        sh.node.mark_leaving(&c.uid);
        sh.tell(
            &c.uid,
            Msg::Evict {
                reason: EVICTED.to_string(),
                message,
                grace: Some(grace),
                disruption: true,
            },
        );
        return Some(c.uid);
    }
    tracing::warn!(
        signal = t.signal.as_str(),
        "eviction: no pod could be evicted"
    );
    None
}

fn pod_of(sh: &Shared, uid: &str) -> Option<k8s_openapi::api::core::v1::Pod> {
    sh.worker_view(uid).map(|v| v.pod.clone())
}

fn pod_grace(sh: &Shared, uid: &str) -> Duration {
    pod_of(sh, uid)
        .and_then(|p| p.spec.and_then(|s| s.termination_grace_period_seconds))
        .map_or(crate::pod::grace::DEFAULT_GRACE, |s| {
            Duration::from_secs(s.max(0) as u64)
        })
}

/// A pod's usage of `resource` and its request, from its sandbox's stats.
async fn candidate(sh: &Arc<Shared>, a: &Admitted, resource: Resource) -> Candidate {
    let mut c = Candidate {
        uid: a.uid.clone(),
        priority: a.priority,
        usage: None,
        request: match resource {
            Resource::Memory => a.requests.memory,
            Resource::EphemeralStorage => a.requests.ephemeral_storage,
            _ => 0,
        },
        containers: Vec::new(),
    };
    let f: Filter<SandboxState> = Filter {
        labels: owned_by(Some(&a.uid)),
        ..Default::default()
    };
    let Some(sb) = sh
        .runtime
        .list_sandboxes(&f)
        .into_iter()
        .max_by_key(|e| e.meta().request.pod.attempt)
    else {
        return c;
    };
    let Ok(st) = sh.runtime.sandbox_stats(sb.id()).await else {
        return c;
    };
    let spec = pod_of(sh, &a.uid).and_then(|p| p.spec);
    let request_of = |name: &str| {
        let containers = spec.iter().flat_map(|s| {
            s.containers
                .iter()
                .chain(s.init_containers.iter().flatten())
        });
        containers
            .filter(|k| k.name == name)
            .map(|k| container_requests(k.resources.as_ref()))
            .next()
            .unwrap_or_default()
    };
    match resource {
        Resource::Memory => {
            c.usage = st
                .cgroup
                .memory
                .as_ref()
                .map(|m| m.working_set_bytes as i64);
            for cs in &st.containers {
                let name = super::state::container_name(&cs.entry);
                if let Some(m) = &cs.cgroup.memory {
                    let request = request_of(&name).memory;
                    c.containers.push(ContainerUsage {
                        name,
                        usage: m.working_set_bytes as i64,
                        request,
                    });
                }
            }
        }
        Resource::Pids => c.usage = st.cgroup.pids.map(|p| p as i64),
        Resource::EphemeralStorage | Resource::Inodes => {
            let inodes = resource == Resource::Inodes;
            let mut total = 0i64;
            for cs in &st.containers {
                let name = super::state::container_name(&cs.entry);
                let used = cs.writable_layer.as_ref().map_or(0, |w| {
                    if inodes {
                        w.inodes_used as i64
                    } else {
                        w.used_bytes as i64
                    }
                });
                total += used;
                let request = request_of(&name).ephemeral_storage;
                c.containers.push(ContainerUsage {
                    name,
                    usage: used,
                    request,
                });
            }
            // Logs and local volumes (emptyDir) count too.
            let dirs = [
                Path::new(&sb.meta().request.log_directory).to_path_buf(),
                sh.pods_dir.join(&a.uid),
            ];
            let extra = tokio::task::spawn_blocking(move || {
                dirs.iter()
                    .filter_map(|d| crate::runtime::stats::disk_usage(d))
                    .map(|u| if inodes { u.inodes } else { u.bytes } as i64)
                    .sum::<i64>()
            })
            .await
            .unwrap_or(0);
            c.usage = Some(total + extra);
        }
    }
    c
}

/// What the kubelet's image and container GC free before any pod is evicted for disk: dead
/// containers of supervised pods (all but the current instance of a pod still running) and
/// images no container uses.
async fn reclaim_disk(sh: &Arc<Shared>) {
    let current = sh.current_instances();
    let all = sh.runtime.list_containers(&Filter::default());
    let mut removed = 0;
    for c in &all {
        let supervised = c
            .meta()
            .request
            .labels
            .get(labels::SUPERVISED)
            .map(String::as_str)
            == Some(labels::SUPERVISED_VALUE);
        if !supervised || c.status().state() != ContainerState::Exited || current.contains(c.id()) {
            continue;
        }
        match sh.runtime.remove_container(c.id()).await {
            Ok(()) => removed += 1,
            Err(e) => {
                tracing::warn!(container = %c.id(), error = %e, "reclaim: remove dead container")
            }
        }
    }
    let used: HashSet<String> = sh
        .runtime
        .list_containers(&Filter::default())
        .iter()
        .map(|c| c.meta().image_id.clone())
        .collect();
    let mut images = 0;
    for img in sh.images.list() {
        let id = img.id.to_string();
        if used.contains(&id) {
            continue;
        }
        match sh.images.remove(&id).await {
            Ok(()) => images += 1,
            Err(e) => tracing::warn!(image = %id, error = %e, "reclaim: remove unused image"),
        }
    }
    // Removed containers' writable layers are deleted in the background: the space they
    // free counts only once they are gone (else reclaim looks insufficient and a pod is
    // evicted for nothing).
    if !sh
        .runtime
        .settle_removals(std::time::Duration::from_secs(10))
        .await
    {
        tracing::warn!("disk reclaim: removed containers' files still being deleted after 10 s");
    }
    sh.node.event(
        false,
        "FreeDiskSpace",
        format!("Removed {removed} dead containers and {images} unused images"),
    );
    tracing::info!(containers = removed, images, "disk reclaim");
}
