//! Node resources of supervised pods: admission, priorities, QoS cgroups, pressure eviction:
//! `pod::node::` trials.

mod eviction;
mod pressure;
pub mod resources;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(resources::trials());
    all.extend(eviction::trials());
    all.extend(pressure::trials());
    all
}
