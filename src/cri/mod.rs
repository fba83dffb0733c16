//! CRI v1 gRPC handlers: translation only (proto ⇄ domain, Error → Status), no state of their own.

pub mod convert;
pub mod errors;
pub mod image;
pub mod rpc;
pub mod runtime;

pub use image::CriImages;
pub use runtime::{CriRuntime, PodStatusSource};
