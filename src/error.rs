//! The crate's one error type: a kind (mapped once to a gRPC code) and a message naming the object.

use std::fmt;

/// What went wrong, independent of transport; `cri/` maps it to a gRPC code in one place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller sent something malformed (bad reference, missing field).
    InvalidArgument,
    /// The named object does not exist.
    NotFound,
    /// The object exists already (duplicate name).
    AlreadyExists,
    /// The object is not in a state that allows the call.
    FailedPrecondition,
    /// A remote (registry, plugin) could not be reached.
    Unavailable,
    /// The remote refused our credentials.
    PermissionDenied,
    /// The call ran out of time.
    DeadlineExceeded,
    /// A limit was hit (layer size, entry count).
    ResourceExhausted,
    /// The RPC is not implemented by this runtime.
    Unimplemented,
    /// Anything else: I/O failures, corrupt state, bugs.
    Internal,
}

/// An error with its kind and a full, human-readable message chain (`step: cause: cause`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    kind: ErrorKind,
    message: String,
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An error of `kind` with `message`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
        }
    }
    /// InvalidArgument.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }
    /// NotFound.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::NotFound, message)
    }
    /// FailedPrecondition.
    pub fn precondition(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::FailedPrecondition, message)
    }
    /// Internal.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Internal, message)
    }
    /// Unavailable.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unavailable, message)
    }
    /// Unimplemented.
    pub fn unimplemented(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::Unimplemented, message)
    }
    /// The kind, for mapping to a transport code.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }
    /// The message chain.
    pub fn message(&self) -> &str {
        &self.message
    }
    /// Prefixes the message with `ctx` (the step or object), keeping the kind.
    pub fn context(self, ctx: impl fmt::Display) -> Self {
        Error {
            kind: self.kind,
            message: format!("{ctx}: {}", self.message),
        }
    }
    /// The same message with another kind.
    pub fn with_kind(self, kind: ErrorKind) -> Self {
        Error {
            kind,
            message: self.message,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            std::io::ErrorKind::TimedOut => ErrorKind::DeadlineExceeded,
            _ => ErrorKind::Internal,
        };
        Error::new(kind, e.to_string())
    }
}

impl From<rustix::io::Errno> for Error {
    fn from(e: rustix::io::Errno) -> Self {
        Error::from(std::io::Error::from(e))
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::internal(e.to_string())
    }
}

/// Adds context to any error convertible into [`Error`].
pub trait ResultExt<T> {
    /// On error, prefix the message with `ctx` (evaluated lazily).
    fn ctx<C: fmt::Display>(self, ctx: impl FnOnce() -> C) -> Result<T>;
}

impl<T, E: Into<Error>> ResultExt<T> for std::result::Result<T, E> {
    fn ctx<C: fmt::Display>(self, ctx: impl FnOnce() -> C) -> Result<T> {
        self.map_err(|e| e.into().context(ctx()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_prefixes_and_keeps_kind() {
        let e = Error::not_found("no such blob")
            .context("image busybox")
            .context("pull");
        assert_eq!(e.kind(), ErrorKind::NotFound);
        assert_eq!(e.to_string(), "pull: image busybox: no such blob");
    }

    #[test]
    fn io_not_found_maps_to_not_found() {
        let e: Error = std::io::Error::from(std::io::ErrorKind::NotFound).into();
        assert_eq!(e.kind(), ErrorKind::NotFound);
    }
}
