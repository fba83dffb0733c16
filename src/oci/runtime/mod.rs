//! The monitor launcher trait with its fake (moving to `oci/launch/`).

pub mod launcher;

pub use launcher::{FakeLauncher, MonitorLauncher, ProcessLauncher};
