//! kill -9 of the daemon at its step boundaries (failpoints) and at random: `crash::` trials.

mod churn;
mod cni;
mod lock;
mod net;
pub mod steps;
mod trash;
mod userns;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(steps::trials());
    all.extend(trash::trials());
    all.extend(cni::trials());
    all.extend(userns::trials());
    all.extend(churn::trials());
    all.extend(lock::trials());
    all.extend(net::trials());
    all
}
