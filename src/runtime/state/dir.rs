//! The state directory `<root>/{sandboxes,containers}/<id>/{meta.json,status.json}`.

use std::fs;
use std::path::{Path, PathBuf};

use super::load::Recovered;
use super::record::{Meta, CONTAINERS_DIR, SANDBOXES_DIR};
use super::status::{ContainerStatus, SandboxStatus};
use super::table::Table;
use crate::error::{Result, ResultExt};

/// Sandboxes and containers, in memory and on disk under one root.
pub struct StateDir<SM, CM> {
    root: PathBuf,
    /// The sandbox table (`<root>/sandboxes`).
    pub sandboxes: Table<SM, SandboxStatus>,
    /// The container table (`<root>/containers`).
    pub containers: Table<CM, ContainerStatus>,
}

impl<SM: Meta, CM: Meta> StateDir<SM, CM> {
    /// Opens `root`, creating the kind directories; the tables start empty (see [`Self::adopt`]).
    pub fn open(root: &Path) -> Result<Self> {
        let sandboxes = root.join(SANDBOXES_DIR);
        let containers = root.join(CONTAINERS_DIR);
        for dir in [&sandboxes, &containers] {
            fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        }
        Ok(StateDir {
            root: root.to_path_buf(),
            sandboxes: Table::new("sandbox", sandboxes),
            containers: Table::new("container", containers),
        })
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Puts recovered objects into the tables (statuses as the caller reconciled them);
    /// returns the recovery problems plus any duplicate names met here.
    pub fn adopt(&self, recovered: Recovered<SM, CM>) -> Vec<String> {
        let mut problems = recovered.problems;
        for sb in recovered.sandboxes {
            if let Err(e) = self.sandboxes.adopt(sb) {
                problems.push(e.to_string());
            }
        }
        for c in recovered.containers {
            if let Err(e) = self.containers.adopt(c) {
                problems.push(e.to_string());
            }
        }
        problems
    }
}
