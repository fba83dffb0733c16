//! bosun: a Kubernetes CRI v1 runtime for test nodes, CI runners and kind images.

pub mod api;
pub mod cgroups;
pub mod cli;
pub mod config;
pub mod cri;
pub mod daemon;
pub mod error;
pub mod image;
pub mod metrics;
pub mod monitor;
pub mod network;
pub mod oci;
pub mod pod;
pub mod proto;
pub mod runtime;
pub mod sandbox;
pub mod store;
pub mod stream;
pub mod sys;
#[cfg(test)]
pub(crate) mod testutil;
pub mod version;

pub use error::{Error, ErrorKind, Result};
