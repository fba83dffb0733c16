//! `bosun pod describe` and `bosun pod events`: kubectl-style text of a pod's state, probes, conditions and events.

use std::fmt::Write;

use k8s_openapi::api::core::v1::{Container, ContainerState, ContainerStatus, Pod, Probe};

use super::pod_of;
use super::table::{align, human_duration};
use crate::proto::bosun::v1 as api;

fn time(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> String {
    t.as_ref().map_or(String::new(), |t| t.0.to_string())
}

fn map_lines(m: Option<&std::collections::BTreeMap<String, String>>, indent: usize) -> String {
    let m = m.cloned().unwrap_or_default();
    if m.is_empty() {
        return "<none>".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(&format!("\n{:indent$}", ""))
}

/// A probe's settings as kubectl prints them.
pub fn probe_line(p: &Probe) -> String {
    let port = |ip: &k8s_openapi::apimachinery::pkg::util::intstr::IntOrString| match ip {
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::Int(n) => n.to_string(),
        k8s_openapi::apimachinery::pkg::util::intstr::IntOrString::String(s) => s.clone(),
    };
    let action = if let Some(e) = &p.exec {
        format!("exec {:?}", e.command.clone().unwrap_or_default())
    } else if let Some(h) = &p.http_get {
        format!(
            "http-get {}://{}:{}{}",
            h.scheme.as_deref().unwrap_or("HTTP").to_lowercase(),
            h.host.clone().unwrap_or_default(),
            port(&h.port),
            h.path.clone().unwrap_or_default()
        )
    } else if let Some(t) = &p.tcp_socket {
        format!(
            "tcp-socket {}:{}",
            t.host.clone().unwrap_or_default(),
            port(&t.port)
        )
    } else if let Some(g) = &p.grpc {
        format!(
            "grpc <pod>:{} {}",
            g.port,
            g.service.clone().unwrap_or_default()
        )
    } else {
        "unknown".into()
    };
    format!(
        "{action} delay={}s timeout={}s period={}s #success={} #failure={}",
        p.initial_delay_seconds.unwrap_or(0),
        p.timeout_seconds.unwrap_or(1),
        p.period_seconds.unwrap_or(10),
        p.success_threshold.unwrap_or(1),
        p.failure_threshold.unwrap_or(3)
    )
}

fn state_lines(out: &mut String, title: &str, s: &ContainerState) {
    if let Some(r) = &s.running {
        let _ = writeln!(out, "    {title:<14}Running");
        let _ = writeln!(out, "      Started:      {}", time(&r.started_at));
    } else if let Some(t) = &s.terminated {
        let _ = writeln!(out, "    {title:<14}Terminated");
        let _ = writeln!(
            out,
            "      Reason:       {}",
            t.reason.clone().unwrap_or_default()
        );
        if let Some(m) = t.message.as_ref().filter(|m| !m.is_empty()) {
            let _ = writeln!(out, "      Message:      {}", m.trim_end());
        }
        let _ = writeln!(out, "      Exit Code:    {}", t.exit_code);
        let _ = writeln!(out, "      Started:      {}", time(&t.started_at));
        let _ = writeln!(out, "      Finished:     {}", time(&t.finished_at));
    } else if let Some(w) = &s.waiting {
        let _ = writeln!(out, "    {title:<14}Waiting");
        let _ = writeln!(
            out,
            "      Reason:       {}",
            w.reason.clone().unwrap_or_default()
        );
        if let Some(m) = w.message.as_ref().filter(|m| !m.is_empty()) {
            let _ = writeln!(out, "      Message:      {m}");
        }
    }
}

fn containers(
    out: &mut String,
    title: &str,
    specs: &[Container],
    statuses: &[ContainerStatus],
    v: &api::PodView,
) {
    if specs.is_empty() {
        return;
    }
    let _ = writeln!(out, "{title}:");
    for c in specs {
        let st = statuses.iter().find(|s| s.name == c.name);
        let _ = writeln!(out, "  {}:", c.name);
        if let Some(id) = st.and_then(|s| s.container_id.clone()) {
            let _ = writeln!(out, "    Container ID: {id}");
        }
        let _ = writeln!(
            out,
            "    Image:        {}",
            c.image.clone().unwrap_or_default()
        );
        if let Some(ports) = &c.ports {
            let p: Vec<String> = ports
                .iter()
                .map(|p| {
                    format!(
                        "{}/{}",
                        p.container_port,
                        p.protocol.clone().unwrap_or_else(|| "TCP".into())
                    )
                })
                .collect();
            let _ = writeln!(out, "    Port:         {}", p.join(", "));
        }
        if let Some(cmd) = &c.command {
            let _ = writeln!(out, "    Command:      {}", cmd.join(" "));
        }
        if let Some(args) = &c.args {
            let _ = writeln!(out, "    Args:         {}", args.join(" "));
        }
        if let Some(s) = st {
            state_lines(out, "State:", &s.state.clone().unwrap_or_default());
            if let Some(l) = s.last_state.as_ref().filter(|l| l.terminated.is_some()) {
                state_lines(out, "Last State:", l);
            }
            let _ = writeln!(out, "    Ready:        {}", s.ready);
            let _ = writeln!(out, "    Restart Count: {}", s.restart_count);
        }
        for (name, p) in [
            ("Startup", &c.startup_probe),
            ("Liveness", &c.liveness_probe),
            ("Readiness", &c.readiness_probe),
        ] {
            let Some(p) = p else { continue };
            let title = format!("{name}:");
            let _ = writeln!(out, "    {title:<14}{}", probe_line(p));
            let key = name.to_lowercase();
            if let Some(r) = v
                .probes
                .iter()
                .find(|r| r.container == c.name && r.probe == key)
            {
                let ago = human_duration((super::now_ns() - r.at_ns) / 1_000_000_000);
                let msg = if r.message.is_empty() {
                    String::new()
                } else {
                    format!(": {}", r.message)
                };
                let _ = writeln!(out, "      Last result: {} ({ago} ago){msg}", r.result);
            }
        }
        if let Some(env) = &c.env {
            let _ = writeln!(out, "    Environment:");
            for e in env {
                let value = match (&e.value, &e.value_from) {
                    (Some(v), _) => v.clone(),
                    (None, Some(_)) => "<set from a reference>".into(),
                    _ => String::new(),
                };
                let _ = writeln!(out, "      {}: {value}", e.name);
            }
        }
        if let Some(u) = st
            .and_then(|s| s.user.as_ref())
            .and_then(|u| u.linux.as_ref())
        {
            let groups: Vec<String> = u
                .supplemental_groups
                .iter()
                .flatten()
                .map(ToString::to_string)
                .collect();
            let _ = writeln!(
                out,
                "    User:         uid={} gid={} groups={}",
                u.uid,
                u.gid,
                groups.join(",")
            );
        }
        if let Some(m) = &c.volume_mounts {
            let _ = writeln!(out, "    Mounts:");
            let created = st.and_then(|s| s.volume_mounts.as_ref());
            for m in m {
                let ro = if m.read_only == Some(true) {
                    "ro"
                } else {
                    "rw"
                };
                // The resolved recursiveReadOnly (IfPossible becomes Enabled or Disabled).
                let rro = created
                    .and_then(|c| c.iter().find(|s| s.mount_path == m.mount_path))
                    .and_then(|s| s.recursive_read_only.clone())
                    .or_else(|| m.recursive_read_only.clone());
                let rro = match rro.as_deref() {
                    Some("Enabled") => ", recursive",
                    Some("IfPossible") => ", recursive if possible",
                    _ => "",
                };
                let _ = writeln!(out, "      {} from {} ({ro}{rro})", m.mount_path, m.name);
            }
        }
    }
}

/// Whose users the pod runs with: its own user namespace (`hostUsers: false`, with the ranges
/// when it has a sandbox) or the host's, and the supplemental groups policy.
fn users(out: &mut String, spec: &k8s_openapi::api::core::v1::PodSpec, v: &api::PodView) {
    if spec.host_users == Some(false) {
        let ranges = if v.user_namespace.is_empty() {
            String::new()
        } else {
            format!(" (inside host length: {})", v.user_namespace)
        };
        let _ = writeln!(out, "Host Users:   false, own user namespace{ranges}");
    }
    let policy = spec
        .security_context
        .as_ref()
        .and_then(|s| s.supplemental_groups_policy.as_deref());
    if let Some(p) = policy {
        let _ = writeln!(out, "Supplemental Groups Policy: {p}");
    }
}

/// The whole `describe` text of a view at `now` (ns).
pub fn describe(v: &api::PodView, now: i64) -> anyhow::Result<String> {
    let pod: Pod = pod_of(v)?;
    let spec = pod.spec.clone().unwrap_or_default();
    let st = pod.status.clone().unwrap_or_default();
    let m = &pod.metadata;
    let mut out = String::new();
    let _ = writeln!(out, "Name:         {}", m.name.clone().unwrap_or_default());
    let _ = writeln!(
        out,
        "Namespace:    {}",
        m.namespace.clone().unwrap_or_default()
    );
    let _ = writeln!(out, "UID:          {}", m.uid.clone().unwrap_or_default());
    let _ = writeln!(out, "Source:       {}", v.source);
    let _ = writeln!(out, "Start Time:   {}", time(&st.start_time));
    let _ = writeln!(out, "Labels:       {}", map_lines(m.labels.as_ref(), 14));
    let _ = writeln!(
        out,
        "Annotations:  {}",
        map_lines(m.annotations.as_ref(), 14)
    );
    let mut status = st.phase.clone().unwrap_or_default();
    if m.deletion_timestamp.is_some() {
        status = format!(
            "Terminating (lasts {}s)",
            m.deletion_grace_period_seconds.unwrap_or(0)
        );
    }
    let _ = writeln!(out, "Status:       {status}");
    let _ = writeln!(
        out,
        "IP:           {}",
        st.pod_ip.clone().unwrap_or_default()
    );
    let _ = writeln!(
        out,
        "QoS Class:    {}",
        st.qos_class.clone().unwrap_or_default()
    );
    let _ = writeln!(out, "Sandbox:      {}", v.sandbox_id);
    users(&mut out, &spec, v);
    containers(
        &mut out,
        "Init Containers",
        spec.init_containers.as_deref().unwrap_or_default(),
        st.init_container_statuses.as_deref().unwrap_or_default(),
        v,
    );
    containers(
        &mut out,
        "Containers",
        &spec.containers,
        st.container_statuses.as_deref().unwrap_or_default(),
        v,
    );
    let _ = writeln!(out, "Conditions:");
    let mut rows = vec![vec![
        "  Type".to_string(),
        "Status".into(),
        "Reason".into(),
        "Last Transition".into(),
    ]];
    for c in st.conditions.iter().flatten() {
        rows.push(vec![
            format!("  {}", c.type_),
            c.status.clone(),
            c.reason.clone().unwrap_or_default(),
            time(&c.last_transition_time),
        ]);
    }
    out.push_str(&align(&rows));
    if let Some(vols) = &spec.volumes {
        let _ = writeln!(out, "Volumes:");
        for vol in vols {
            let json = serde_json::to_value(vol).unwrap_or_default();
            let kind = json
                .as_object()
                .and_then(|o| o.keys().find(|k| *k != "name").cloned())
                .unwrap_or_default();
            let _ = writeln!(out, "  {}: {kind}", vol.name);
        }
    }
    out.push_str(&events_table(std::slice::from_ref(v), now, false)?);
    Ok(out)
}

/// kubectl's "(x3 over 2m)" age column of an event.
pub fn event_age(e: &api::PodEvent, now: i64) -> String {
    let last = human_duration((now - e.last_timestamp_ns) / 1_000_000_000);
    if e.count > 1 {
        let over = human_duration((now - e.first_timestamp_ns) / 1_000_000_000);
        format!("{last} (x{} over {over})", e.count)
    } else {
        last
    }
}

/// The Events table of `views` (`bosun pod events` lists the object too).
pub fn events_table(views: &[api::PodView], now: i64, with_object: bool) -> anyhow::Result<String> {
    let mut events: Vec<(String, &api::PodEvent)> = Vec::new();
    for v in views {
        let pod = pod_of(v)?;
        let name = pod.metadata.name.clone().unwrap_or_default();
        for e in &v.events {
            let object = if e.object.is_empty() {
                format!("pod/{name}")
            } else {
                format!("pod/{name}/{}", e.object)
            };
            events.push((object, e));
        }
    }
    events.sort_by_key(|(_, e)| e.last_timestamp_ns);
    if !with_object {
        if events.is_empty() {
            return Ok("Events:       <none>\n".into());
        }
        let mut rows = vec![vec![
            "  Type".to_string(),
            "Reason".into(),
            "Age".into(),
            "From".into(),
            "Message".into(),
        ]];
        for (_, e) in &events {
            rows.push(vec![
                format!("  {}", e.r#type),
                e.reason.clone(),
                event_age(e, now),
                "bosun".into(),
                e.message.clone(),
            ]);
        }
        return Ok(format!("Events:\n{}", align(&rows)));
    }
    if events.is_empty() {
        return Ok("No events found.\n".into());
    }
    let mut rows = vec![vec![
        "LAST SEEN".to_string(),
        "TYPE".into(),
        "REASON".into(),
        "OBJECT".into(),
        "MESSAGE".into(),
    ]];
    for (object, e) in &events {
        rows.push(vec![
            event_age(e, now),
            e.r#type.clone(),
            e.reason.clone(),
            object.clone(),
            e.message.clone(),
        ]);
    }
    Ok(align(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> api::PodView {
        let pod = serde_json::json!({
            "metadata": {"name": "web", "namespace": "default", "uid": "u1", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "app", "image": "busybox",
                "readinessProbe": {"httpGet": {"port": 80, "path": "/"}, "periodSeconds": 1}}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "busybox", "imageID": "", "ready": true,
                    "restartCount": 1, "state": {"running": {"startedAt": "2023-11-14T22:14:00Z"}},
                    "lastState": {"terminated": {"exitCode": 137, "reason": "Error"}}}]}
        });
        api::PodView {
            pod_json: pod.to_string(),
            events: vec![api::PodEvent {
                r#type: "Warning".into(),
                reason: "Unhealthy".into(),
                object: "spec.containers{app}".into(),
                message: "Readiness probe failed: boom".into(),
                count: 3,
                first_timestamp_ns: 1_000_000_000_000,
                last_timestamp_ns: 1_060_000_000_000,
            }],
            probes: vec![api::ProbeReport {
                container: "app".into(),
                probe: "readiness".into(),
                result: "Success".into(),
                message: String::new(),
                at_ns: 0,
            }],
            source: "api".into(),
            sandbox_id: "abc".into(),
            logs: vec![],
            user_namespace: String::new(),
        }
    }

    #[test]
    fn describe_shows_users_groups_policy_and_recursive_read_only() {
        let pod = serde_json::json!({
            "metadata": {"name": "u", "namespace": "default", "uid": "u2"},
            "spec": {"hostUsers": false,
                "securityContext": {"supplementalGroupsPolicy": "Strict"},
                "volumes": [{"name": "data", "emptyDir": {}}],
                "containers": [{"name": "app", "image": "busybox", "volumeMounts": [
                    {"name": "data", "mountPath": "/a", "readOnly": true, "recursiveReadOnly": "IfPossible"},
                    {"name": "data", "mountPath": "/b", "readOnly": true}]}]},
            "status": {"containerStatuses": [{"name": "app", "image": "busybox", "imageID": "",
                "ready": true, "restartCount": 0,
                "user": {"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [1000, 1234]}},
                "volumeMounts": [{"name": "data", "mountPath": "/a", "readOnly": true,
                    "recursiveReadOnly": "Enabled"}]}]}
        });
        let v = api::PodView {
            pod_json: pod.to_string(),
            user_namespace: "0 65536 65536".into(),
            ..view()
        };
        let text = describe(&v, 0).expect("describe");
        for want in [
            "Host Users:   false, own user namespace (inside host length: 0 65536 65536)",
            "Supplemental Groups Policy: Strict",
            "User:         uid=1000 gid=1000 groups=1000,1234",
            "/a from data (ro, recursive)",
            "/b from data (ro)",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }

    #[test]
    fn describe_shows_states_probes_conditions_events() {
        let text = describe(&view(), 1_120_000_000_000).expect("describe");
        for want in [
            "Name:         web",
            "Labels:       app=web",
            "State:        Running",
            "Last State:   Terminated",
            "Exit Code:    137",
            "Restart Count: 1",
            "Readiness:    http-get http://:80/ delay=0s timeout=1s period=1s #success=1 #failure=3",
            "Last result: Success",
            "  Ready   True",
            "Unhealthy   60s (x3 over 2m)   bosun   Readiness probe failed: boom",
        ] {
            assert!(text.contains(want), "missing {want:?} in:\n{text}");
        }
    }

    #[test]
    fn events_table_names_objects() {
        let t = events_table(&[view()], 1_120_000_000_000, true).expect("events");
        assert!(t.starts_with("LAST SEEN"), "{t}");
        assert!(t.contains("pod/web/spec.containers{app}"), "{t}");
    }
}
