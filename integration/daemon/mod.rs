//! The daemon process itself over its socket: `daemon::` trials.

mod idle;
mod service;

trials! {
    service,
    idle,
}
