//! OCI distribution registry client: host settings, authentication, manifest and blob fetches.

pub mod auth;
pub mod challenge;
pub mod client;
pub mod clients;
pub(crate) mod downloads;
pub mod hosts;
pub mod hosts_dir;
pub mod hosts_toml;
pub(crate) mod retry;
mod transport;

#[cfg(test)]
mod auth_tests;
#[cfg(test)]
mod hosts_tests;
#[cfg(test)]
pub(crate) mod testserver;

pub use auth::Credentials;
pub use client::{RegistryClient, Resolved};
pub use hosts::{Endpoint, PullHosts, Scheme};
