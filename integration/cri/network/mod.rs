//! Pod networking over CRI with real runc on bosun's embedded network (each daemon its own
//! bridge, /24, lease journal and nftables table; no masquerade, no default route) and on a
//! conf-dir CNI config with Debian's plugins: `cri::network::` trials.

mod bridge;
mod latency;
mod release;
mod state;

trials! {
    bridge,
    release,
    state,
    latency,
}
