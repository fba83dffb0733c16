//! `bosun node describe`: the standalone node's capacity, allocatable, pressure conditions, admitted pods and events, kubectl style.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Subcommand;
use k8s_openapi::api::core::v1::Node;

use crate::cli::client::connect;
use crate::cli::pod::describe::event_age;
use crate::cli::pod::now_ns;
use crate::cli::pod::table::align;
use crate::proto::bosun::v1 as api;
use api::pods_client::PodsClient;

/// Node subcommands.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// Show capacity, allocatable, pressure conditions, the pods counted and node events.
    Describe,
}

/// Runs a node subcommand against the daemon at `socket`.
pub async fn run(socket: PathBuf, cmd: NodeCommand) -> anyhow::Result<()> {
    let mut c = PodsClient::new(connect(&socket).await?);
    match cmd {
        NodeCommand::Describe => {
            let v = c
                .describe_node(api::DescribeNodeRequest {})
                .await
                .map_err(|s| anyhow::anyhow!("{}", s.message()))?
                .into_inner();
            let text = describe(&v, now_ns())?;
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(())
        }
    }
}

fn cpu(milli: i64) -> String {
    if milli % 1000 == 0 {
        (milli / 1000).to_string()
    } else {
        format!("{milli}m")
    }
}

fn mem(b: i64) -> String {
    if b == 0 {
        "0".into()
    } else if b % (1 << 20) == 0 {
        format!("{}Mi", b >> 20)
    } else if b % 1024 == 0 {
        format!("{}Ki", b >> 10)
    } else {
        b.to_string()
    }
}

/// `part` as a whole percentage of `whole` (kubectl's `300m (60%)`).
fn pct(part: i64, whole: i64) -> i64 {
    if whole <= 0 {
        0
    } else {
        part * 100 / whole
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// The kubectl-style text of a node view.
pub fn describe(v: &api::NodeView, now: i64) -> anyhow::Result<String> {
    let node: Node = serde_json::from_str(&v.node_json).context("decode the node JSON")?;
    let status = node.status.unwrap_or_default();
    let mut out = format!(
        "Name:               {}\n",
        node.metadata.name.unwrap_or_default()
    );
    out.push_str("Conditions:\n");
    let mut rows = vec![vec![
        "Type".to_string(),
        "Status".into(),
        "LastTransitionTime".into(),
        "Reason".into(),
        "Message".into(),
    ]];
    for c in status.conditions.iter().flatten() {
        rows.push(vec![
            c.type_.clone(),
            c.status.clone(),
            c.last_transition_time
                .as_ref()
                .map_or(String::new(), |t| t.0.to_string()),
            c.reason.clone().unwrap_or_default(),
            c.message.clone().unwrap_or_default(),
        ]);
    }
    out.push_str(&indent(&align(&rows)));
    for (title, list) in [
        ("Capacity", &status.capacity),
        ("Allocatable", &status.allocatable),
    ] {
        out.push_str(&format!("{title}:\n"));
        for (k, q) in list.iter().flatten() {
            out.push_str(&format!("  {:<18}{}\n", format!("{k}:"), q.0));
        }
    }
    let alloc = status.allocatable.unwrap_or_default();
    let quantity = |k: &str| {
        alloc
            .get(k)
            .and_then(|q| crate::config::quantity::parse(&q.0))
            .unwrap_or(0.0)
    };
    let (cpu_alloc, mem_alloc) = ((quantity("cpu") * 1000.0) as i64, quantity("memory") as i64);
    out.push_str(&format!(
        "Non-terminated Pods:          ({} in total)\n",
        v.pods.len()
    ));
    let mut rows = vec![vec![
        "Namespace".to_string(),
        "Name".into(),
        "QoS".into(),
        "Priority".into(),
        "CPU Requests".into(),
        "CPU Limits".into(),
        "Memory Requests".into(),
        "Memory Limits".into(),
    ]];
    let mut sum = [0i64; 4];
    for p in &v.pods {
        let vals = [
            p.cpu_requests_milli,
            p.cpu_limits_milli,
            p.memory_requests,
            p.memory_limits,
        ];
        for (s, x) in sum.iter_mut().zip(vals) {
            *s += x;
        }
        rows.push(vec![
            p.namespace.clone(),
            p.name.clone(),
            p.qos_class.clone(),
            p.priority.to_string(),
            format!("{} ({}%)", cpu(vals[0]), pct(vals[0], cpu_alloc)),
            format!("{} ({}%)", cpu(vals[1]), pct(vals[1], cpu_alloc)),
            format!("{} ({}%)", mem(vals[2]), pct(vals[2], mem_alloc)),
            format!("{} ({}%)", mem(vals[3]), pct(vals[3], mem_alloc)),
        ]);
    }
    out.push_str(&indent(&align(&rows)));
    out.push_str("Allocated resources:\n");
    let rows = vec![
        vec!["Resource".to_string(), "Requests".into(), "Limits".into()],
        vec![
            "cpu".into(),
            format!("{} ({}%)", cpu(sum[0]), pct(sum[0], cpu_alloc)),
            format!("{} ({}%)", cpu(sum[1]), pct(sum[1], cpu_alloc)),
        ],
        vec![
            "memory".into(),
            format!("{} ({}%)", mem(sum[2]), pct(sum[2], mem_alloc)),
            format!("{} ({}%)", mem(sum[3]), pct(sum[3], mem_alloc)),
        ],
    ];
    out.push_str(&indent(&align(&rows)));
    if v.events.is_empty() {
        out.push_str("Events:              <none>\n");
        return Ok(out);
    }
    out.push_str("Events:\n");
    let mut rows = vec![vec![
        "Type".to_string(),
        "Reason".into(),
        "Age".into(),
        "Message".into(),
    ]];
    for e in &v.events {
        rows.push(vec![
            e.r#type.clone(),
            e.reason.clone(),
            event_age(e, now),
            e.message.clone(),
        ]);
    }
    out.push_str(&indent(&align(&rows)));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describe_shows_allocatable_conditions_pods_and_events() {
        let node = serde_json::json!({
            "metadata": {"name": "n1"},
            "status": {
                "capacity": {"cpu": "2", "memory": "2097152Ki", "pods": "110"},
                "allocatable": {"cpu": "500m", "memory": "524288Ki", "pods": "2"},
                "conditions": [{"type": "MemoryPressure", "status": "True",
                    "reason": "KubeletHasInsufficientMemory",
                    "message": "kubelet has insufficient memory available"}]
            }
        });
        let v = api::NodeView {
            node_json: node.to_string(),
            events: vec![api::PodEvent {
                r#type: "Warning".into(),
                reason: "EvictionThresholdMet".into(),
                object: String::new(),
                message: "Attempting to reclaim memory".into(),
                count: 2,
                first_timestamp_ns: 0,
                last_timestamp_ns: 60_000_000_000,
            }],
            pods: vec![api::NodePod {
                namespace: "default".into(),
                name: "web".into(),
                qos_class: "Burstable".into(),
                priority: 0,
                cpu_requests_milli: 300,
                cpu_limits_milli: 0,
                memory_requests: 64 << 20,
                memory_limits: 128 << 20,
            }],
        };
        let text = describe(&v, 120_000_000_000).expect("describe");
        for want in [
            "Name:               n1",
            "MemoryPressure   True",
            "KubeletHasInsufficientMemory",
            "cpu:              500m",
            "Non-terminated Pods:          (1 in total)",
            "300m (60%)",
            "64Mi (12%)",
            "128Mi (25%)",
            "EvictionThresholdMet   60s (x2 over 2m)   Attempting to reclaim memory",
        ] {
            assert!(text.contains(want), "{want:?} missing in:\n{text}");
        }
    }
}
