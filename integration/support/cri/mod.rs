//! CRI fixtures: the daemon for a CRI test and its images, pod and container configs, one
//! helper per RPC, CRI log parsing, and the leftover checks (mounts, monitors, cgroups, runc
//! state, pinned namespaces) every CRI test ends with. The scans here are also what
//! [`Daemon`]'s drop uses to clean up after a failed test.

mod build;
mod clean;
mod config;
mod host;
mod logs;
mod rpc;

use std::path::Path;

use anyhow::{ensure, Context, Result};

pub use build::*;
pub use clean::*;
pub use config::*;
pub use host::*;
pub use logs::*;
pub use rpc::*;

use super::{images_dir, runc_bin, Daemon, Need};

/// What every CRI test needs: root, runc and the test images.
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];

/// The namespace every test pod lives in.
pub const NAMESPACE: &str = "bosun-it";

/// A daemon for a CRI test (runc from [`runc_bin`]) plus `extra` TOML.
pub fn daemon_with(extra: &str) -> Result<Daemon> {
    daemon_after(extra, |_| Ok(()))
}

/// [`daemon_with`], started once `before` has prepared its scratch dir.
pub fn daemon_after(extra: &str, before: impl FnOnce(&Path) -> Result<()>) -> Result<Daemon> {
    let runc = runc_bin().context("no runc")?;
    let config = format!("runtime = {:?}\n{extra}", runc.display().to_string());
    Daemon::start_after(&config, before)
}

/// A daemon for a CRI test.
pub fn daemon() -> Result<Daemon> {
    daemon_with("")
}

/// Imports test image `name` (`test-images/<name>.oci.tar`) and returns the reference to use
/// in a ContainerConfig: `bosun.test/<name>:latest`.
pub fn import(d: &Daemon, name: &str) -> Result<String> {
    let reference = format!("bosun.test/{name}:latest");
    let archive = images_dir().join(format!("{name}.oci.tar"));
    let archive = archive.display().to_string();
    let out = d.cli(&["image", "import", "--tag", &reference, &archive])?;
    ensure!(
        out.status.success(),
        "bosun image import {archive}: {}: {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(reference)
}
