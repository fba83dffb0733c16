//! Prometheus metrics of the daemon: CRI call counts and latency, pod sandbox run time, objects by state, pulled bytes.
//!
//! Counters live in [`Metrics`] (one per daemon) except the image puller's process-wide
//! [`crate::image::pull::PULLED_BYTES`]. [`layer::MetricsLayer`] counts every gRPC call on the
//! server; [`server::serve`] answers `GET /metrics` in the OpenMetrics text format.

pub mod layer;
pub mod server;
mod states;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use crate::runtime::Runtime;

/// The labels of one gRPC call.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct Call {
    /// The gRPC service (`runtime.v1.RuntimeService`).
    pub service: String,
    /// The RPC (`ListContainers`).
    pub method: String,
    /// The gRPC status code name, as grpc-go spells it (`OK`, `NotFound`).
    pub code: String,
}

type Latency = Family<Call, Histogram, fn() -> Histogram>;

/// Call latency buckets: 0.5 ms to ~16 s, doubling.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.0005, 2.0, 16))
}

/// The daemon's metrics and the registry that serves them.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    calls: Family<Call, Counter>,
    latency: Latency,
    sandbox_run: Histogram,
    /// Calls finished since start, of every service (the daemon's idle detection).
    served: AtomicU64,
}

impl Metrics {
    /// Metrics for a daemon; `runtime` (if any) is asked for its objects by state at scrape.
    pub fn new(runtime: Option<Arc<Runtime>>) -> Arc<Metrics> {
        let mut registry = Registry::with_prefix("bosun");
        let calls = Family::<Call, Counter>::default();
        let latency: Latency = Family::new_with_constructor(latency_histogram);
        let sandbox_run = Histogram::new(exponential_buckets(0.01, 2.0, 12));
        registry.register(
            "cri_requests",
            "gRPC calls served, by service, method and status code",
            calls.clone(),
        );
        registry.register(
            "cri_request_duration_seconds",
            "Time from a gRPC call's arrival to the end of its response, by service, method and status code",
            latency.clone(),
        );
        registry.register(
            "pod_sandbox_run_duration_seconds",
            "Duration of successful RunPodSandbox calls (sandbox set-up only, not container starts)",
            sandbox_run.clone(),
        );
        registry.register(
            "image_pull_bytes",
            "Bytes of image layers received by pulls",
            crate::image::pull::PULLED_BYTES.clone(),
        );
        if let Some(rt) = runtime {
            registry.register_collector(Box::new(states::States::new(rt)));
        }
        Arc::new(Metrics {
            registry,
            calls,
            latency,
            sandbox_run,
            served: AtomicU64::new(0),
        })
    }

    /// Records one finished call.
    pub fn record(&self, call: Call, took: Duration) {
        if call.method == "RunPodSandbox" && call.code == "OK" {
            self.sandbox_run.observe(took.as_secs_f64());
        }
        self.latency
            .get_or_create(&call)
            .observe(took.as_secs_f64());
        self.calls.get_or_create(&call).inc();
        self.served.fetch_add(1, Ordering::Relaxed);
    }

    /// How many calls have finished since start.
    pub fn served(&self) -> u64 {
        self.served.load(Ordering::Relaxed)
    }

    /// Everything in the OpenMetrics text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if let Err(e) = prometheus_client::encoding::text::encode(&mut out, &self.registry) {
            tracing::warn!("metrics: encode: {e}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, code: &str) -> Call {
        Call {
            service: "runtime.v1.RuntimeService".into(),
            method: method.into(),
            code: code.into(),
        }
    }

    #[test]
    fn calls_are_counted_and_timed_by_method_and_code() {
        let m = Metrics::new(None);
        m.record(call("ListContainers", "OK"), Duration::from_millis(2));
        m.record(call("ListContainers", "OK"), Duration::from_millis(3));
        m.record(call("RunPodSandbox", "OK"), Duration::from_millis(120));
        m.record(
            call("RunPodSandbox", "InvalidArgument"),
            Duration::from_millis(1),
        );
        let text = m.encode();
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.starts_with(needle))
                .unwrap_or_else(|| panic!("no {needle} in\n{text}"))
                .to_string()
        };
        assert!(line(
            "bosun_cri_requests_total{service=\"runtime.v1.RuntimeService\",method=\"ListContainers\",code=\"OK\"}"
        )
        .ends_with(" 2"));
        assert!(line(
            "bosun_cri_request_duration_seconds_count{service=\"runtime.v1.RuntimeService\",method=\"ListContainers\",code=\"OK\"}"
        )
        .ends_with(" 2"));
        // Only the successful RunPodSandbox is a sandbox run.
        assert!(line("bosun_pod_sandbox_run_duration_seconds_count").ends_with(" 1"));
        assert!(
            text.contains("# TYPE bosun_image_pull_bytes counter"),
            "{text}"
        );
    }
}
