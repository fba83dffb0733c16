//! Pod priority: the built-in system classes, PriorityClass objects from a directory, `priority`/`priorityClassName`/`preemptionPolicy` resolved as the API server's Priority admission does.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::error::{Error, Result};

/// Pods at or above this priority are critical (the kubelet's SystemCriticalPriority).
pub const SYSTEM_CRITICAL: i32 = 2_000_000_000;
/// The largest value a user-defined PriorityClass may have.
pub const HIGHEST_USER_DEFINABLE: i32 = 1_000_000_000;
/// `preemptionPolicy` when a class names none.
pub const PREEMPT_LOWER: &str = "PreemptLowerPriority";
/// A pod that never preempts.
pub const PREEMPT_NEVER: &str = "Never";

/// One priority class.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Class {
    pub name: String,
    pub value: i32,
    pub global_default: bool,
    pub preemption_policy: String,
}

/// The two classes every cluster has.
pub fn builtin() -> Vec<Class> {
    [
        ("system-node-critical", SYSTEM_CRITICAL + 1000),
        ("system-cluster-critical", SYSTEM_CRITICAL),
    ]
    .into_iter()
    .map(|(name, value)| Class {
        name: name.to_string(),
        value,
        global_default: false,
        preemption_policy: PREEMPT_LOWER.to_string(),
    })
    .collect()
}

/// The built-in classes and every PriorityClass in `dir` (`.yaml`, `.yml`, `.json`; several
/// documents per file). A missing directory has none; a class that breaks the API server's
/// rules (a user class above 1 billion, a `system-` name, a second global default, a name twice)
/// is an error naming its file.
pub fn load(dir: &Path) -> Result<Vec<Class>> {
    let mut classes = builtin();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(classes);
    };
    let mut files: Vec<_> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.extension()
                .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
        })
        .collect();
    files.sort();
    for f in files {
        let shown = f.display().to_string();
        let text = std::fs::read_to_string(&f)
            .map_err(|e| Error::invalid(format!("priority class file {shown}: {e}")))?;
        for doc in serde_yaml_ng::Deserializer::from_str(&text) {
            let v = serde_yaml_ng::Value::deserialize(doc)
                .map_err(|e| Error::invalid(format!("priority class file {shown}: {e}")))?;
            if v.is_null() {
                continue;
            }
            let pc: PriorityClass = serde_yaml_ng::from_value(v)
                .map_err(|e| Error::invalid(format!("priority class file {shown}: {e}")))?;
            classes.push(check(&shown, pc, &classes)?);
        }
    }
    Ok(classes)
}

use serde::Deserialize;

fn check(file: &str, pc: PriorityClass, have: &[Class]) -> Result<Class> {
    let name = pc.metadata.name.clone().unwrap_or_default();
    let bad = |why: String| Error::invalid(format!("priority class file {file}: {why}"));
    if name.is_empty() {
        return Err(bad("a PriorityClass needs metadata.name".into()));
    }
    if name.starts_with("system-") {
        return Err(bad(format!(
            "PriorityClass {name:?}: the system- prefix is reserved for the built-in classes"
        )));
    }
    if pc.value > HIGHEST_USER_DEFINABLE {
        return Err(bad(format!(
            "PriorityClass {name:?}: maximum allowed value of a user defined priority is \
             {HIGHEST_USER_DEFINABLE}"
        )));
    }
    if have.iter().any(|c| c.name == name) {
        return Err(bad(format!("PriorityClass {name:?} is defined twice")));
    }
    let global_default = pc.global_default.unwrap_or(false);
    if global_default {
        if let Some(other) = have.iter().find(|c| c.global_default) {
            return Err(bad(format!(
                "PriorityClass {name:?}: {:?} is already the global default",
                other.name
            )));
        }
    }
    let preemption_policy = pc
        .preemption_policy
        .unwrap_or_else(|| PREEMPT_LOWER.to_string());
    if preemption_policy != PREEMPT_LOWER && preemption_policy != PREEMPT_NEVER {
        return Err(bad(format!(
            "PriorityClass {name:?}: preemptionPolicy must be {PREEMPT_LOWER} or {PREEMPT_NEVER}"
        )));
    }
    Ok(Class {
        name,
        value: pc.value,
        global_default,
        preemption_policy,
    })
}

/// Fills `spec.priority` and `spec.preemptionPolicy` from `spec.priorityClassName` (or the
/// global default class), as the API server's Priority admission plugin does, with its
/// messages for an unknown class or a contradicting value. A standalone node has no API server
/// to fill `priority`, so a pod naming no class (and no global default existing) may set it
/// itself.
pub fn resolve(pod: &mut Pod, classes: &[Class]) -> Result<()> {
    let Some(spec) = pod.spec.as_mut() else {
        return Ok(());
    };
    let named = spec.priority_class_name.clone().filter(|n| !n.is_empty());
    let class = match &named {
        Some(n) => Some(classes.iter().find(|c| &c.name == n).ok_or_else(|| {
            Error::invalid(format!(
                "spec.priorityClassName: no PriorityClass with name {} was found",
                crate::error::echo(n)
            ))
        })?),
        None if spec.priority.is_some() => None,
        None => classes.iter().find(|c| c.global_default),
    };
    let Some(class) = class else {
        if spec.preemption_policy.is_none() {
            spec.preemption_policy = Some(PREEMPT_LOWER.to_string());
        }
        spec.priority = Some(spec.priority.unwrap_or(0));
        return Ok(());
    };
    if let Some(p) = spec.priority.filter(|p| *p != class.value) {
        return Err(Error::invalid(format!(
            "spec.priority: the integer value of priority ({p}) must not be provided in pod \
             spec; priority admission controller computed {} from the given PriorityClass name",
            class.value
        )));
    }
    if let Some(p) = spec
        .preemption_policy
        .as_ref()
        .filter(|p| **p != class.preemption_policy)
    {
        return Err(Error::invalid(format!(
            "spec.preemptionPolicy: the string value of PreemptionPolicy ({}) must not be \
             provided in pod spec; priority admission controller computed {} from the given \
             PriorityClass name",
            crate::error::echo(p),
            class.preemption_policy
        )));
    }
    spec.priority_class_name = Some(class.name.clone());
    spec.priority = Some(class.value);
    spec.preemption_policy = Some(class.preemption_policy.clone());
    Ok(())
}

/// The pod's priority (0 when unset).
pub fn of(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Critical pods (static ones, or priority ≥ [`SYSTEM_CRITICAL`]) are admitted under pressure,
/// may preempt, and are never evicted (the kubelet's IsCriticalPod).
pub fn is_critical(pod: &Pod, is_static: bool) -> bool {
    is_static || of(pod) >= SYSTEM_CRITICAL
}

/// Whether `preemptor` may preempt `victim` (the kubelet's Preemptable): a critical pod any
/// non-critical one, else only a strictly lower priority.
pub fn preemptable(preemptor: (&Pod, bool), victim: (&Pod, bool)) -> bool {
    if is_critical(preemptor.0, preemptor.1) && !is_critical(victim.0, victim.1) {
        return true;
    }
    of(preemptor.0) > of(victim.0)
}

/// Whether the pod may preempt at all (`preemptionPolicy` is not Never).
pub fn may_preempt(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        != Some(PREEMPT_NEVER)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: &str) -> Pod {
        let y = format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers: [{{name: a, image: i}}]\n{spec}"
        );
        crate::pod::manifest::parse("t", &y)
            .expect("parse")
            .remove(0)
    }

    #[test]
    fn builtin_classes_resolve_and_are_critical() {
        let classes = builtin();
        let mut p = pod("  priorityClassName: system-node-critical\n");
        resolve(&mut p, &classes).expect("resolve");
        assert_eq!(of(&p), 2_000_001_000);
        assert!(is_critical(&p, false));
        assert_eq!(
            p.spec
                .as_ref()
                .and_then(|s| s.preemption_policy.clone())
                .as_deref(),
            Some(PREEMPT_LOWER)
        );
        let mut p = pod("  priorityClassName: nope\n");
        let e = resolve(&mut p, &classes).expect_err("unknown");
        assert!(
            e.to_string()
                .contains("no PriorityClass with name nope was found"),
            "{e}"
        );
        let mut p = pod("  priorityClassName: system-cluster-critical\n  priority: 5\n");
        let e = resolve(&mut p, &classes).expect_err("contradiction");
        assert!(
            e.to_string().contains("must not be provided in pod spec"),
            "{e}"
        );
        let mut p = pod("  priority: 7\n");
        resolve(&mut p, &classes).expect("a bare priority stands");
        assert_eq!(of(&p), 7);
        assert!(!is_critical(&p, false));
        assert!(is_critical(&p, true), "static pods are critical");
    }

    #[test]
    fn classes_from_a_directory_with_a_global_default_and_never_preempting() {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\napiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: -5\nglobalDefault: true\npreemptionPolicy: Never\n",
        )
        .expect("write");
        let classes = load(dir.path()).expect("load");
        assert_eq!(classes.len(), 4);
        let mut p = pod("");
        resolve(&mut p, &classes).expect("default");
        assert_eq!(of(&p), -5);
        assert!(!may_preempt(&p));
        assert_eq!(
            p.spec
                .as_ref()
                .and_then(|s| s.priority_class_name.clone())
                .as_deref(),
            Some("low")
        );
        let mut hi = pod("  priorityClassName: high\n");
        resolve(&mut hi, &classes).expect("high");
        assert!(preemptable((&hi, false), (&p, false)));
        assert!(!preemptable((&p, false), (&hi, false)));
        std::fs::write(
            dir.path().join("b.yaml"),
            "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: huge}\nvalue: 1000000001\n",
        )
        .expect("write");
        let e = load(dir.path()).expect_err("too high");
        assert!(e.to_string().contains("b.yaml"), "{e}");
        assert!(e.to_string().contains("maximum allowed value"), "{e}");
    }
}
