//! Reading the state back: every object directory under the root, and what could not be read.

use std::fs;
use std::path::Path;

use serde::de::DeserializeOwned;

use super::id;
use super::record::{Meta, Status, CONTAINERS_DIR, META_FILE, SANDBOXES_DIR, STATUS_FILE};
use super::status::{ContainerStatus, SandboxStatus};

/// One object read back from disk.
#[derive(Debug, Clone)]
pub struct Loaded<M, S> {
    /// The full id (the directory name).
    pub id: String,
    /// The metadata from `meta.json`.
    pub meta: M,
    /// The status from `status.json`, or UNKNOWN when missing or corrupt.
    pub status: S,
}

/// Everything read back from a root, plus what could not be.
#[derive(Debug, Clone)]
pub struct Recovered<SM, CM> {
    /// Sandboxes, statuses as stored.
    pub sandboxes: Vec<Loaded<SM, SandboxStatus>>,
    /// Containers, statuses as stored (reconcile each before adopting).
    pub containers: Vec<Loaded<CM, ContainerStatus>>,
    /// One line per directory skipped or repaired.
    pub problems: Vec<String>,
}

/// Reads every object under `root`; never panics and never fails as a whole.
///
/// Per directory: leftover `.tmp-*` files from an interrupted atomic write are deleted; a
/// missing `meta.json` means creation never got past its first write, so the directory is
/// removed; a corrupt `meta.json` is reported and the directory kept for inspection; a missing
/// or corrupt `status.json` yields an UNKNOWN status created when `meta.json` was written.
pub fn load_all<SM: Meta, CM: Meta>(root: &Path) -> Recovered<SM, CM> {
    let mut problems = Vec::new();
    let sandboxes = load_kind(&root.join(SANDBOXES_DIR), "sandbox", &mut problems);
    let containers = load_kind(&root.join(CONTAINERS_DIR), "container", &mut problems);
    Recovered {
        sandboxes,
        containers,
        problems,
    }
}

fn load_kind<M: Meta, S: Status>(
    dir: &Path,
    kind: &str,
    problems: &mut Vec<String>,
) -> Vec<Loaded<M, S>> {
    let rd = match fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Vec::new(),
        Err(e) => {
            problems.push(format!("{}: {e}", dir.display()));
            return Vec::new();
        }
    };
    let mut out = Vec::new();
    for ent in rd.flatten() {
        let name = ent.file_name().to_string_lossy().into_owned();
        let path = ent.path();
        if !id::is_valid(&name) || !path.is_dir() {
            problems.push(format!(
                "{}: not an object directory, ignored",
                path.display()
            ));
            continue;
        }
        problems.extend(crate::store::atomic::remove_temps(&path).1);
        let meta = match read_json::<M>(&path.join(META_FILE)) {
            Ok(Some(m)) => m,
            Ok(None) => {
                let removed = fs::remove_dir_all(&path)
                    .map_or_else(|e| format!("remove failed: {e}"), |()| "removed".into());
                problems.push(format!(
                    "{kind} {name}: no {META_FILE} (interrupted creation), {removed}"
                ));
                continue;
            }
            Err(e) => {
                problems.push(format!("{kind} {name}: {META_FILE}: {e}; skipped"));
                continue;
            }
        };
        let status = match read_json::<S>(&path.join(STATUS_FILE)) {
            Ok(Some(s)) => s,
            Ok(None) => S::unreadable(format!("{STATUS_FILE} missing"), created_ns(&path)),
            Err(e) => {
                problems.push(format!("{kind} {name}: {STATUS_FILE}: {e}; state UNKNOWN"));
                S::unreadable(format!("{STATUS_FILE} unreadable: {e}"), created_ns(&path))
            }
        };
        out.push(Loaded {
            id: name,
            meta,
            status,
        });
    }
    out
}

/// When the object in `dir` was created: `meta.json` is written once, first, so its mtime is
/// the creation time (the directory's, or now, if that cannot be read).
fn created_ns(dir: &Path) -> i64 {
    [dir.join(META_FILE), dir.to_path_buf()]
        .iter()
        .find_map(|p| fs::metadata(p).and_then(|m| m.modified()).ok())
        .map(crate::monitor::exit_record::unix_nanos)
        .filter(|ns| *ns > 0)
        .unwrap_or_else(super::status::now_ns)
}

/// Ok(None) when the file is absent; Err(message) when unreadable or not valid JSON.
fn read_json<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, String> {
    match fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}
