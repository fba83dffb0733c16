//! An object's record on disk: the names of its directories and files, and the traits of what they hold.

use std::fmt;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};

/// The immutable metadata file in each object directory.
pub const META_FILE: &str = "meta.json";
/// The versioned status file in each object directory.
pub const STATUS_FILE: &str = "status.json";
/// The directory of sandboxes under the root.
pub const SANDBOXES_DIR: &str = "sandboxes";
/// The directory of containers under the root.
pub const CONTAINERS_DIR: &str = "containers";

/// The caller's immutable metadata for an object (written once to `meta.json`).
pub trait Meta: Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The name reservation key, unique among live objects of the kind
    /// (e.g. `name_namespace_uid_attempt`).
    fn name_key(&self) -> String;
    /// The value of label `key`, if set.
    fn label(&self, key: &str) -> Option<&str>;
    /// The owning sandbox's id (containers); None for sandboxes.
    fn pod_id(&self) -> Option<&str> {
        None
    }
}

/// A checkpointed status with a derived state and a version bumped per write.
pub trait Status: Clone + Serialize + DeserializeOwned + Send + Sync + 'static {
    /// The derived state used by list filters.
    type State: Copy + PartialEq + fmt::Debug + Send + Sync;
    /// The state derived from the status.
    fn state(&self) -> Self::State;
    /// The write version.
    fn version(&self) -> u64;
    /// Sets the write version.
    fn set_version(&mut self, version: u64);
    /// The UNKNOWN status of an object whose status file is missing or corrupt, created at
    /// `created_ns` (CRI clients reject a status without a creation time).
    fn unreadable(message: String, created_ns: i64) -> Self;
}

impl Status for ContainerStatus {
    type State = ContainerState;
    fn state(&self) -> ContainerState {
        ContainerStatus::state(self)
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn set_version(&mut self, version: u64) {
        self.version = version;
    }
    fn unreadable(message: String, created_ns: i64) -> Self {
        ContainerStatus {
            created_ns,
            ..ContainerStatus::unreadable(message)
        }
    }
}

impl Status for SandboxStatus {
    type State = SandboxState;
    fn state(&self) -> SandboxState {
        SandboxStatus::state(self)
    }
    fn version(&self) -> u64 {
        self.version
    }
    fn set_version(&mut self, version: u64) {
        self.version = version;
    }
    fn unreadable(message: String, created_ns: i64) -> Self {
        SandboxStatus {
            created_ns,
            ..SandboxStatus::unreadable(message)
        }
    }
}
