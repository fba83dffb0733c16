//! Applying pods: whole-text checks, priorities, and a worker per new or changed pod.

use std::collections::BTreeMap;
use std::path::PathBuf;

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::oneshot;

use super::record::Record;
use super::worker::Msg;
use super::{fingerprint, lock, new_uid, static_pods, status, Supervisor};
use crate::error::{Error, Result};
use crate::pod::api::{Applied, ApplyAction};
use crate::pod::{labels, manifest, validate};

impl Supervisor {
    /// Applies `pods` from `source` (`api`, or `file` with the file's path).
    pub(crate) fn apply_pods(
        &self,
        pods: Vec<Pod>,
        source: &str,
        file: Option<PathBuf>,
    ) -> Vec<Applied> {
        let mut out = Vec::new();
        for mut pod in pods {
            let ns = pod
                .metadata
                .namespace
                .clone()
                .filter(|n| !n.is_empty())
                .unwrap_or_else(|| "default".into());
            pod.metadata.namespace = Some(ns.clone());
            let name = pod.metadata.name.clone().unwrap_or_default();
            let fp = fingerprint(&pod);
            let key = (ns.clone(), name.clone());
            let (action, predecessor) = {
                let live = lock(&self.sh.live);
                match live.get(&key) {
                    Some(h) if h.fingerprint == fp => {
                        out.push(Applied {
                            namespace: ns,
                            name,
                            uid: h.uid.clone(),
                            action: ApplyAction::Unchanged,
                        });
                        continue;
                    }
                    Some(h) => {
                        let (rtx, _) = oneshot::channel();
                        let _ = h.tx.send(Msg::Delete {
                            grace: None,
                            force: false,
                            reply: rtx,
                        });
                        (ApplyAction::Replaced, Some((h.uid.clone(), h.done.clone())))
                    }
                    None => (ApplyAction::Created, None),
                }
            };
            let uid = new_uid();
            let now = crate::runtime::status::now_ns();
            pod.metadata.uid = Some(uid.clone());
            pod.metadata.creation_timestamp = status::time(now);
            pod.metadata.deletion_timestamp = None;
            pod.metadata.deletion_grace_period_seconds = None;
            pod.status = None;
            let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
            annotations.insert(labels::CONFIG_SOURCE.to_string(), source.to_string());
            if let Some(f) = &file {
                annotations.insert(
                    static_pods::CONFIG_FILE.to_string(),
                    f.display().to_string(),
                );
            }
            pod.metadata.annotations = Some(annotations);
            let rec = Record {
                pod,
                source: source.to_string(),
                file: file.clone(),
                created_ns: now,
                deletion: None,
                gates: BTreeMap::new(),
                conditions: BTreeMap::new(),
                finished: false,
                admitted: false,
                failure: None,
                replaces: predecessor.as_ref().map(|(u, _)| u.clone()),
            };
            if let Err(e) = rec.save(&self.sh.pods_dir) {
                tracing::error!(pod = %rec.key(), error = %e, "save pod record");
                continue;
            }
            self.spawn(rec, predecessor.map(|(_, d)| d), fp, true);
            out.push(Applied {
                namespace: ns,
                name,
                uid,
                action,
            });
        }
        out
    }

    /// Parses and validates `text` whole: every error of every pod, or the pods and warnings.
    pub(crate) fn check(text: &str, source: &str) -> Result<(Vec<Pod>, Vec<String>)> {
        let (pods, mut errors) = manifest::parse_all(source, text);
        let mut warnings = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for p in &pods {
            let ns = p
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            let name = p.metadata.name.clone().unwrap_or_default();
            if !seen.insert((ns.clone(), name.clone())) {
                errors.push(format!("pod {ns}/{name}: appears twice in {source}"));
            }
            match validate::validate(p).into_result(&format!("{ns}/{name}")) {
                Ok(w) => warnings.extend(w.into_iter().map(|w| format!("pod {ns}/{name}: {w}"))),
                Err(e) => errors.push(e.message().to_string()),
            }
        }
        if !errors.is_empty() {
            return Err(Error::invalid(format!(
                "{source}: nothing applied: {}",
                errors.join("\n")
            )));
        }
        Ok((pods, warnings))
    }

    /// Fills each pod's `priority` and `preemptionPolicy` from its `priorityClassName` (the
    /// built-in classes and those in `[node] priority_class_dir`), as the API server does;
    /// every pod's error, or none applied.
    pub(crate) fn prioritize(&self, pods: &mut [Pod], source: &str) -> Result<()> {
        let classes = crate::pod::node::priority::load(&self.sh.config.node.priority_class_dir)?;
        let mut errors = Vec::new();
        for p in pods.iter_mut() {
            if let Err(e) = crate::pod::node::priority::resolve(p, &classes) {
                let ns = p.metadata.namespace.as_deref().unwrap_or("default");
                let name = p.metadata.name.as_deref().unwrap_or_default();
                errors.push(format!("pod {ns}/{name}: {}", e.message()));
            }
        }
        if !errors.is_empty() {
            return Err(Error::invalid(format!(
                "{source}: nothing applied: {}",
                errors.join("\n")
            )));
        }
        Ok(())
    }
}
