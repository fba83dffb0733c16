//! Tests of the manifest → CRI translation: kubelet labels, hostname, DNS, ports, namespaces, security, resources, stop signal.

use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use super::labels;
use super::manifest::parse;
use super::translate::{
    container_request, dns, parse_resolv, sandbox_request, ContainerKind, PodContext,
};
use crate::oci::request::{NamespaceMode, SecurityProfile, SupplementalGroupsPolicy};

fn pod(yaml: &str) -> Pod {
    parse("t.yaml", yaml).expect("parse").remove(0)
}

fn ctx(p: &Pod) -> PodContext<'_> {
    PodContext {
        pod: p,
        uid: "uid-1",
        attempt: 2,
        log_dir: Path::new("/var/log/pods"),
        source: "api",
    }
}

const BASE: &str = "
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: shop
  labels: {app: web}
  annotations: {note: x}
spec:
  terminationGracePeriodSeconds: 7
  containers:
  - name: app
    image: busybox
    command: [sh, -c]
    args: [echo $(GREETING) $$(GREETING)]
    workingDir: /srv
    ports: [{name: http, containerPort: 80, hostPort: 8080}, {containerPort: 81}]
    lifecycle:
      preStop: {exec: {command: [sleep, '1']}}
      stopSignal: SIGUSR1
";

#[test]
fn sandbox_carries_kubelet_labels_hostname_ports_and_log_dir() {
    let p = pod(BASE);
    let s = sandbox_request(&ctx(&p)).expect("sandbox");
    assert_eq!(s.pod.name, "web");
    assert_eq!(s.pod.namespace, "shop");
    assert_eq!(s.pod.uid, "uid-1");
    assert_eq!(s.pod.attempt, 2);
    assert_eq!(s.hostname, "web");
    assert_eq!(s.log_directory, "/var/log/pods/shop_web_uid-1");
    assert_eq!(s.labels.get("app").map(String::as_str), Some("web"));
    assert_eq!(
        s.labels.get(labels::POD_NAME).map(String::as_str),
        Some("web")
    );
    assert_eq!(
        s.labels.get(labels::POD_UID).map(String::as_str),
        Some("uid-1")
    );
    assert_eq!(
        s.labels.get(labels::SUPERVISED).map(String::as_str),
        Some(labels::SUPERVISED_VALUE)
    );
    assert_eq!(
        s.annotations.get(labels::CONFIG_SOURCE).map(String::as_str),
        Some("api")
    );
    assert_eq!(s.annotations.get("note").map(String::as_str), Some("x"));
    assert_eq!(s.port_mappings.len(), 1, "only ports with a hostPort map");
    assert_eq!(s.port_mappings[0].host_port, 8080);
    assert_eq!(s.port_mappings[0].container_port, 80);
    assert_eq!(s.port_mappings[0].protocol, "TCP");
    assert_eq!(s.network, NamespaceMode::Pod);
    assert_eq!(s.pid, NamespaceMode::Container);
    assert_eq!(s.ipc, NamespaceMode::Pod);
    assert!(s.dns.is_none(), "no dnsConfig: the host's resolv.conf");
}

#[test]
fn hostname_rules_and_host_namespaces() {
    let p = pod(&BASE.replace(
        "  terminationGracePeriodSeconds: 7\n",
        "  hostname: custom-\n  shareProcessNamespace: true\n  hostIPC: true\n",
    ));
    let s = sandbox_request(&ctx(&p)).expect("sandbox");
    assert_eq!(s.hostname, "custom", "trailing dashes are cut");
    assert_eq!(s.pid, NamespaceMode::Pod);
    assert_eq!(s.ipc, NamespaceMode::Node);
    let p = pod(&BASE.replace(
        "  terminationGracePeriodSeconds: 7\n",
        "  hostNetwork: true\n  hostPID: true\n",
    ));
    let s = sandbox_request(&ctx(&p)).expect("sandbox");
    assert_eq!(s.hostname, "", "host network keeps the node's name");
    assert_eq!(s.network, NamespaceMode::Node);
    assert_eq!(s.pid, NamespaceMode::Node);
    let long = "a".repeat(70);
    let p = pod(&BASE.replace("name: web\n", &format!("name: {long}\n")));
    assert_eq!(
        sandbox_request(&ctx(&p)).expect("sandbox").hostname.len(),
        63
    );
}

#[test]
fn dns_policies_merge_dns_config() {
    let dir = tempfile::tempdir().expect("tempdir");
    let resolv = dir.path().join("resolv.conf");
    std::fs::write(
        &resolv,
        "nameserver 10.0.0.1\nsearch corp.example\noptions ndots:2 rotate\n",
    )
    .expect("write");
    let with = |policy: &str, cfg: &str| {
        let p = pod(&BASE.replace(
            "  terminationGracePeriodSeconds: 7\n",
            &format!("  dnsPolicy: {policy}\n{cfg}"),
        ));
        dns(p.spec.as_ref().expect("spec"), &resolv).expect("dns")
    };
    assert_eq!(with("ClusterFirst", ""), None);
    assert_eq!(with("Default", ""), None);
    let d = with(
        "Default",
        "  dnsConfig: {nameservers: [1.1.1.1], searches: [a.example], options: [{name: ndots, value: '5'}, {name: edns0}]}\n",
    )
    .expect("merged");
    assert_eq!(d.servers, ["10.0.0.1", "1.1.1.1"]);
    assert_eq!(d.searches, ["corp.example", "a.example"]);
    assert_eq!(d.options, ["rotate", "ndots:5", "edns0"]);
    let none = with("None", "  dnsConfig: {nameservers: [9.9.9.9]}\n").expect("none");
    assert_eq!(none.servers, ["9.9.9.9"]);
    assert!(none.searches.is_empty());
    let p = pod(&BASE.replace(
        "  terminationGracePeriodSeconds: 7\n",
        "  dnsPolicy: Bogus\n",
    ));
    assert!(dns(p.spec.as_ref().expect("spec"), &resolv).is_err());
    let r = parse_resolv("# c\nnameserver 1.2.3.4\ndomain x.y\n");
    assert_eq!(r.servers, ["1.2.3.4"]);
    assert_eq!(r.searches, ["x.y"]);
}

#[test]
fn container_request_has_kubelet_annotations_expansion_and_stop_signal() {
    let p = pod(BASE);
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let envs = vec![("GREETING".to_string(), b"hi".to_vec())];
    let n = container_request(&ctx(&p), ContainerKind::App, c, 3, Vec::new(), envs, None)
        .expect("request");
    assert_eq!(n.attempt, 3);
    assert_eq!(n.log_path, "app/3.log");
    let r = &n.request;
    assert_eq!(r.name, "app");
    assert_eq!(r.command, ["sh", "-c"]);
    assert_eq!(
        r.args,
        ["echo hi $(GREETING)"],
        "$(VAR) expanded, $$ escapes"
    );
    assert_eq!(r.working_dir.as_deref(), Some("/srv"));
    assert_eq!(r.stop_signal, Some(libc::SIGUSR1));
    assert_eq!(
        r.labels.get(labels::CONTAINER_NAME).map(String::as_str),
        Some("app")
    );
    assert_eq!(
        r.labels.get(labels::CONTAINER_KIND).map(String::as_str),
        Some("app")
    );
    assert_eq!(
        r.labels.get(labels::SUPERVISED).map(String::as_str),
        Some("true")
    );
    let a = &r.annotations;
    assert_eq!(
        a.get(labels::CONTAINER_RESTART_COUNT).map(String::as_str),
        Some("3")
    );
    assert_eq!(
        a.get(labels::TERMINATION_MESSAGE_PATH).map(String::as_str),
        Some("/dev/termination-log")
    );
    assert_eq!(
        a.get(labels::POD_TERMINATION_GRACE_PERIOD)
            .map(String::as_str),
        Some("7")
    );
    assert!(a
        .get(labels::CONTAINER_PORTS)
        .is_some_and(|p| p.contains("\"containerPort\":80")));
    assert!(a
        .get(labels::CONTAINER_PRE_STOP_HANDLER)
        .is_some_and(|h| h.contains("sleep")));
    let hash = a.get(labels::CONTAINER_HASH).cloned().expect("hash");
    assert_eq!(hash.len(), 8);
    let again = container_request(
        &ctx(&p),
        ContainerKind::App,
        c,
        0,
        Vec::new(),
        Vec::new(),
        None,
    )
    .expect("request");
    assert_eq!(
        again.request.annotations.get(labels::CONTAINER_HASH),
        Some(&hash),
        "the hash depends on the spec only"
    );
    let bad = pod(&BASE.replace("stopSignal: SIGUSR1", "stopSignal: SIGNOPE"));
    let c = &bad.spec.as_ref().expect("spec").containers[0];
    let e = container_request(&ctx(&bad), ContainerKind::App, c, 0, vec![], vec![], None)
        .expect_err("bad signal");
    assert!(e.to_string().contains("stopSignal"), "{e}");
}

#[test]
fn security_context_merges_pod_and_container() {
    let p = pod("
apiVersion: v1
kind: Pod
metadata: {name: sec}
spec:
  securityContext:
    runAsUser: 1000
    runAsGroup: 2000
    fsGroup: 3000
    supplementalGroups: [4000]
    seccompProfile: {type: RuntimeDefault}
    sysctls: [{name: net.ipv4.ip_forward, value: '1'}]
  containers:
  - name: a
    image: busybox
    securityContext:
      runAsUser: 1001
      readOnlyRootFilesystem: true
      allowPrivilegeEscalation: false
      capabilities: {add: [NET_ADMIN], drop: [ALL]}
      seccompProfile: {type: Localhost, localhostProfile: profiles/a.json}
  - name: b
    image: busybox
    securityContext: {privileged: true, procMount: Unmasked}
");
    let spec = p.spec.as_ref().expect("spec");
    let s = sandbox_request(&ctx(&p)).expect("sandbox");
    assert!(
        s.privileged,
        "a privileged container makes a privileged sandbox"
    );
    assert_eq!(
        s.sysctls.get("net.ipv4.ip_forward").map(String::as_str),
        Some("1")
    );
    let a = container_request(
        &ctx(&p),
        ContainerKind::App,
        &spec.containers[0],
        0,
        vec![],
        vec![],
        None,
    )
    .expect("a")
    .request
    .linux
    .security;
    assert_eq!(a.run_as_user, Some(1001));
    assert_eq!(a.run_as_group, Some(2000));
    assert_eq!(a.supplemental_groups, [4000, 3000]);
    assert!(a.readonly_rootfs && a.no_new_privs && !a.privileged);
    assert_eq!(a.capabilities.add, ["NET_ADMIN"]);
    assert_eq!(a.capabilities.drop, ["ALL"]);
    assert_eq!(
        a.seccomp,
        SecurityProfile::Localhost("/var/lib/kubelet/seccomp/profiles/a.json".into())
    );
    assert_eq!(a.apparmor, SecurityProfile::RuntimeDefault);
    assert!(a.masked_paths.is_none());
    let b = container_request(
        &ctx(&p),
        ContainerKind::App,
        &spec.containers[1],
        0,
        vec![],
        vec![],
        None,
    )
    .expect("b")
    .request
    .linux
    .security;
    assert!(b.privileged && !b.no_new_privs);
    assert_eq!(
        b.seccomp,
        SecurityProfile::RuntimeDefault,
        "the pod's profile"
    );
    assert_eq!(b.masked_paths, Some(vec![]), "procMount Unmasked");

    let root = pod("
apiVersion: v1
kind: Pod
metadata: {name: root}
spec:
  securityContext: {runAsNonRoot: true}
  containers: [{name: a, image: busybox, securityContext: {runAsUser: 0}}]
");
    let c = &root.spec.as_ref().expect("spec").containers[0];
    let e = container_request(&ctx(&root), ContainerKind::App, c, 0, vec![], vec![], None)
        .expect_err("root with runAsNonRoot");
    assert!(e.to_string().contains("runAsNonRoot"), "{e}");
}

#[test]
fn run_as_non_root_is_checked_against_the_image_user_like_the_kubelet() {
    use k8s_openapi::api::core::v1::{PodSecurityContext, SecurityContext};
    let pod = PodSecurityContext {
        run_as_non_root: Some(true),
        ..Default::default()
    };
    let check = |c: Option<&SecurityContext>, user: Option<&str>| {
        super::translate::verify_non_root(Some(&pod), c, user)
    };
    for root in [None, Some(""), Some("0"), Some("0:0"), Some("0:1000")] {
        let e = check(None, root).expect_err("root image");
        assert!(e.contains("image will run as root"), "{root:?}: {e}");
    }
    let e = check(None, Some("app:app")).expect_err("a name");
    assert!(e.contains("non-numeric user (app)"), "{e}");
    assert!(check(None, Some("1000")).is_ok());
    assert!(
        check(None, Some("1000:0")).is_ok(),
        "the group does not matter"
    );
    // runAsUser decides when set; the container's runAsNonRoot false overrides the pod's.
    let as_user = SecurityContext {
        run_as_user: Some(1000),
        ..Default::default()
    };
    assert!(check(Some(&as_user), None).is_ok());
    let allowed = SecurityContext {
        run_as_non_root: Some(false),
        ..Default::default()
    };
    assert!(check(Some(&allowed), None).is_ok());
    assert!(
        super::translate::verify_non_root(None, None, None).is_ok(),
        "not asked"
    );
}

#[test]
fn resources_follow_the_qos_class() {
    let p = pod("
apiVersion: v1
kind: Pod
metadata: {name: g}
spec:
  containers:
  - {name: a, image: busybox, resources: {limits: {cpu: 500m, memory: 64Mi}}}
");
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let r = container_request(&ctx(&p), ContainerKind::Sidecar, c, 0, vec![], vec![], None)
        .expect("request");
    let res = &r.request.linux.resources;
    assert_eq!(res.cpu_quota, Some(50_000));
    assert_eq!(res.cpu_shares, Some(512));
    assert_eq!(res.memory_limit_in_bytes, Some(64 << 20));
    assert_eq!(res.oom_score_adj, Some(-997), "Guaranteed");
    assert_eq!(
        r.request
            .labels
            .get(labels::CONTAINER_KIND)
            .map(String::as_str),
        Some("sidecar")
    );
}

#[test]
fn supplemental_groups_policy_comes_from_the_pod() {
    for (policy, want) in [
        ("", SupplementalGroupsPolicy::Merge),
        (
            "supplementalGroupsPolicy: Merge",
            SupplementalGroupsPolicy::Merge,
        ),
        (
            "supplementalGroupsPolicy: Strict",
            SupplementalGroupsPolicy::Strict,
        ),
    ] {
        let p = pod(&format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: g}}\nspec:\n  securityContext: {{{policy}}}\n  containers: [{{name: a, image: busybox}}]\n"
        ));
        let spec = p.spec.as_ref().expect("spec");
        let r = container_request(
            &ctx(&p),
            ContainerKind::App,
            &spec.containers[0],
            0,
            vec![],
            vec![],
            None,
        )
        .expect("request");
        assert_eq!(
            r.request.linux.security.supplemental_groups_policy, want,
            "{policy}"
        );
        // Containers join the pod's user namespace: the sandbox request carries it.
        assert_eq!(r.request.linux.security.namespaces.user, None);
    }
}
