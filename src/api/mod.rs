//! bosun.v1 gRPC services (bosun's own API next to CRI on the same socket): translation only.

pub mod images;

pub use images::ApiImages;
