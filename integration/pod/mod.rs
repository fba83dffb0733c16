//! Supervised pods (`bosun pod`): `pod::` trials.

mod config;
mod lifecycle;
mod node;
mod probes;
mod termination;

trials! {
    config,
    lifecycle,
    node,
    probes,
    termination,
}
