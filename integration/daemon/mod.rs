//! The daemon process itself over its socket: `daemon::` trials.

mod idle;
mod service;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(service::trials());
    all.extend(idle::trials());
    all
}
