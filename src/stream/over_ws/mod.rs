//! The streaming protocols over WebSocket: channel framing, the connection multiplexer, exec/attach and port-forward.

pub mod exec;
pub mod frame;
pub mod mux;
pub mod portforward;
pub mod tunnel;
