//! What an eviction signal starves and the node condition it drives (the thresholds are `[node]` keys: config::eviction).

use crate::config::eviction::Signal;

/// The resource a signal starves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    Memory,
    EphemeralStorage,
    Inodes,
    Pids,
}

impl Resource {
    /// The kubelet's name (`memory`, `ephemeral-storage`, `inodes`, `pids`).
    pub fn as_str(self) -> &'static str {
        match self {
            Resource::Memory => "memory",
            Resource::EphemeralStorage => "ephemeral-storage",
            Resource::Inodes => "inodes",
            Resource::Pids => "pids",
        }
    }
}

/// The node conditions pressure sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Condition {
    MemoryPressure,
    DiskPressure,
    PIDPressure,
}

impl Condition {
    /// The condition type's name.
    pub fn as_str(self) -> &'static str {
        match self {
            Condition::MemoryPressure => "MemoryPressure",
            Condition::DiskPressure => "DiskPressure",
            Condition::PIDPressure => "PIDPressure",
        }
    }
    /// Every pressure condition, in the order `node describe` lists them.
    pub const ALL: [Condition; 3] = [
        Condition::MemoryPressure,
        Condition::DiskPressure,
        Condition::PIDPressure,
    ];
}

/// What a configured signal means to the node.
impl Signal {
    /// What the signal measures.
    pub fn resource(self) -> Resource {
        match self {
            Signal::MemoryAvailable | Signal::AllocatableMemoryAvailable => Resource::Memory,
            Signal::NodeFsAvailable | Signal::ImageFsAvailable => Resource::EphemeralStorage,
            Signal::NodeFsInodesFree | Signal::ImageFsInodesFree => Resource::Inodes,
            Signal::PidAvailable => Resource::Pids,
        }
    }

    /// The node condition it drives.
    pub fn condition(self) -> Condition {
        match self.resource() {
            Resource::Memory => Condition::MemoryPressure,
            Resource::EphemeralStorage | Resource::Inodes => Condition::DiskPressure,
            Resource::Pids => Condition::PIDPressure,
        }
    }

    /// Whether disk pressure on it first reclaims dead containers and unused images.
    pub fn reclaims_disk(self) -> bool {
        matches!(
            self.resource(),
            Resource::EphemeralStorage | Resource::Inodes
        )
    }
}
