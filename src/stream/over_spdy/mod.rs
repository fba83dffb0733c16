//! The streaming protocols over SPDY/3.1 (after the HTTP upgrade): remotecommand exec/attach and portforward.

pub mod exec;
pub mod portforward;

/// How long the server waits for the client to open the streams a request needs.
pub const STREAM_CREATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);
/// The stream header naming a stream's role.
pub const STREAM_TYPE: &str = "streamType";
/// How long the server waits, after the outcome, for the client to close the connection.
pub const CLOSE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
