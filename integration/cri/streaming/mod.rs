//! Streaming exec/attach/port-forward with the real daemon and runc, through `bosun
//! exec|attach|port-forward` (our crictl-compatible client) over SPDY and WebSocket:
//! `cri::streaming::` trials.

mod attach;
mod exec;
mod port_forward;

trials! {
    exec,
    attach,
    port_forward,
}
