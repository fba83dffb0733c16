//! Faults (issue 28): failed creations leave nothing, two daemons on one host, lists that
//! never miss a live object: `faults::` trials.

mod daemons;
mod lists;
mod undo;

trials! {
    undo,
    daemons,
    lists,
}
