//! The streaming server's protocols (exec, attach, port-forward): SPDY/3.1 framing for now.

pub mod spdy;
