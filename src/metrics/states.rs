//! Containers and pod sandboxes by state, counted from the runtime's tables at each scrape.

use std::collections::BTreeMap;
use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;

use crate::runtime::{ContainerState, Filter, Runtime, SandboxState};

/// The scrape-time collector over one runtime.
pub struct States {
    runtime: Arc<Runtime>,
}

impl States {
    /// Counts `runtime`'s objects.
    pub fn new(runtime: Arc<Runtime>) -> Self {
        States { runtime }
    }
}

impl std::fmt::Debug for States {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("States")
    }
}

fn container_state(s: ContainerState) -> &'static str {
    match s {
        ContainerState::Created => "created",
        ContainerState::Running => "running",
        ContainerState::Exited => "exited",
        ContainerState::Unknown => "unknown",
    }
}

fn sandbox_state(s: SandboxState) -> &'static str {
    match s {
        SandboxState::Created => "created",
        SandboxState::Ready => "ready",
        SandboxState::NotReady => "notready",
        SandboxState::Unknown => "unknown",
    }
}

/// One gauge family with a `state` label, every state present (0 when none).
fn encode_states(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    counts: BTreeMap<&'static str, i64>,
) -> Result<(), std::fmt::Error> {
    let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (state, n) in counts {
        let labels = [("state", state)];
        ConstGauge::new(n).encode(family.encode_family(&labels)?)?;
    }
    Ok(())
}

impl Collector for States {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut containers: BTreeMap<&'static str, i64> =
            ["created", "running", "exited", "unknown"]
                .map(|s| (s, 0))
                .into();
        for e in self.runtime.list_containers(&Filter::default()) {
            *containers
                .entry(container_state(e.status().state()))
                .or_default() += 1;
        }
        encode_states(
            &mut encoder,
            "containers",
            "Containers by state",
            containers,
        )?;
        let mut sandboxes: BTreeMap<&'static str, i64> =
            ["created", "ready", "notready", "unknown"]
                .map(|s| (s, 0))
                .into();
        for e in self.runtime.list_sandboxes(&Filter::default()) {
            *sandboxes
                .entry(sandbox_state(e.status().state()))
                .or_default() += 1;
        }
        encode_states(
            &mut encoder,
            "pod_sandboxes",
            "Pod sandboxes by state",
            sandboxes,
        )
    }
}
