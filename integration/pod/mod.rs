//! Supervised pods (`bosun pod`): `pod::` trials.

mod config;
mod lifecycle;
mod node;
mod probes;
mod termination;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(config::trials());
    all.extend(lifecycle::trials());
    all.extend(node::trials());
    all.extend(probes::trials());
    all.extend(termination::trials());
    all
}
