//! CRI v1 gRPC handlers: translation only (proto ⇄ domain, Error → Status), no state of their own.

pub mod convert;
pub mod image;
pub mod runtime;
pub mod status;

pub use image::CriImages;
pub use runtime::{CriRuntime, PodStatusSource};
