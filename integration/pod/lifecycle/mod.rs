//! Supervised pods, start to finish: `pod::lifecycle::` trials.

mod init;
mod manifests;
mod restarts;
mod web;

trials! {
    web,
    init,
    restarts,
    manifests,
}
