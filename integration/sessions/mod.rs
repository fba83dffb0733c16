//! Interactive sessions on real runc containers through an in-process runtime: streaming exec
//! (pipes and terminal), attach through the monitor, port-forward into the pod's netns:
//! `sessions::` trials.

mod attach;
mod exec;
mod port_forward;

trials! {
    exec,
    port_forward,
    attach,
}
