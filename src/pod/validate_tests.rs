//! Tests of manifest validation: every error listed by field path, warnings for scheduling fields.

use super::manifest::parse;
use super::validate::{is_dns_label, validate, Report};

fn check(yaml: &str) -> Report {
    let pods = parse("t.yaml", yaml).expect("parse");
    validate(&pods[0])
}

fn paths(r: &Report) -> Vec<String> {
    r.errors.iter().map(|e| e.path.clone()).collect()
}

const GOOD: &str = "
apiVersion: v1
kind: Pod
metadata: {name: web.example, namespace: demo}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 5
  readinessGates: [{conditionType: example.com/lb-ready}]
  volumes:
  - {name: data, emptyDir: {medium: Memory}}
  - {name: host, hostPath: {path: /tmp}}
  - {name: info, downwardAPI: {items: [{path: name, fieldRef: {fieldPath: metadata.name}}]}}
  initContainers:
  - {name: setup, image: busybox, command: ['true']}
  - name: proxy
    image: busybox
    restartPolicy: Always
    startupProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
  containers:
  - name: httpd
    image: busybox
    ports: [{containerPort: 80, name: http, hostPort: 8080}]
    resources: {requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: '1', memory: 64Mi}}
    readinessProbe: {httpGet: {port: http, path: /}, successThreshold: 2}
    livenessProbe: {tcpSocket: {port: 80}, terminationGracePeriodSeconds: 3}
    lifecycle:
      preStop: {sleep: {seconds: 2}}
      postStart: {exec: {command: ['true']}}
    volumeMounts: [{name: data, mountPath: /data}]
  - name: grpc
    image: busybox
    livenessProbe: {grpc: {port: 9090}}
";

#[test]
fn a_full_valid_pod_passes_without_warnings() {
    let r = check(GOOD);
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(r.warnings.is_empty(), "{:?}", r.warnings);
}

#[test]
fn every_error_is_listed_by_path() {
    let r = check(
        "
apiVersion: v1
kind: Pod
metadata: {name: Bad_Name}
spec:
  restartPolicy: Sometimes
  volumes: [{name: v, nfs: {server: x, path: /}}, {name: v, emptyDir: {}}]
  initContainers:
  - {name: init, image: busybox, restartPolicy: OnFailure, livenessProbe: {exec: {command: [x]}}}
  containers:
  - name: app
    image: ''
    ports: [{containerPort: 0, name: TooLongPortName1}, {containerPort: 80, protocol: ICMP}]
    livenessProbe: {periodSeconds: 0, successThreshold: 2}
    readinessProbe: {httpGet: {port: nope}, tcpSocket: {port: 1}, terminationGracePeriodSeconds: 3}
    lifecycle: {preStop: {}, stopSignal: SIGNOPE}
    resources: {requests: {memory: 2Gi}, limits: {memory: 1Gi, cpu: lots}}
    volumeMounts: [{name: missing, mountPath: rel}]
  - {name: app, image: busybox, restartPolicy: Always}
",
    );
    let want = [
        "metadata.name",
        "spec.restartPolicy",
        "spec.volumes[0]",
        "spec.volumes[1].name",
        "spec.initContainers[0].restartPolicy",
        "spec.initContainers[0].livenessProbe",
        "spec.containers[0].image",
        "spec.containers[0].ports[0].containerPort",
        "spec.containers[0].ports[0].name",
        "spec.containers[0].ports[1].protocol",
        "spec.containers[0].livenessProbe",
        "spec.containers[0].livenessProbe.periodSeconds",
        "spec.containers[0].livenessProbe.successThreshold",
        "spec.containers[0].readinessProbe",
        "spec.containers[0].readinessProbe.httpGet.port",
        "spec.containers[0].readinessProbe.terminationGracePeriodSeconds",
        "spec.containers[0].lifecycle.preStop",
        "spec.containers[0].lifecycle.stopSignal",
        "spec.containers[0].resources.limits[cpu]",
        "spec.containers[0].resources.requests[memory]",
        "spec.containers[0].volumeMounts[0].name",
        "spec.containers[0].volumeMounts[0].mountPath",
        "spec.containers[1].name",
        "spec.containers[1].restartPolicy",
    ];
    let mut got = paths(&r);
    got.sort();
    let mut want: Vec<_> = want.iter().map(|s| s.to_string()).collect();
    want.sort();
    assert_eq!(got, want, "{:#?}", r.errors);
    let e = r.into_result("default/Bad_Name").expect_err("invalid");
    assert!(e.message().contains("(24 errors)"), "{}", e.message());
    assert!(
        e.message()
            .contains("spec.volumes[0]: volume type nfs is not supported by bosun"),
        "{}",
        e.message()
    );
}

#[test]
fn scheduling_fields_are_warnings() {
    let r = check(
        "
apiVersion: v1
kind: Pod
metadata: {name: w}
spec:
  nodeName: n1
  nodeSelector: {disk: ssd}
  tolerations: [{key: k, operator: Exists}]
  priorityClassName: high
  containers: [{name: c, image: i}]
",
    );
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    // priorityClassName counts on a standalone node too (admission, preemption, eviction).
    assert_eq!(r.warnings.len(), 3, "{:?}", r.warnings);
    assert!(
        r.warnings[0].contains("spec.nodeName: scheduling field, has no effect on a single node")
    );
    assert!(!r.warnings.iter().any(|w| w.contains("priorityClassName")));
    assert_eq!(r.into_result("default/w").expect("valid").len(), 3);
}

#[test]
fn missing_spec_and_containers() {
    let r = check("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\n");
    assert_eq!(paths(&r), ["spec"]);
    let r = check("apiVersion: v1\nkind: Pod\nmetadata: {name: a}\nspec: {containers: []}\n");
    assert_eq!(paths(&r), ["spec.containers"]);
    let r = check("apiVersion: v1\nkind: Pod\nspec: {containers: [{name: c, image: i}]}\n");
    assert_eq!(paths(&r), ["metadata.name"]);
}

#[test]
fn dns_labels() {
    assert!(is_dns_label("a") && is_dns_label("web-1") && is_dns_label(&"a".repeat(63)));
    for bad in ["", "-a", "a-", "A", "a_b", "a.b", &"a".repeat(64)] {
        assert!(!is_dns_label(bad), "{bad:?}");
    }
}

#[test]
fn own_users_recursive_read_only_and_groups_policy_rules() {
    let r = check(
        "
apiVersion: v1
kind: Pod
metadata: {name: users}
spec:
  hostUsers: false
  hostNetwork: true
  hostPID: true
  securityContext: {supplementalGroupsPolicy: Loose}
  volumes: [{name: v, emptyDir: {}}]
  containers:
  - name: app
    image: busybox
    volumeMounts:
    - {name: v, mountPath: /a, recursiveReadOnly: Enabled}
    - {name: v, mountPath: /b, readOnly: true, recursiveReadOnly: Enabled, mountPropagation: HostToContainer}
    - {name: v, mountPath: /c, readOnly: true, recursiveReadOnly: Sometimes}
    - {name: v, mountPath: /d, readOnly: true, recursiveReadOnly: IfPossible}
    - {name: v, mountPath: /e, recursiveReadOnly: Disabled}
",
    );
    let mut got = paths(&r);
    got.sort();
    assert_eq!(
        got,
        [
            "spec.containers[0].volumeMounts[0].recursiveReadOnly",
            "spec.containers[0].volumeMounts[1].recursiveReadOnly",
            "spec.containers[0].volumeMounts[2].recursiveReadOnly",
            "spec.hostUsers",
            "spec.hostUsers",
            "spec.securityContext.supplementalGroupsPolicy",
        ],
        "{:#?}",
        r.errors
    );
    let msgs: Vec<&str> = r.errors.iter().map(|e| e.message.as_str()).collect();
    for want in [
        "may only be specified when readOnly is true",
        "Enabled may only be specified with mountPropagation None",
        "false is not allowed with hostNetwork: true",
        "false is not allowed with hostPID: true",
        "Merge or Strict",
    ] {
        assert!(
            msgs.iter().any(|m| m.contains(want)),
            "{want:?} in {msgs:#?}"
        );
    }
}
