//! Generated protobuf types and gRPC stubs (CRI v1 and bosun.v1); used only by cri/, api/ and clients.

#![allow(missing_docs, clippy::all, clippy::pedantic)]

/// `bosun.v1`: bosun's own API.
pub mod bosun {
    /// Version 1.
    pub mod v1 {
        tonic::include_proto!("bosun.v1");
    }
}

/// `runtime.v1`: the Kubernetes CRI.
pub mod runtime {
    /// Version 1.
    pub mod v1 {
        tonic::include_proto!("runtime.v1");
    }
}
