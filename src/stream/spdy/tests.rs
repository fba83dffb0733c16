//! SPDY session tests: client and server over an in-memory duplex, and raw-frame peers.
