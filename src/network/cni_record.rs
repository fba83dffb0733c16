//! The per-sandbox CNI record (`<cache>/<id>.json`: what was attached) and the DEL it drives until it succeeds.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Cni;
use crate::error::{Error, Result};
use crate::network::conf::NetworkList;
use crate::network::invoke::{self, Command};
use crate::network::{firewall, PodNetwork, POD_IFNAME};
use crate::store::atomic::write_json;

/// What a sandbox was attached with (`<cache>/<id>.json`), written before the first ADD and
/// removed after a successful DEL.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::network) struct Record {
    pub(in crate::network) network: String,
    pub(in crate::network) steps: Vec<RecordStep>,
    /// DELs started so far (each failed or was cut short, or the record would be gone): a
    /// retried DEL may not see what an earlier one removed half of.
    #[serde(default)]
    pub(in crate::network) del_attempts: u32,
    /// Set when the sandbox went away with its DEL failed: the DEL is retried in the
    /// background with this (its netns pinned at `<cache>/<id>.netns`), see `deferred.rs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(in crate::network) deferred: Option<PodNetwork>,
}

impl Record {
    /// The names of the networks attached (the record's and each step's list).
    fn networks(&self) -> Vec<String> {
        let mut names = vec![self.network.clone()];
        for s in &self.steps {
            if let Some(n) = s.list.get("name").and_then(Value::as_str) {
                if !names.iter().any(|have| have == n) {
                    names.push(n.to_string());
                }
            }
        }
        names
    }

    /// Whether every ADD finished (results recorded): not cut short by a failure or a crash.
    fn add_finished(&self) -> bool {
        self.steps.iter().all(|s| s.result.is_some())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(in crate::network) struct RecordStep {
    pub(super) ifname: String,
    pub(super) list: Value,
    #[serde(default)]
    pub(super) result: Option<Value>,
    /// How many of the list's plugins ADD was started for, recorded before each is run: a
    /// plugin ADD never reached needs no DEL (its binary may not even exist). Absent in
    /// records from before issue 28: every plugin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) invoked: Option<usize>,
}

impl Cni {
    pub(in crate::network) async fn write_record(&self, id: &str, rec: &Record) -> Result<()> {
        let path = self.record_path(id);
        let rec = rec.clone();
        tokio::task::spawn_blocking(move || write_json(&path, &rec))
            .await
            .map_err(|e| Error::internal(format!("write CNI record: {e}")))?
    }

    /// Removes sandbox `id`'s record (DEL done, or never possible).
    pub(in crate::network) fn forget(&self, id: &str) -> Result<()> {
        match std::fs::remove_file(self.record_path(id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::internal(format!("remove CNI record of {id}: {e}")))
            }
            _ => Ok(()),
        }
    }

    pub(in crate::network) fn read_record(&self, id: &str) -> Result<Option<Record>> {
        let path = self.record_path(id);
        match std::fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| Error::internal(format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::internal(format!("read {}: {e}", path.display()))),
        }
    }
    /// CNI DEL from the sandbox's record (a no-op without one). A DEL that can never run (its
    /// record is not JSON or not a network config we can read, or its environment is more than
    /// exec takes, and then ADD could not run either) is given up with a warning, so the sandbox
    /// can still be removed (issue 16 item 8). A DEL that ran and failed, timed out or found no
    /// plugin keeps the record for the next try; a DEL after another one or after an interrupted
    /// ADD is checked for left firewall rules.
    pub(in crate::network) async fn detach_cni(&self, pod: &PodNetwork) -> Result<()> {
        let path = self.record_path(&pod.id);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::internal(format!("read {}: {e}", path.display()))),
        };
        let usable = match usable_record(&bytes) {
            Ok(r) => exec_refused(pod, &self.cfg.bin_dirs).map_or(Ok(r), Err),
            Err(e) => Err(format!("record {}: {e}", path.display())),
        };
        let (mut rec, lists) = match usable {
            Ok(r) => r,
            Err(why) => {
                tracing::warn!(sandbox = %pod.id, "CNI DEL can never run ({why}); given up");
                return self.forget(&pod.id);
            }
        };
        // After an interrupted ADD, or a DEL that failed or was cut short, plugins' DEL is
        // known to miss rules (they find them from the interface the earlier call deleted).
        let suspect = !rec.add_finished() || rec.del_attempts > 0;
        rec.del_attempts += 1;
        self.write_record(&pod.id, &rec).await?;
        self.del_steps(&rec, &lists, pod).await?;
        crate::failpoint!("cni.del.done");
        if suspect {
            let removed = firewall::sweep(&pod.id, &rec.networks())
                .await
                .map_err(|e| e.context(format!("sandbox {}: CNI DEL not complete", pod.id)))?;
            if !removed.is_empty() {
                tracing::warn!(
                    sandbox = %pod.id,
                    removed = ?removed,
                    "CNI DEL left firewall rules of the sandbox; removed them"
                );
            }
        }
        self.forget(&pod.id)
    }
}

/// The longest environment string exec(2) accepts (MAX_ARG_STRLEN: 32 pages, with the NUL).
const ARG_STRLEN_MAX: usize = 32 * 4096;

/// Why the kernel would refuse to exec a plugin with `pod`'s environment (E2BIG): such a call
/// can never run, whatever is retried. `None` when it fits.
pub(super) fn exec_refused(pod: &PodNetwork, bin_dirs: &[PathBuf]) -> Option<String> {
    let env = invoke::env(Command::Del, pod, POD_IFNAME, &pod.netns, bin_dirs);
    env.iter()
        .find(|(k, v)| k.len() + v.len() + 2 > ARG_STRLEN_MAX)
        .map(|(k, v)| {
            format!(
                "{k} is {} bytes, exec takes at most {ARG_STRLEN_MAX}",
                v.len()
            )
        })
}

/// A record with its steps' network configs, or why it cannot be read.
fn usable_record(bytes: &[u8]) -> std::result::Result<(Record, Vec<NetworkList>), String> {
    let rec: Record = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
    let lists = rec
        .steps
        .iter()
        .map(|s| NetworkList::from_raw(&s.list).map_err(|e| e.to_string()))
        .collect::<std::result::Result<_, _>>()?;
    Ok((rec, lists))
}
