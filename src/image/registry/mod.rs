//! OCI distribution registry client: host settings, authentication, manifest and blob fetches.

pub mod auth;
pub mod challenge;
pub mod client;
pub(crate) mod downloads;
pub mod hosts;
pub(crate) mod retry;
mod transport;

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
pub(crate) mod testserver;

pub use auth::Credentials;
pub use client::{RegistryClient, Resolved};
pub use hosts::{Endpoint, Scheme};
