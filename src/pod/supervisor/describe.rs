//! The node as `bosun node describe` shows it: a Kubernetes Node (capacity, allocatable, conditions) with the admitted pods' requests and limits and the node events.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, NodeStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::status::time;
use super::Shared;
use crate::pod::api::{EventType, NodePod, NodeView, PodEvent};
use crate::pod::node::capacity::Amounts;
use crate::pod::node::condition_reason;
use crate::pod::node::requests::pod_limits;

/// A millicore amount as Kubernetes writes it: `2`, `500m`.
fn cpu(milli: i64) -> Quantity {
    Quantity(if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    })
}

/// Bytes as the kubelet reports them: `16331404Ki` (plain bytes when not whole KiB).
fn bytes(b: i64) -> Quantity {
    Quantity(if b % 1024 == 0 {
        format!("{}Ki", b / 1024)
    } else {
        b.to_string()
    })
}

fn resources(a: &Amounts) -> BTreeMap<String, Quantity> {
    BTreeMap::from([
        ("cpu".to_string(), cpu(a.cpu_milli)),
        ("memory".to_string(), bytes(a.memory)),
        ("ephemeral-storage".to_string(), bytes(a.ephemeral_storage)),
        ("pods".to_string(), Quantity(a.pods.to_string())),
    ])
}

/// Node events with identical type, reason and message folded into one with a count, as the
/// kubelet's recorder does.
fn events(sh: &Shared) -> Vec<PodEvent> {
    let mut out: Vec<PodEvent> = Vec::new();
    for e in sh.node.events() {
        let kind = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        if let Some(same) = out
            .iter_mut()
            .find(|o| o.kind == kind && o.reason == e.reason && o.message == e.message)
        {
            same.count += 1;
            same.last_ns = e.at_ns;
            continue;
        }
        out.push(PodEvent {
            kind,
            reason: e.reason,
            object: String::new(),
            message: e.message,
            count: 1,
            first_ns: e.at_ns,
            last_ns: e.at_ns,
        });
    }
    out.sort_by_key(|e| e.last_ns);
    out
}

/// The node now.
pub fn node_view(sh: &Shared) -> NodeView {
    let alloc = &sh.node.settings.allocation;
    let now = crate::runtime::status::now_ns();
    let states = sh.node.conditions();
    let up_since = states.values().map(|s| s.since_ns).min().unwrap_or(now);
    let mut conditions: Vec<NodeCondition> = states
        .iter()
        .map(|(c, s)| {
            let (event_reason, message) = condition_reason(*c, s.status);
            NodeCondition {
                type_: c.as_str().to_string(),
                status: if s.status { "True" } else { "False" }.to_string(),
                // The condition's reason is the event's with Kubelet for Node
                // (NodeHasSufficientMemory → KubeletHasSufficientMemory).
                reason: Some(event_reason.replacen("Node", "Kubelet", 1)),
                message: Some(message.to_string()),
                last_heartbeat_time: time(now),
                last_transition_time: time(s.since_ns),
            }
        })
        .collect();
    conditions.push(NodeCondition {
        type_: "Ready".to_string(),
        status: "True".to_string(),
        reason: Some("KubeletReady".to_string()),
        message: Some("kubelet is posting ready status".to_string()),
        last_heartbeat_time: time(now),
        last_transition_time: time(up_since),
    });
    let node = Node {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(sh.node_name.clone()),
            ..Default::default()
        },
        status: Some(NodeStatus {
            capacity: Some(resources(&alloc.capacity)),
            allocatable: Some(resources(&alloc.allocatable)),
            conditions: Some(conditions),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut pods: Vec<NodePod> = sh
        .node
        .admitted()
        .into_iter()
        .map(|a| {
            let limits = sh
                .worker_view(&a.uid)
                .map(|v| pod_limits(&v.pod))
                .unwrap_or_default();
            let (namespace, name) = a.key.split_once('/').unwrap_or(("", &a.key));
            NodePod {
                namespace: namespace.to_string(),
                name: name.to_string(),
                qos_class: a.qos.as_str().to_string(),
                priority: a.priority,
                cpu_requests_milli: a.requests.cpu_milli,
                cpu_limits_milli: limits.cpu_milli,
                memory_requests: a.requests.memory,
                memory_limits: limits.memory,
            }
        })
        .collect();
    pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    NodeView {
        node,
        events: events(sh),
        pods,
    }
}
