//! kill -9 of the daemon at its step boundaries (failpoints) and at random: `crash::` trials.

mod churn;
mod cni;
mod lock;
mod net;
pub mod steps;
mod trash;
mod userns;

trials! {
    steps,
    trash,
    cni,
    userns,
    churn,
    lock,
    net,
}
