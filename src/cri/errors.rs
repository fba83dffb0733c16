//! The one mapping from domain errors to gRPC status codes, and the per-RPC log line.

use tonic::{Code, Response, Status};

use crate::error::{Error, ErrorKind};

/// The gRPC code for an error kind.
pub fn code(kind: ErrorKind) -> Code {
    match kind {
        ErrorKind::InvalidArgument => Code::InvalidArgument,
        ErrorKind::NotFound => Code::NotFound,
        ErrorKind::AlreadyExists => Code::AlreadyExists,
        ErrorKind::FailedPrecondition => Code::FailedPrecondition,
        ErrorKind::Unavailable => Code::Unavailable,
        ErrorKind::PermissionDenied => Code::PermissionDenied,
        ErrorKind::DeadlineExceeded => Code::DeadlineExceeded,
        ErrorKind::ResourceExhausted | ErrorKind::NoSpace => Code::ResourceExhausted,
        ErrorKind::Unimplemented => Code::Unimplemented,
        ErrorKind::Internal => Code::Internal,
    }
}

/// The longest `grpc-message` sent (and logged). Values in messages are already cut by
/// [`crate::error::echo`]; this bounds what several of them add up to. grpc-core clients refuse
/// more than 16 KiB of metadata (8 KiB soft) and tonic percent-encodes non-ASCII bytes (×3).
pub const MESSAGE_MAX: usize = 2048;

/// Converts a domain error to a Status, logging it once here at the RPC boundary.
pub fn to_status(rpc: &'static str, e: Error) -> Status {
    let message = crate::error::bounded(e.message(), MESSAGE_MAX);
    match e.kind() {
        ErrorKind::Internal | ErrorKind::Unavailable | ErrorKind::NoSpace => {
            tracing::warn!(rpc, "{message}")
        }
        _ => tracing::debug!(rpc, "{message}"),
    }
    Status::new(code(e.kind()), message.into_owned())
}

/// Wraps a domain result into a gRPC response.
pub fn reply<T>(rpc: &'static str, r: crate::Result<T>) -> Result<Response<T>, Status> {
    r.map(Response::new).map_err(|e| to_status(rpc, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_maps_to_its_code() {
        let table = [
            (ErrorKind::InvalidArgument, Code::InvalidArgument),
            (ErrorKind::NotFound, Code::NotFound),
            (ErrorKind::AlreadyExists, Code::AlreadyExists),
            (ErrorKind::FailedPrecondition, Code::FailedPrecondition),
            (ErrorKind::Unavailable, Code::Unavailable),
            (ErrorKind::PermissionDenied, Code::PermissionDenied),
            (ErrorKind::DeadlineExceeded, Code::DeadlineExceeded),
            (ErrorKind::ResourceExhausted, Code::ResourceExhausted),
            (ErrorKind::NoSpace, Code::ResourceExhausted),
            (ErrorKind::Unimplemented, Code::Unimplemented),
            (ErrorKind::Internal, Code::Internal),
        ];
        for (kind, want) in table {
            assert_eq!(code(kind), want, "{kind:?}");
        }
        let s = to_status("PullImage", Error::invalid("image reference \"A\": bad"));
        assert_eq!(s.code(), Code::InvalidArgument);
        assert_eq!(s.message(), "image reference \"A\": bad");
    }

    #[test]
    fn long_messages_are_cut_and_marked() {
        let long = format!("container {}: not found", "f".repeat(64 << 10));
        let s = to_status("ContainerStatus", Error::not_found(long));
        assert_eq!(s.code(), Code::NotFound);
        assert!(
            s.message().len() <= MESSAGE_MAX + 32,
            "{}",
            s.message().len()
        );
        assert!(s.message().ends_with("more bytes]"), "{}", s.message());
    }
}
