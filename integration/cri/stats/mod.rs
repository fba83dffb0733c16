//! Stats and metrics with real runc containers: ContainerStats and PodSandboxStats against the
//! cgroup files, filters, metrics, `/metrics`: `cri::stats::` trials.

mod cgroup;
mod metrics;
mod scale;

trials! {
    cgroup,
    metrics,
    scale,
}
