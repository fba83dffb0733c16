//! bosun.v1 gRPC services (bosun's own API next to CRI on the same socket): translation only.

pub mod images;
mod import;
pub mod pods;

pub use images::ApiImages;
pub use pods::ApiPods;
