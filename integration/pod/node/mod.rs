//! Node resources of supervised pods: admission, priorities, QoS cgroups, pressure eviction, runtime classes:
//! `pod::node::` trials.

mod eviction;
mod pressure;
pub mod resources;
mod runtime_class;

trials! {
    resources,
    eviction,
    pressure,
    runtime_class,
}
