//! Tests of container environments: envFrom, $(VAR) expansion, downward and resource refs, ConfigMap/Secret files.

use std::collections::HashMap;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use super::env::{expand, is_key, resolve, EnvFacts, Sources};
use super::manifest::parse;
use super::translate::PodContext;

fn pod(yaml: &str) -> Pod {
    parse("t.yaml", yaml).expect("parse").remove(0)
}

fn sources(dir: &Path) -> Sources {
    Sources {
        configmap_dir: dir.join("cm"),
        secret_dir: dir.join("sec"),
    }
}

fn write(dir: &Path, rel: &str, value: &str) {
    let p = dir.join(rel);
    std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
    std::fs::write(p, value).expect("write");
}

const FACTS: EnvFacts<'static> = EnvFacts {
    pod_ip: Some("10.1.2.3"),
    host_ip: "192.168.1.5",
    node_name: "node-a",
};

fn env_of(p: &Pod, dir: &Path) -> crate::error::Result<Vec<(String, String)>> {
    let ctx = PodContext {
        pod: p,
        uid: "u-1",
        attempt: 0,
        log_dir: Path::new("/l"),
        source: "api",
    };
    let c = &p.spec.as_ref().expect("spec").containers[0];
    Ok(resolve(&ctx, c, &FACTS, &sources(dir))?
        .into_iter()
        .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
        .collect())
}

#[test]
fn expansion_rules() {
    let known: HashMap<&str, &[u8]> = [("A", b"x".as_slice()), ("B", b"y".as_slice())].into();
    let e = |s: &str| String::from_utf8(expand(s, &known)).expect("utf8");
    assert_eq!(e("$(A)-$(B)"), "x-y");
    assert_eq!(e("$$(A)"), "$(A)", "$$ escapes");
    assert_eq!(e("$(C)"), "$(C)", "unknown references stay");
    assert_eq!(e("$(A"), "$(A", "unterminated stays");
    assert_eq!(e("a$b$"), "a$b$");
    assert!(is_key("a.b-c_d") && !is_key("..") && !is_key("a/b") && !is_key(""));
}

#[test]
fn env_from_values_refs_and_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    write(dir.path(), "cm/ns/cfg/color", "blue");
    write(dir.path(), "cm/ns/cfg/bad key", "ignored");
    write(dir.path(), "sec/ns/creds/password", "s3cret");
    let p = pod("
apiVersion: v1
kind: Pod
metadata: {name: p, namespace: ns, labels: {tier: db}, annotations: {owner: me}}
spec:
  serviceAccountName: robot
  containers:
  - name: a
    image: i
    resources: {limits: {cpu: 1500m, memory: 128Mi}, requests: {memory: 64Mi}}
    envFrom:
    - {prefix: CM_, configMapRef: {name: cfg}}
    - {secretRef: {name: nothing, optional: true}}
    env:
    - {name: CM_color, value: overridden-$(CM_color)}
    - {name: PW, valueFrom: {secretKeyRef: {name: creds, key: password}}}
    - {name: OPT, valueFrom: {configMapKeyRef: {name: cfg, key: missing, optional: true}}}
    - {name: NAME, valueFrom: {fieldRef: {fieldPath: metadata.name}}}
    - {name: NS, valueFrom: {fieldRef: {fieldPath: metadata.namespace}}}
    - {name: UID, valueFrom: {fieldRef: {fieldPath: metadata.uid}}}
    - {name: TIER, valueFrom: {fieldRef: {fieldPath: \"metadata.labels['tier']\"}}}
    - {name: OWNER, valueFrom: {fieldRef: {fieldPath: \"metadata.annotations['owner']\"}}}
    - {name: NODE, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}
    - {name: SA, valueFrom: {fieldRef: {fieldPath: spec.serviceAccountName}}}
    - {name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}
    - {name: HOST, valueFrom: {fieldRef: {fieldPath: status.hostIP}}}
    - {name: CPU, valueFrom: {resourceFieldRef: {resource: limits.cpu}}}
    - {name: MCPU, valueFrom: {resourceFieldRef: {resource: limits.cpu, divisor: 1m}}}
    - {name: MEM_MI, valueFrom: {resourceFieldRef: {resource: requests.memory, divisor: 1Mi}}}
    - {name: EMPTY}
");
    let env = env_of(&p, dir.path()).expect("env");
    let get = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
    assert_eq!(env[0].0, "CM_color", "envFrom first, overridden in place");
    assert_eq!(get("CM_color"), Some("overridden-blue"));
    assert_eq!(get("PW"), Some("s3cret"));
    assert_eq!(get("OPT"), None, "an optional missing key sets nothing");
    assert_eq!(get("NAME"), Some("p"));
    assert_eq!(get("NS"), Some("ns"));
    assert_eq!(get("UID"), Some("u-1"));
    assert_eq!(get("TIER"), Some("db"));
    assert_eq!(get("OWNER"), Some("me"));
    assert_eq!(get("NODE"), Some("node-a"));
    assert_eq!(get("SA"), Some("robot"));
    assert_eq!(get("IP"), Some("10.1.2.3"));
    assert_eq!(get("HOST"), Some("192.168.1.5"));
    assert_eq!(get("CPU"), Some("2"), "cores round up");
    assert_eq!(get("MCPU"), Some("1500"));
    assert_eq!(get("MEM_MI"), Some("64"));
    assert_eq!(get("EMPTY"), Some(""));
    assert!(get("CM_bad key").is_none());
}

#[test]
fn missing_required_sources_name_the_variable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let with_env = |env: &str| {
        pod(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: p}}\nspec:\n  containers:\n  - name: a\n    image: i\n{env}"
        ))
    };
    let e = env_of(
        &with_env("    env: [{name: KEY, valueFrom: {configMapKeyRef: {name: cfg, key: k}}}]\n"),
        dir.path(),
    )
    .expect_err("missing configmap");
    assert!(
        e.to_string().contains("env KEY") && e.to_string().contains("cfg"),
        "{e}"
    );
    let e = env_of(
        &with_env("    envFrom: [{secretRef: {name: creds}}]\n"),
        dir.path(),
    )
    .expect_err("missing secret");
    assert!(e.to_string().contains("secret default/creds"), "{e}");
    let e = env_of(
        &with_env("    env: [{name: X, valueFrom: {fieldRef: {fieldPath: spec.bogus}}}]\n"),
        dir.path(),
    )
    .expect_err("bad field");
    assert!(
        e.to_string().contains("env X") && e.to_string().contains("spec.bogus"),
        "{e}"
    );
}

#[test]
fn host_network_pods_report_the_host_ip_as_pod_ip() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = pod("
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  hostNetwork: true
  containers:
  - {name: a, image: i, env: [{name: IP, valueFrom: {fieldRef: {fieldPath: status.podIP}}}]}
");
    let env = env_of(&p, dir.path()).expect("env");
    assert_eq!(env, [("IP".to_string(), "192.168.1.5".to_string())]);
}
