//! CRI pod sandboxes over the socket with real runc: `cri::pods::` trials.

mod filters;
mod lifecycle;
mod namespaces;
mod requests;
mod resources;

trials! {
    lifecycle,
    namespaces,
    filters,
    requests,
    resources,
}
