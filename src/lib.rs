//! bosun: a Kubernetes CRI v1 runtime for test nodes, CI runners and kind images.

pub mod api;
pub mod cgroups;
pub mod cli;
pub mod config;
pub mod cri;
pub mod daemon;
#[cfg(test)]
mod doc_tests;
pub mod error;
#[cfg(feature = "failpoints")]
pub mod failpoint;
pub mod image;
#[cfg(test)]
mod layering_tests;
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

/// Marks the step boundary `$name` in synchronous code (see `src/failpoint.rs`); expands to
/// nothing without the `failpoints` feature.
#[macro_export]
macro_rules! failpoint {
    ($name:expr) => {{
        #[cfg(feature = "failpoints")]
        $crate::failpoint::hit(&$name);
    }};
}

/// Marks the step boundary `$name` at a step that can fail (see `src/failpoint.rs`): a
/// `Result<()>` expression, `Err` when the point is armed with `error`; `Ok(())` without the
/// `failpoints` feature. Use it as `crate::failpoint_check!("name")?`.
#[macro_export]
macro_rules! failpoint_check {
    ($name:expr) => {{
        #[cfg(feature = "failpoints")]
        let checked = $crate::failpoint::check(&$name);
        #[cfg(not(feature = "failpoints"))]
        let checked: $crate::Result<()> = Ok(());
        checked
    }};
}

/// Marks the step boundary `$name` in async code (pause and sleep do not block a runtime
/// thread); expands to nothing without the `failpoints` feature.
#[macro_export]
macro_rules! failpoint_async {
    ($name:expr) => {{
        #[cfg(feature = "failpoints")]
        $crate::failpoint::hit_async(&$name).await;
    }};
}
