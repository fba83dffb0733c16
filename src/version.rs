//! Version strings stamped at build time: crate version and git commit.

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (`unknown` outside a checkout).
pub const COMMIT: &str = env!("BOSUN_GIT_COMMIT");
/// The runtime name reported over CRI.
pub const RUNTIME_NAME: &str = "bosun";
/// The CRI API version bosun speaks.
pub const CRI_API_VERSION: &str = "v1";

/// `0.1.0 (commit abc123)`.
pub const LONG: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("BOSUN_GIT_COMMIT"),
    ")"
);

/// `0.1.0 (commit abc123)`, as a String.
pub fn long() -> String {
    LONG.to_string()
}
