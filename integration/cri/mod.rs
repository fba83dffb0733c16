//! The CRI RuntimeService over the socket with real runc: `cri::` trials.

pub mod conform;
mod containers;
mod deferred;
mod events;
mod exec;
mod features;
mod hostile;
mod images;
mod network;
mod pods;
mod recovery;
mod spare;
mod stats;
mod stop;
mod streaming;
pub mod userns;

/// Every trial of the modules above.
pub fn trials() -> Vec<libtest_mimic::Trial> {
    let mut all = Vec::new();
    all.extend(pods::trials());
    all.extend(containers::trials());
    all.extend(deferred::trials());
    all.extend(spare::trials());
    all.extend(conform::trials());
    all.extend(stop::trials());
    all.extend(streaming::trials());
    all.extend(exec::trials());
    all.extend(events::trials());
    all.extend(images::trials());
    all.extend(network::trials());
    all.extend(recovery::trials());
    all.extend(stats::trials());
    all.extend(features::trials());
    all.extend(userns::trials());
    all.extend(hostile::trials());
    all
}
