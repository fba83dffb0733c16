//! Node resources of supervised pods: admission, priorities, QoS cgroups, pressure eviction:
//! `pod::node::` trials.

mod eviction;
mod pressure;
pub mod resources;

trials! {
    resources,
    eviction,
    pressure,
}
