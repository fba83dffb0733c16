//! Static pods: a watched manifest directory; added, changed or removed files create, replace or delete pods.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::worker::Msg;
use super::{lock, Supervisor};

/// The annotation naming a static pod's file.
pub const CONFIG_FILE: &str = "io.bosun.pod.config.file";

/// How often the directory is scanned (the kubelet's file source checks every 20 s and on
/// inotify; a 2 s scan of a small directory costs nothing and needs no watcher).
const SCAN: Duration = Duration::from_secs(2);

/// Starts the watcher.
pub fn spawn(sup: Arc<Supervisor>) {
    tokio::spawn(async move {
        let dir = sup.sh.config.pod.manifest_dir.clone();
        let mut seen: HashMap<PathBuf, String> = HashMap::new();
        loop {
            scan(&sup, &dir, &mut seen);
            tokio::time::sleep(SCAN).await;
        }
    });
}

pub(super) fn manifest_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.is_file()
                && !p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'))
                && matches!(
                    p.extension().and_then(|e| e.to_str()),
                    Some("yaml" | "yml" | "json")
                )
        })
        .collect();
    files.sort();
    files
}

/// One pass: applies new and changed files, deletes the pods of removed ones (and pods a
/// changed file no longer lists). An invalid file is logged and its pods are left as they are.
fn scan(sup: &Supervisor, dir: &Path, seen: &mut HashMap<PathBuf, String>) {
    let files = manifest_files(dir);
    for f in &files {
        let Ok(text) = std::fs::read_to_string(f) else {
            continue;
        };
        if seen.get(f) == Some(&text) {
            continue;
        }
        let source = f.display().to_string();
        match Supervisor::check(&text, &source)
            .and_then(|(mut pods, w)| sup.prioritize(&mut pods, &source).map(|()| (pods, w)))
        {
            Ok((pods, warnings)) => {
                for w in warnings {
                    tracing::warn!(file = %source, "{w}");
                }
                let keep: Vec<(String, String)> = pods
                    .iter()
                    .map(|p| {
                        (
                            p.metadata
                                .namespace
                                .clone()
                                .unwrap_or_else(|| "default".into()),
                            p.metadata.name.clone().unwrap_or_default(),
                        )
                    })
                    .collect();
                for (ns, name) in sup.pods_of_file(f) {
                    if !keep.contains(&(ns.clone(), name.clone())) {
                        sup.delete_quietly(&ns, &name);
                    }
                }
                for a in sup.apply_pods(pods, "file", Some(f.clone())) {
                    tracing::info!(file = %source, pod = %format!("{}/{}", a.namespace, a.name), action = a.action.as_str(), "static pod");
                }
            }
            Err(e) => tracing::warn!(file = %source, error = %e, "static pod manifest rejected"),
        }
        seen.insert(f.clone(), text);
    }
    let gone: Vec<PathBuf> = seen
        .keys()
        .filter(|p| !files.contains(p))
        .cloned()
        .collect();
    for f in gone {
        seen.remove(&f);
    }
    // Pods whose file is gone (also while the daemon was down).
    for (ns, name) in sup.static_pods_without(&files) {
        tracing::info!(pod = %format!("{ns}/{name}"), "static pod file removed: deleting the pod");
        sup.delete_quietly(&ns, &name);
    }
}

impl Supervisor {
    /// Live pods that came from static pod file `file`.
    pub(crate) fn pods_of_file(&self, file: &std::path::Path) -> Vec<(String, String)> {
        let live = lock(&self.sh.live);
        live.iter()
            .filter(|(_, h)| {
                h.view.borrow().source == "file"
                    && h.view
                        .borrow()
                        .pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(CONFIG_FILE))
                        .is_some_and(|f| std::path::Path::new(f) == file)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Live static pods (not yet terminating) whose file is not among `files`.
    pub(crate) fn static_pods_without(&self, files: &[PathBuf]) -> Vec<(String, String)> {
        let live = lock(&self.sh.live);
        live.iter()
            .filter(|(_, h)| {
                let v = h.view.borrow();
                v.source == "file"
                    && v.pod.metadata.deletion_timestamp.is_none()
                    && v.pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(CONFIG_FILE))
                        .is_some_and(|f| !files.iter().any(|x| x == std::path::Path::new(f)))
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Starts deleting a live pod with its own grace.
    pub(crate) fn delete_quietly(&self, namespace: &str, name: &str) {
        if let Ok((tx, _)) = self.handle(namespace, name) {
            let (rtx, _) = oneshot::channel();
            let _ = tx.send(Msg::Delete {
                grace: None,
                force: false,
                reply: rtx,
            });
        }
    }
}
