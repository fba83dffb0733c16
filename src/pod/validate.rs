//! Pod manifest validation like the API server's, for the fields bosun uses; scheduling fields warn.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::{Container, ContainerPort, LifecycleHandler, Pod, Probe, Volume};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::config::quantity;
use crate::error::{Error, Result};

/// Volume types bosun provides on one node.
pub const VOLUME_TYPES: [&str; 6] = [
    "emptyDir",
    "hostPath",
    "configMap",
    "secret",
    "downwardAPI",
    "projected",
];

/// One problem, at a field path such as `spec.containers[0].livenessProbe.periodSeconds`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

/// Every error and warning of one manifest.
#[derive(Debug, Default)]
pub struct Report {
    pub errors: Vec<FieldError>,
    pub warnings: Vec<String>,
}

impl Report {
    fn err(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.errors.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// The warnings if there is no error; else InvalidArgument listing every error.
    pub fn into_result(self, pod: &str) -> Result<Vec<String>> {
        if self.errors.is_empty() {
            return Ok(self.warnings);
        }
        let list: Vec<_> = self
            .errors
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        Err(Error::invalid(format!(
            "pod {pod} is invalid ({} errors): {}",
            list.len(),
            list.join("; ")
        )))
    }
}

/// Validates `pod`.
pub fn validate(pod: &Pod) -> Report {
    let mut r = Report::default();
    let meta = &pod.metadata;
    match meta.name.as_deref() {
        None | Some("") => r.err("metadata.name", "required"),
        Some(n) => dns_subdomain(&mut r, "metadata.name", n),
    }
    if let Some(ns) = meta.namespace.as_deref() {
        dns_label(&mut r, "metadata.namespace", ns);
    }
    let Some(spec) = pod.spec.as_ref() else {
        r.err("spec", "required");
        return r;
    };
    if spec.containers.is_empty() {
        r.err("spec.containers", "at least one container is required");
    }
    let restart = spec.restart_policy.as_deref().unwrap_or("Always");
    if !matches!(restart, "Always" | "OnFailure" | "Never") {
        r.err(
            "spec.restartPolicy",
            format!("unsupported value {restart:?}: Always, OnFailure or Never"),
        );
    }
    if let Some(g) = spec.termination_grace_period_seconds.filter(|g| *g < 0) {
        r.err(
            "spec.terminationGracePeriodSeconds",
            format!("must be ≥ 0 (got {g})"),
        );
    }
    check_users(&mut r, spec);
    let volumes = spec.volumes.as_deref().unwrap_or_default();
    let volume_names = check_volumes(&mut r, volumes);
    let mut names = HashSet::new();
    let inits = spec.init_containers.as_deref().unwrap_or_default();
    for (i, c) in inits.iter().enumerate() {
        let path = format!("spec.initContainers[{i}]");
        check_container(&mut r, &path, c, &volume_names, &mut names);
        match c.restart_policy.as_deref() {
            None | Some("Always") => {}
            Some(p) => r.err(
                format!("{path}.restartPolicy"),
                format!("unsupported value {p:?}: only Always (a sidecar) is allowed"),
            ),
        }
        let sidecar = c.restart_policy.as_deref() == Some("Always");
        if !sidecar {
            for (field, set) in [
                ("livenessProbe", c.liveness_probe.is_some()),
                ("readinessProbe", c.readiness_probe.is_some()),
                ("startupProbe", c.startup_probe.is_some()),
                ("lifecycle", c.lifecycle.is_some()),
            ] {
                if set {
                    r.err(
                        format!("{path}.{field}"),
                        "may not be set for init containers without restartPolicy Always",
                    );
                }
            }
        }
    }
    for (i, c) in spec.containers.iter().enumerate() {
        let path = format!("spec.containers[{i}]");
        check_container(&mut r, &path, c, &volume_names, &mut names);
        if let Some(p) = &c.restart_policy {
            r.err(
                format!("{path}.restartPolicy"),
                format!("may not be set for app containers (got {p:?}); use spec.restartPolicy"),
            );
        }
    }
    for (i, g) in spec.readiness_gates.iter().flatten().enumerate() {
        if !qualified_name(&g.condition_type) {
            r.err(
                format!("spec.readinessGates[{i}].conditionType"),
                format!("{:?} is not a qualified name", g.condition_type),
            );
        }
    }
    for (field, set) in [
        ("nodeName", spec.node_name.is_some()),
        ("nodeSelector", spec.node_selector.is_some()),
        ("affinity", spec.affinity.is_some()),
        ("tolerations", spec.tolerations.is_some()),
        (
            "topologySpreadConstraints",
            spec.topology_spread_constraints.is_some(),
        ),
        ("schedulingGates", spec.scheduling_gates.is_some()),
    ] {
        if set {
            r.warnings.push(format!(
                "spec.{field}: scheduling field, has no effect on a single node"
            ));
        }
    }
    r
}

fn check_volumes(r: &mut Report, volumes: &[Volume]) -> HashSet<String> {
    let mut names = HashSet::new();
    for (i, v) in volumes.iter().enumerate() {
        let path = format!("spec.volumes[{i}]");
        dns_label(r, &format!("{path}.name"), &v.name);
        if !names.insert(v.name.clone()) {
            r.err(
                format!("{path}.name"),
                format!("duplicate volume {:?}", v.name),
            );
        }
        let json = serde_json::to_value(v).unwrap_or_default();
        let types: Vec<String> = json
            .as_object()
            .map(|o| o.keys().filter(|k| *k != "name").cloned().collect())
            .unwrap_or_default();
        match types.as_slice() {
            [] => r.err(path, "a volume type is required"),
            [t] if VOLUME_TYPES.contains(&t.as_str()) => {}
            [t] => r.err(
                path,
                format!(
                    "volume type {t} is not supported by bosun (supported: {})",
                    VOLUME_TYPES.join(", ")
                ),
            ),
            many => r.err(
                path,
                format!("exactly one volume type, got {}", many.join(", ")),
            ),
        }
    }
    names
}

fn check_container(
    r: &mut Report,
    path: &str,
    c: &Container,
    volumes: &HashSet<String>,
    names: &mut HashSet<String>,
) {
    dns_label(r, &format!("{path}.name"), &c.name);
    if !names.insert(c.name.clone()) {
        r.err(
            format!("{path}.name"),
            format!("duplicate container name {:?}", c.name),
        );
    }
    if c.image.as_deref().unwrap_or_default().trim().is_empty() {
        r.err(format!("{path}.image"), "required");
    }
    let ports = c.ports.as_deref().unwrap_or_default();
    check_ports(r, path, ports);
    let port_names: HashSet<&str> = ports.iter().filter_map(|p| p.name.as_deref()).collect();
    for (field, probe) in [
        ("livenessProbe", &c.liveness_probe),
        ("readinessProbe", &c.readiness_probe),
        ("startupProbe", &c.startup_probe),
    ] {
        if let Some(p) = probe {
            check_probe(r, &format!("{path}.{field}"), field, p, &port_names);
        }
    }
    if let Some(l) = &c.lifecycle {
        for (field, h) in [("postStart", &l.post_start), ("preStop", &l.pre_stop)] {
            if let Some(h) = h {
                check_hook(r, &format!("{path}.lifecycle.{field}"), h, &port_names);
            }
        }
        if let Some(sig) = &l.stop_signal {
            if crate::runtime::signal::parse(sig).is_err() {
                r.err(
                    format!("{path}.lifecycle.stopSignal"),
                    format!("unknown signal {sig:?}"),
                );
            }
        }
    }
    if let Some(res) = &c.resources {
        for (kind, map) in [("limits", &res.limits), ("requests", &res.requests)] {
            for (name, q) in map.iter().flatten() {
                match quantity::parse(&q.0) {
                    Some(v) if v >= 0.0 => {}
                    _ => r.err(
                        format!("{path}.resources.{kind}[{name}]"),
                        format!("{:?} is not a valid quantity", q.0),
                    ),
                }
            }
        }
        for (name, req) in res.requests.iter().flatten() {
            let limit = res.limits.as_ref().and_then(|l| l.get(name));
            if let (Some(req), Some(lim)) = (
                quantity::parse(&req.0),
                limit.and_then(|l| quantity::parse(&l.0)),
            ) {
                if req > lim {
                    r.err(
                        format!("{path}.resources.requests[{name}]"),
                        format!("{:?} must be ≤ the limit {:?}", req, lim),
                    );
                }
            }
        }
    }
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        if !volumes.contains(&m.name) {
            r.err(
                format!("{path}.volumeMounts[{i}].name"),
                format!("volume {:?} is not in spec.volumes", m.name),
            );
        }
        if !m.mount_path.starts_with('/') {
            r.err(
                format!("{path}.volumeMounts[{i}].mountPath"),
                "must be an absolute path",
            );
        }
        check_recursive_read_only(r, &format!("{path}.volumeMounts[{i}]"), m);
    }
}

/// The API server's rules for `recursiveReadOnly`: Disabled, IfPossible or Enabled; only on a
/// read-only mount; Enabled only without mount propagation.
fn check_recursive_read_only(
    r: &mut Report,
    path: &str,
    m: &k8s_openapi::api::core::v1::VolumeMount,
) {
    let Some(rro) = m.recursive_read_only.as_deref() else {
        return;
    };
    let field = format!("{path}.recursiveReadOnly");
    if !matches!(rro, "Disabled" | "IfPossible" | "Enabled") {
        r.err(
            field,
            format!("unsupported value {rro:?}: Disabled, IfPossible or Enabled"),
        );
        return;
    }
    if rro != "Disabled" && m.read_only != Some(true) {
        r.err(field.clone(), "may only be specified when readOnly is true");
    }
    if rro == "Enabled" && m.mount_propagation.as_deref().is_some_and(|p| p != "None") {
        r.err(
            field,
            "Enabled may only be specified with mountPropagation None",
        );
    }
}

/// `hostUsers: false` and `supplementalGroupsPolicy`: a pod with its own user namespace cannot
/// share the host's network, pid or IPC namespaces (the API server refuses it too).
fn check_users(r: &mut Report, spec: &k8s_openapi::api::core::v1::PodSpec) {
    if spec.host_users == Some(false) {
        for (field, set) in [
            ("hostNetwork", spec.host_network),
            ("hostPID", spec.host_pid),
            ("hostIPC", spec.host_ipc),
        ] {
            if set == Some(true) {
                r.err(
                    "spec.hostUsers",
                    format!("false is not allowed with {field}: true"),
                );
            }
        }
    }
    let policy = spec
        .security_context
        .as_ref()
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    if let Some(p) = policy.filter(|p| !matches!(*p, "Merge" | "Strict")) {
        r.err(
            "spec.securityContext.supplementalGroupsPolicy",
            format!("unsupported value {p:?}: Merge or Strict"),
        );
    }
}

fn check_ports(r: &mut Report, path: &str, ports: &[ContainerPort]) {
    let mut seen = HashSet::new();
    for (i, p) in ports.iter().enumerate() {
        let at = format!("{path}.ports[{i}]");
        if !(1..=65535).contains(&p.container_port) {
            r.err(
                format!("{at}.containerPort"),
                format!("must be 1-65535 (got {})", p.container_port),
            );
        }
        if let Some(h) = p.host_port.filter(|h| !(0..=65535).contains(h)) {
            r.err(
                format!("{at}.hostPort"),
                format!("must be 0-65535 (got {h})"),
            );
        }
        let proto = p.protocol.as_deref().unwrap_or("TCP");
        if !matches!(proto, "TCP" | "UDP" | "SCTP") {
            r.err(
                format!("{at}.protocol"),
                format!("unsupported value {proto:?}: TCP, UDP or SCTP"),
            );
        }
        if let Some(n) = &p.name {
            if !port_name(n) {
                r.err(format!("{at}.name"), format!("{n:?} is not a valid port name (IANA_SVC_NAME: ≤15 lowercase letters, digits and '-', with a letter)"));
            }
            if !seen.insert(n.clone()) {
                r.err(format!("{at}.name"), format!("duplicate port name {n:?}"));
            }
        }
    }
}

fn check_probe(r: &mut Report, path: &str, kind: &str, p: &Probe, ports: &HashSet<&str>) {
    let handlers = [
        ("exec", p.exec.is_some()),
        ("httpGet", p.http_get.is_some()),
        ("tcpSocket", p.tcp_socket.is_some()),
        ("grpc", p.grpc.is_some()),
    ];
    exactly_one(r, path, &handlers);
    if let Some(h) = &p.http_get {
        check_port_ref(r, &format!("{path}.httpGet.port"), &h.port, ports);
        if let Some(s) = h
            .scheme
            .as_deref()
            .filter(|s| !matches!(*s, "HTTP" | "HTTPS"))
        {
            r.err(
                format!("{path}.httpGet.scheme"),
                format!("unsupported value {s:?}: HTTP or HTTPS"),
            );
        }
    }
    if let Some(t) = &p.tcp_socket {
        check_port_ref(r, &format!("{path}.tcpSocket.port"), &t.port, ports);
    }
    if let Some(g) = &p.grpc {
        if !(1..=65535).contains(&g.port) {
            r.err(
                format!("{path}.grpc.port"),
                format!("must be 1-65535 (got {})", g.port),
            );
        }
    }
    for (field, v, min) in [
        ("initialDelaySeconds", p.initial_delay_seconds, 0),
        ("periodSeconds", p.period_seconds, 1),
        ("timeoutSeconds", p.timeout_seconds, 1),
        ("successThreshold", p.success_threshold, 1),
        ("failureThreshold", p.failure_threshold, 1),
    ] {
        if let Some(v) = v.filter(|v| *v < min) {
            r.err(
                format!("{path}.{field}"),
                format!("must be ≥ {min} (got {v})"),
            );
        }
    }
    if kind != "readinessProbe" {
        if let Some(v) = p.success_threshold.filter(|v| *v != 1) {
            r.err(
                format!("{path}.successThreshold"),
                format!("must be 1 for {kind} (got {v})"),
            );
        }
    }
    match (kind, p.termination_grace_period_seconds) {
        ("readinessProbe", Some(_)) => r.err(
            format!("{path}.terminationGracePeriodSeconds"),
            "must not be set for readinessProbe",
        ),
        (_, Some(g)) if g < 1 => r.err(
            format!("{path}.terminationGracePeriodSeconds"),
            format!("must be ≥ 1 (got {g})"),
        ),
        _ => {}
    }
}

fn check_hook(r: &mut Report, path: &str, h: &LifecycleHandler, ports: &HashSet<&str>) {
    exactly_one(
        r,
        path,
        &[
            ("exec", h.exec.is_some()),
            ("httpGet", h.http_get.is_some()),
            ("tcpSocket", h.tcp_socket.is_some()),
            ("sleep", h.sleep.is_some()),
        ],
    );
    if let Some(g) = &h.http_get {
        check_port_ref(r, &format!("{path}.httpGet.port"), &g.port, ports);
    }
    if let Some(s) = h.sleep.as_ref().filter(|s| s.seconds < 0) {
        r.err(
            format!("{path}.sleep.seconds"),
            format!("must be ≥ 0 (got {})", s.seconds),
        );
    }
}

fn exactly_one(r: &mut Report, path: &str, handlers: &[(&str, bool)]) {
    let set: Vec<_> = handlers.iter().filter(|h| h.1).map(|h| h.0).collect();
    let all: Vec<_> = handlers.iter().map(|h| h.0).collect();
    match set.len() {
        1 => {}
        0 => r.err(
            path,
            format!("exactly one handler is required: {}", all.join(", ")),
        ),
        _ => r.err(
            path,
            format!("exactly one handler is allowed, got {}", set.join(", ")),
        ),
    }
}

fn check_port_ref(r: &mut Report, path: &str, port: &IntOrString, names: &HashSet<&str>) {
    match port {
        IntOrString::Int(n) if (1..=65535).contains(n) => {}
        IntOrString::Int(n) => r.err(path, format!("must be 1-65535 (got {n})")),
        IntOrString::String(s) if names.contains(s.as_str()) => {}
        IntOrString::String(s) => r.err(
            path,
            format!("port name {s:?} is not among the container's ports"),
        ),
    }
}

fn dns_label(r: &mut Report, path: &str, s: &str) {
    if !is_dns_label(s) {
        r.err(path, format!("{s:?} is not a DNS-1123 label (≤63 lowercase letters, digits and '-', starting and ending alphanumeric)"));
    }
}

fn dns_subdomain(r: &mut Report, path: &str, s: &str) {
    if s.len() > 253 || !s.split('.').all(is_dns_label) {
        r.err(
            path,
            format!("{s:?} is not a DNS-1123 subdomain (≤253 characters of dot-separated labels)"),
        );
    }
}

/// RFC 1123 label: 1–63 of `[a-z0-9-]`, alphanumeric at both ends.
pub fn is_dns_label(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// IANA_SVC_NAME: 1–15 of `[a-z0-9-]`, a letter somewhere, no leading/trailing or double '-'.
fn port_name(s: &str) -> bool {
    is_dns_label(s)
        && s.len() <= 15
        && s.bytes().any(|c| c.is_ascii_lowercase())
        && !s.contains("--")
}

/// A Kubernetes qualified name: optional DNS subdomain prefix and '/', then 1–63 of
/// alphanumerics, '-', '_', '.', alphanumeric at both ends.
fn qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    let b = name.as_bytes();
    let name_ok = !b.is_empty()
        && b.len() <= 63
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-_.".contains(c))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric();
    name_ok && prefix.is_none_or(|p| p.len() <= 253 && p.split('.').all(is_dns_label))
}
