//! Pod manifests in, as Kubernetes Pod objects: YAML or JSON, several documents, kind Pod only.

use k8s_openapi::api::core::v1::Pod;
use serde::Deserialize;

use crate::error::{Error, Result};

/// The Pods of `text` (YAML or JSON; `---`-separated documents; `kind: List` of Pods too).
/// Empty documents are skipped. Any other kind or apiVersion, or a document that is not a
/// valid Pod, fails the whole input: `source` and the document's number name the culprit.
pub fn parse(source: &str, text: &str) -> Result<Vec<Pod>> {
    let (pods, errors) = parse_all(source, text);
    if !errors.is_empty() {
        return Err(Error::invalid(errors.join("\n")));
    }
    Ok(pods)
}

/// Every Pod of `text` that could be read, and one error per document that could not (so a
/// caller can report everything wrong with a text at once).
pub fn parse_all(source: &str, text: &str) -> (Vec<Pod>, Vec<String>) {
    let mut pods = Vec::new();
    let mut errors = Vec::new();
    for (i, doc) in serde_yaml_ng::Deserializer::from_str(text).enumerate() {
        let at = || format!("{source}: document {}", i + 1);
        let value = match serde_yaml_ng::Value::deserialize(doc) {
            Ok(v) => v,
            Err(e) => {
                errors.push(format!("{}: not YAML or JSON: {e}", at()));
                // The parser cannot resynchronise after a syntax error.
                break;
            }
        };
        if value.is_null() {
            continue;
        }
        if let Err(e) = collect(&at(), value, &mut pods) {
            errors.push(e.message().to_string());
        }
    }
    if pods.is_empty() && errors.is_empty() {
        errors.push(format!("{source}: no Pod in it"));
    }
    (pods, errors)
}

/// Adds the Pod (or a List's Pods) of one document to `pods`.
fn collect(at: &str, mut value: serde_yaml_ng::Value, pods: &mut Vec<Pod>) -> Result<()> {
    let field = |name: &str| {
        value
            .get(name)
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    match (api_version.as_str(), kind.as_str()) {
        ("v1", "Pod") => {
            octal_modes(&mut value);
            let pod: Pod = serde_yaml_ng::from_value(value)
                .map_err(|e| Error::invalid(format!("{at}: not a valid Pod: {e}")))?;
            pods.push(pod);
            Ok(())
        }
        ("v1", "List") => {
            let items = match value.get("items") {
                Some(serde_yaml_ng::Value::Sequence(items)) => items.clone(),
                None | Some(serde_yaml_ng::Value::Null) => Vec::new(),
                Some(_) => return Err(Error::invalid(format!("{at}: List items is not a list"))),
            };
            for (j, item) in items.into_iter().enumerate() {
                collect(&format!("{at}, item {}", j + 1), item, pods)?;
            }
            Ok(())
        }
        (_, "") => Err(Error::invalid(format!("{at}: kind is missing"))),
        (_, "Pod" | "List") => Err(Error::invalid(format!(
            "{at}: apiVersion {api_version:?} is not supported for {kind}: use v1"
        ))),
        _ => Err(Error::invalid(format!(
            "{at}: kind {kind} is not supported: bosun runs Pods (apiVersion v1, kind Pod) on \
             this node; controllers such as Deployments need a cluster"
        ))),
    }
}

/// File modes written the YAML 1.1 way (`mode: 0644`, as kubectl reads them) are strings to a
/// YAML 1.2 parser: turn `0644` and `0o644` under `mode`/`defaultMode` keys into numbers.
fn octal_modes(v: &mut serde_yaml_ng::Value) {
    match v {
        serde_yaml_ng::Value::Mapping(m) => {
            for (k, val) in m.iter_mut() {
                let is_mode = matches!(k.as_str(), Some("mode" | "defaultMode"));
                if let (true, serde_yaml_ng::Value::String(s)) = (is_mode, &*val) {
                    let digits = s.strip_prefix("0o").or_else(|| s.strip_prefix('0'));
                    if let Some(n) = digits
                        .filter(|d| !d.is_empty())
                        .and_then(|d| i64::from_str_radix(d, 8).ok())
                    {
                        *val = serde_yaml_ng::Value::Number(n.into());
                        continue;
                    }
                }
                octal_modes(val);
            }
        }
        serde_yaml_ng::Value::Sequence(items) => items.iter_mut().for_each(octal_modes),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_1_1_octal_modes_are_numbers() {
        let pods = parse(
            "t",
            "apiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers: [{name: a, image: i}]\n  volumes:\n  - name: v\n    configMap: {name: c, defaultMode: 0644, items: [{key: k, path: k, mode: 0o600}]}\n",
        )
        .expect("parse");
        let cm = pods[0]
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .and_then(|v| v[0].config_map.clone())
            .expect("configMap");
        assert_eq!(cm.default_mode, Some(0o644));
        assert_eq!(cm.items.expect("items")[0].mode, Some(0o600));
    }

    const WEB: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: web
spec:
  containers:
  - name: httpd
    image: busybox
    ports: [{containerPort: 80, name: http}]
    readinessProbe: {httpGet: {port: http, path: /}}
";

    #[test]
    fn yaml_json_several_documents_and_lists() {
        let text = format!(
            "{WEB}---\n---\n{}\n---\n{}",
            r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"j"},"spec":{"containers":[{"name":"c","image":"i"}]}}"#,
            "apiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: Pod, metadata: {name: l}}\n"
        );
        let pods = parse("f.yaml", &text).expect("parse");
        let names: Vec<_> = pods
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(names, ["web", "j", "l"]);
        let spec = pods[0].spec.as_ref().expect("spec");
        let probe = spec.containers[0].readiness_probe.as_ref().expect("probe");
        assert!(probe.http_get.is_some());
    }

    #[test]
    fn other_kinds_and_bad_documents_name_the_culprit() {
        let deploy =
            format!("{WEB}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: d}}\n");
        let e = parse("app.yaml", &deploy).expect_err("a Deployment");
        assert!(
            e.message()
                .contains("app.yaml: document 2: kind Deployment is not supported"),
            "{}",
            e.message()
        );
        let e = parse("x", "apiVersion: v2\nkind: Pod\n").expect_err("v2");
        assert!(e.message().contains("apiVersion \"v2\""), "{}", e.message());
        let e = parse("x", "metadata: {name: a}\n").expect_err("no kind");
        assert!(e.message().contains("kind is missing"), "{}", e.message());
        let e = parse("x", "apiVersion: v1\nkind: Pod\nspec: {containers: 3}\n").expect_err("bad");
        assert!(
            e.message().contains("document 1: not a valid Pod"),
            "{}",
            e.message()
        );
        let e = parse("x", "a: [\n").expect_err("syntax");
        assert!(e.message().contains("not YAML or JSON"), "{}", e.message());
        let e = parse("empty.yaml", "---\n").expect_err("empty");
        assert!(e.message().contains("no Pod"), "{}", e.message());
    }
}
