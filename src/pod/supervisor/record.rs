//! A supervised pod's durable record (`<root>/pods/<uid>/record.json`): the truth after a restart.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::atomic::write_json;

/// A delete in progress: restarted with its full grace after a daemon restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Deletion {
    /// When it was asked for (unix ns).
    pub at_ns: i64,
    /// The grace in effect (seconds), never longer than the pod's.
    pub grace_secs: u64,
    /// Forced: the pod left the API at once.
    #[serde(default)]
    pub force: bool,
}

/// A readiness gate condition set by `bosun pod condition set`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gate {
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_ns: i64,
}

/// Why the node ended the pod (admission refused it, eviction, preemption): phase Failed with
/// this reason and message, as the kubelet reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub reason: String,
    pub message: String,
    /// A DisruptionTarget condition goes with it (eviction: reason TerminationByKubelet).
    #[serde(default)]
    pub disruption: bool,
    /// When (unix ns).
    #[serde(default)]
    pub at_ns: i64,
}

/// When a computed pod condition (Ready, Initialized, …) last changed status.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    pub status: bool,
    /// Unix seconds.
    pub at_s: i64,
}

/// What survives a daemon restart of one pod.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// The pod as applied, with bosun's metadata (uid, creationTimestamp) filled.
    pub pod: Pod,
    /// `api` or `file`.
    pub source: String,
    /// The static pod file it came from (`file` pods).
    #[serde(default)]
    pub file: Option<PathBuf>,
    pub created_ns: i64,
    #[serde(default)]
    pub deletion: Option<Deletion>,
    #[serde(default)]
    pub gates: BTreeMap<String, Gate>,
    /// The computed conditions' last transitions, by type: lastTransitionTime survives a
    /// daemon restart (the kubelet gets it back from the API server).
    #[serde(default)]
    pub conditions: BTreeMap<String, Transition>,
    /// The pod reached Succeeded or Failed: nothing restarts any more.
    #[serde(default)]
    pub finished: bool,
    /// The node admitted it (its requests count until it stops; a restart adopts it as is).
    #[serde(default)]
    pub admitted: bool,
    /// The node ended it (refused, evicted, preempted).
    #[serde(default)]
    pub failure: Option<Failure>,
    /// The uid of the pod it replaces (that one must be gone before this one starts).
    #[serde(default)]
    pub replaces: Option<String>,
}

impl Record {
    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }
    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }
    /// `namespace/name`, how messages name the pod.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    /// A static pod (from `[pod] manifest_dir`).
    pub fn is_static(&self) -> bool {
        self.source == "file"
    }

    /// The pod shares the node's network namespace.
    pub fn host_network(&self) -> bool {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.host_network)
            .unwrap_or(false)
    }

    /// The pod's directory under `pods_dir`.
    pub fn dir(&self, pods_dir: &Path) -> PathBuf {
        pods_dir.join(self.uid())
    }

    /// Writes `record.json` atomically (creating the pod's directory).
    pub fn save(&self, pods_dir: &Path) -> Result<()> {
        let dir = self.dir(pods_dir);
        std::fs::create_dir_all(&dir).map_err(|e| {
            Error::internal(format!("pod {}: create {}: {e}", self.key(), dir.display()))
        })?;
        write_json(&dir.join("record.json"), self)
            .map_err(|e| e.context(format!("pod {}: save record", self.key())))
    }
}

/// Every readable record under `pods_dir`; unreadable ones are logged and skipped (their
/// directories stay for a human to look at).
pub fn load_all(pods_dir: &Path) -> Vec<Record> {
    let Ok(dir) = std::fs::read_dir(pods_dir) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        // Writes a crash cut short (issue 16).
        for f in crate::store::atomic::remove_temps(&entry.path()).1 {
            tracing::warn!("{f}");
        }
        let path = entry.path().join("record.json");
        match std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<Record>(&b).map_err(|e| e.to_string()))
        {
            Ok(r) => out.push(r),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "pod record unreadable, skipped")
            }
        }
    }
    out.sort_by_key(|r| r.created_ns);
    out
}
