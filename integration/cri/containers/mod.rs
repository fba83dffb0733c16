//! CRI containers over the socket with real runc: `cri::containers::` trials.

mod exits;
mod logs;
mod mounts;
mod process;
mod resources;
mod status;

trials! {
    process,
    mounts,
    exits,
    logs,
    status,
    resources,
}
