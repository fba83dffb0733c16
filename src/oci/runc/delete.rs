//! `runc delete` of a stopped container done in-process where it is plain: no runc spawn.
//!
//! Every container exit and removal ran `runc delete` (~7 ms of CPU per spawn on these two
//! cores, issue 13). For a stopped container runc only removes the cgroup directories its
//! `state.json` lists and the state directory itself. Anything less plain (the init still
//! alive, hooks, processes left in the cgroup, the systemd driver's scopes, a state file this
//! code does not understand) is left to runc.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// What [`delete_stopped`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Cgroups and state removed.
    Deleted,
    /// runc has no state for the container.
    Absent,
    /// runc must do it (the reason, for the debug log).
    NeedsRunc(String),
}

/// The part of runc's `state.json` this needs.
#[derive(Debug, Deserialize)]
struct RuncState {
    init_process_pid: i32,
    init_process_start: u64,
    #[serde(default)]
    cgroup_paths: BTreeMap<String, PathBuf>,
    config: RuncConfig,
}

#[derive(Debug, Deserialize)]
struct RuncConfig {
    #[serde(default)]
    hooks: Option<serde_json::Value>,
}

/// Only cgroup directories below the cgroup mount are removed, whatever the file says.
const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Removes the cgroups and the state directory (`<root>/<id>`) of container `id` when its init
/// has exited and nothing else needs runc (see the module doc).
pub fn delete_stopped(root: &Path, id: &str) -> Outcome {
    let dir = root.join(id);
    if !dir.is_dir() {
        return Outcome::Absent;
    }
    let state: RuncState = match std::fs::read(dir.join("state.json"))
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => return Outcome::NeedsRunc(format!("state.json: {e}")),
    };
    if state
        .config
        .hooks
        .as_ref()
        .is_some_and(|h| h.as_object().is_some_and(|o| o.values().any(has_entries)))
    {
        return Outcome::NeedsRunc("hooks".into());
    }
    if start_time(state.init_process_pid) == Some(state.init_process_start) {
        return Outcome::NeedsRunc(format!("init {} is alive", state.init_process_pid));
    }
    // Deepest first: a nested listing never leaves a parent busy.
    let mut paths: Vec<&PathBuf> = state.cgroup_paths.values().collect();
    paths.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    paths.dedup();
    for p in paths {
        if !p.starts_with(CGROUP_ROOT) || p.components().any(|c| c.as_os_str() == "..") {
            return Outcome::NeedsRunc(format!("cgroup path {}", p.display()));
        }
        match std::fs::remove_dir(p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            // Busy (processes left, a child cgroup): runc kills and removes recursively.
            Err(e) => return Outcome::NeedsRunc(format!("rmdir {}: {e}", p.display())),
        }
    }
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Outcome::Deleted,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Outcome::Deleted,
        Err(e) => Outcome::NeedsRunc(format!("remove {}: {e}", dir.display())),
    }
}

/// Whether a hooks entry (`"poststop": [...]`) holds any hook.
fn has_entries(v: &serde_json::Value) -> bool {
    v.as_array().is_some_and(|a| !a.is_empty())
}

/// The start time of process `pid` (clock ticks since boot), as runc records it; `None` when
/// there is no such process.
fn start_time(pid: i32) -> Option<u64> {
    if pid <= 0 {
        return None;
    }
    super::proc_tree::ProcStat::of(pid).map(|p| p.start_time)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(dir: &Path, id: &str, json: &str) {
        std::fs::create_dir_all(dir.join(id)).expect("mkdir");
        std::fs::write(dir.join(id).join("state.json"), json).expect("write");
    }

    #[test]
    fn a_stopped_container_without_cgroups_left_is_deleted_in_process() {
        let tmp = tempfile::tempdir().expect("tmp");
        state(
            tmp.path(),
            "c1",
            r#"{"init_process_pid": 2147483646, "init_process_start": 5,
                "cgroup_paths": {"memory": "/sys/fs/cgroup/memory/bosun-test-absent/c1"},
                "config": {"hooks": null}}"#,
        );
        assert_eq!(delete_stopped(tmp.path(), "c1"), Outcome::Deleted);
        assert!(!tmp.path().join("c1").exists());
        assert_eq!(delete_stopped(tmp.path(), "c1"), Outcome::Absent);
    }

    #[test]
    fn a_live_init_hooks_odd_paths_and_unknown_state_are_left_to_runc() {
        let tmp = tempfile::tempdir().expect("tmp");
        let me = std::process::id() as i32;
        let start = start_time(me).expect("own start time");
        state(
            tmp.path(),
            "alive",
            &format!(
                r#"{{"init_process_pid": {me}, "init_process_start": {start}, "config": {{}}}}"#
            ),
        );
        state(
            tmp.path(),
            "hooks",
            r#"{"init_process_pid": 0, "init_process_start": 0,
                "config": {"hooks": {"poststop": [{"path": "/bin/true"}]}}}"#,
        );
        state(
            tmp.path(),
            "odd",
            r#"{"init_process_pid": 0, "init_process_start": 0,
                "cgroup_paths": {"memory": "/etc/x"}, "config": {}}"#,
        );
        state(tmp.path(), "crun", "not runc's state");
        for id in ["alive", "hooks", "odd", "crun"] {
            assert!(
                matches!(delete_stopped(tmp.path(), id), Outcome::NeedsRunc(_)),
                "{id}"
            );
            assert!(tmp.path().join(id).exists(), "{id} kept for runc");
        }
    }

    #[test]
    fn start_time_reads_past_a_command_with_spaces_and_parens() {
        assert!(start_time(std::process::id() as i32).is_some());
        assert_eq!(start_time(0), None);
    }
}
