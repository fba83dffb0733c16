//! Pure conversions between the CRI proto types and the runtime domain, with the wire validation.

pub mod container;
pub mod event;
pub mod exec;
pub mod filter;
pub mod resources;
pub mod sandbox;
pub mod security;
pub mod signal;
pub mod stats;
pub mod status;
pub mod stream;

#[cfg(test)]
mod container_tests;
#[cfg(test)]
mod exec_tests;
#[cfg(test)]
mod filter_tests;
#[cfg(test)]
mod resources_tests;
#[cfg(test)]
mod sandbox_tests;
#[cfg(test)]
mod security_tests;
#[cfg(test)]
mod signal_tests;
#[cfg(test)]
mod stats_tests;
#[cfg(test)]
mod status_tests;

use crate::error::Error;

/// InvalidArgument for an enum field holding a value the schema does not define.
pub(crate) fn bad_enum(field: &str, value: i32) -> Error {
    Error::invalid(format!("{field}: unknown enum value {value}"))
}

/// Asserts that `r` is InvalidArgument and that its message contains every one of `needles`.
#[cfg(test)]
pub(crate) fn assert_invalid<T: std::fmt::Debug>(r: crate::Result<T>, needles: &[&str]) {
    let e = r.expect_err("an InvalidArgument error");
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");
    for n in needles {
        assert!(e.message().contains(n), "{e:?} does not mention {n:?}");
    }
}
