//! Standalone pod supervisor: the kubelet's pod lifecycle for pods bosun runs itself (issue 5; pure rules first).

pub mod api;
pub mod backoff;
pub mod conditions;
pub mod env;
pub mod exec;
pub mod grace;
pub mod handler;
pub mod hooks;
pub mod labels;
pub mod manifest;
pub mod node;
pub mod phase;
pub mod probe;
pub mod probe_result;
pub mod probe_runtime;
pub mod prober;
pub mod projection;
pub mod resources;
pub mod supervisor;
pub mod translate;
pub mod userns;
pub mod validate;
pub mod volumes;

#[cfg(test)]
mod env_tests;
#[cfg(test)]
mod probe_tests;
#[cfg(test)]
mod prober_tests;
#[cfg(test)]
mod translate_tests;
#[cfg(test)]
mod validate_tests;
#[cfg(test)]
mod volumes_tests;
