//! Supervised pods' configuration surface: ConfigMaps, Secrets, downward API and env from local
//! files, memory emptyDirs, readiness gates set by `bosun pod condition set`, the Watch stream,
//! host-network pods probed on 127.0.0.1, and scheduling-field warnings.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::bosun::v1 as api;

use crate::support::cri::{self, NEEDS};
use crate::support::Scenario;
use k8s_openapi::api::core::v1 as k;

use crate::support::manifest::{busybox, PodManifest, ProbeManifest};
use crate::support::pods::{self, BUSYBOX};
use crate::support::{block_on, trial, Daemon, Need, TmpfsBelow};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::config::configmaps_secrets_downward_api_env_and_memory_empty_dir",
            NEEDS,
            config_sources,
        ),
        trial(
            "pod::config::readiness_gates_and_the_watch_stream",
            NEEDS,
            readiness_gates,
        ),
        trial(
            "pod::config::host_network_pod_probed_on_loopback_and_scheduling_warnings",
            NEEDS,
            host_network,
        ),
        trial(
            "pod::config::host_users_false_strict_groups_and_recursive_read_only",
            &[Need::Root, Need::Runc, Need::Images, Need::TmpfsIdmap],
            users_and_mounts,
        ),
    ]
}

/// `hostUsers: false`, `supplementalGroupsPolicy: Strict` and `recursiveReadOnly: Enabled`
/// from a Pod manifest: the container's maps, groups and mounts as it sees them, the pod's
/// status (user) and `bosun pod describe`, and a second pod getting another range.
fn users_and_mounts() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let vol = TmpfsBelow::new(&d.dir().join("host-vol"))?;
    let yaml = |name: &str| {
        format!(
            r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  hostUsers: false
  restartPolicy: Never
  terminationGracePeriodSeconds: 1
  securityContext:
    runAsUser: 1000
    supplementalGroups: [1234]
    supplementalGroupsPolicy: Strict
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c]
    args:
    - |
      echo "map=$(cat /proc/self/uid_map | tr -s ' ' | sed 's/^ //')"
      echo "groups=$(id -G)"
      touch /ro/tmpfs/f 2>/dev/null && echo tmpfs-writable || echo tmpfs-read-only
      echo x > /data/f && echo "data=$(stat -c %u:%g /data/f)"
      echo done; exec sleep 600
    volumeMounts:
    - {{name: host, mountPath: /ro, readOnly: true, recursiveReadOnly: Enabled}}
    - {{name: data, mountPath: /data}}
  volumes:
  - {{name: host, hostPath: {{path: {}}}}}
  - {{name: data, emptyDir: {{}}}}
"#,
            vol.dir.display()
        )
    };
    pods::apply(&d, &yaml("own-users"))?;
    pods::wait_for(&d, "own-users", 30, "running", |p| pods::running(p, "main"))?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut logs = String::new();
    while Instant::now() < deadline && !logs.contains("done") {
        logs = pods::cli(&d, &["logs", "own-users"])?;
        std::thread::sleep(Duration::from_millis(100));
    }
    for want in [
        "map=0 65536 65536",
        "groups=1000 1234",
        "tmpfs-read-only",
        "data=1000:1000",
    ] {
        ensure!(logs.contains(want), "logs lack {want:?}:\n{logs}");
    }
    let p = pods::get(&d, "own-users")?.context("no pod")?;
    let user = pods::container(&p, "main")
        .and_then(|c| c.user)
        .and_then(|u| u.linux)
        .context("no status user")?;
    ensure!(
        (user.uid, user.gid, user.supplemental_groups.clone())
            == (1000, 1000, Some(vec![1000, 1234])),
        "status user {user:?}"
    );
    let text = pods::cli(&d, &["describe", "own-users"])?;
    for want in [
        "Host Users:   false, own user namespace (inside host length: 0 65536 65536)",
        "Supplemental Groups Policy: Strict",
        "User:         uid=1000 gid=1000 groups=1000,1234",
        "/ro from host (ro, recursive)",
    ] {
        ensure!(text.contains(want), "describe lacks {want:?}:\n{text}");
    }
    // A second pod gets the next range.
    pods::apply(&d, &yaml("own-users-2"))?;
    pods::wait_for(&d, "own-users-2", 30, "running", |p| {
        pods::running(p, "main")
    })?;
    let text = pods::cli(&d, &["describe", "own-users-2"])?;
    ensure!(
        text.contains("(inside host length: 0 131072 65536)"),
        "second pod's range:\n{text}"
    );
    pods::cli(&d, &["delete", "own-users", "--grace-period", "1"])?;
    pods::delete_and_check(&d, "own-users-2")?;
    pods::wait_gone(&d, "own-users", 20)?;
    cri::assert_clean(&d)
}

/// env and volumes from `[pod] configmap_dir`/`secret_dir` files, the downward API, `$(VAR)`
/// expansion and a tmpfs emptyDir, as the container sees them.
fn config_sources() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let cm = d.dir().join("configmaps/default/settings");
    let secret = d.dir().join("secrets/default/creds");
    std::fs::create_dir_all(&cm)?;
    std::fs::create_dir_all(&secret)?;
    std::fs::write(cm.join("color"), "blue")?;
    std::fs::write(cm.join("size"), "xl")?;
    std::fs::write(secret.join("password"), "hunter2")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: configured
  labels: {{tier: backend}}
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c]
    args:
    - |
      echo "color=$COLOR size=$CFG_size pw=$(cat /secret/password) greeting=$GREETING"
      echo "labels=$(cat /info/labels) mode=$(stat -L -c %a /config/c)"
      echo "items=$(ls /config) cache=$(grep ' /cache ' /proc/mounts | cut -d' ' -f3)"
      echo "missing-optional=[$OPTIONAL]"
    env:
    - {{name: COLOR, valueFrom: {{configMapKeyRef: {{name: settings, key: color}}}}}}
    - {{name: OPTIONAL, valueFrom: {{secretKeyRef: {{name: nothing, key: x, optional: true}}}}}}
    - {{name: GREETING, value: "hello $(COLOR) $$(COLOR)"}}
    envFrom:
    - {{prefix: CFG_, configMapRef: {{name: settings}}}}
    volumeMounts:
    - {{name: config, mountPath: /config}}
    - {{name: secret, mountPath: /secret}}
    - {{name: info, mountPath: /info}}
    - {{name: cache, mountPath: /cache}}
  volumes:
  - name: config
    configMap: {{name: settings, items: [{{key: color, path: c, mode: 0600}}]}}
  - name: secret
    secret: {{secretName: creds}}
  - name: info
    downwardAPI: {{items: [{{path: labels, fieldRef: {{fieldPath: metadata.labels}}}}]}}
  - name: cache
    emptyDir: {{medium: Memory, sizeLimit: 16Mi}}
"#
    );
    pods::apply(&d, &yaml)?;
    pods::wait_for(&d, "configured", 30, "Succeeded", |p| {
        pods::phase(p) == "Succeeded"
    })?;
    let logs = pods::cli(&d, &["logs", "configured"])?;
    for want in [
        "color=blue size=xl pw=hunter2 greeting=hello blue $(COLOR)",
        "labels=tier=\"backend\" mode=600",
        "items=c cache=tmpfs",
        "missing-optional=[]",
    ] {
        ensure!(logs.contains(want), "logs lack {want:?}:\n{logs}");
    }
    // A required key that does not exist keeps the container from being created, with a reason.
    let bad = yaml
        .replace("name: configured", "name: misconfigured")
        .replace("key: color}}", "key: nope}}");
    pods::apply(&d, &bad)?;
    let msg = config_error(&d, "misconfigured")?;
    ensure!(
        msg.contains("COLOR") && msg.contains("nope"),
        "message {msg:?}"
    );
    pods::cli(&d, &["delete", "misconfigured", "--grace-period", "1"])?;

    // runAsNonRoot without runAsUser on an image without USER (root): refused like the kubelet.
    let rootful = PodManifest::new("rootful")
        .grace(1)
        .spec(|s| {
            s.security_context = Some(k::PodSecurityContext {
                run_as_non_root: Some(true),
                ..Default::default()
            })
        })
        .container(busybox("main").command(&["sleep", "1000"]))
        .yaml();
    pods::apply(&d, &rootful)?;
    let msg = config_error(&d, "rootful")?;
    ensure!(
        msg.contains("runAsNonRoot and image will run as root"),
        "message {msg:?}"
    );
    pods::cli(&d, &["delete", "rootful", "--grace-period", "1"])?;
    pods::delete_and_check(&d, "configured")
}

/// Waits until container `main` of pod `name` is held in CreateContainerConfigError; its message.
fn config_error(d: &Daemon, name: &str) -> Result<String> {
    let p = pods::wait_for(d, name, 30, "CreateContainerConfigError", |p| {
        pods::waiting_reason(p, "main") == "CreateContainerConfigError"
    })?;
    Ok(pods::waiting_message(&p, "main"))
}

/// A pod with a readiness gate is Ready only once `bosun pod condition set` makes the gate
/// True; a Watch subscriber sees the pod added and then modified.
fn readiness_gates() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = PodManifest::new("gated")
        .grace(1)
        .spec(|s| {
            s.readiness_gates = Some(vec![k::PodReadinessGate {
                condition_type: "example.com/load-balancer".into(),
            }])
        })
        .container(busybox("main").command(&["sleep", "1000"]))
        .yaml();
    let watched = block_on(async {
        let ch = d.channel().await?;
        let mut pods_api = api::pods_client::PodsClient::new(ch);
        let mut stream = pods_api.watch(api::WatchPodsRequest {}).await?.into_inner();
        pods::apply(&d, &yaml)?;
        // Until a MODIFIED event shows the containers ready.
        let mut kinds = Vec::new();
        loop {
            let ev = tokio::time::timeout(Duration::from_secs(20), stream.message())
                .await
                .with_context(|| format!("no watch event in 20 s after {kinds:?}"))??
                .context("watch ended")?;
            kinds.push(ev.r#type.clone());
            let pod: k8s_openapi::api::core::v1::Pod =
                serde_json::from_str(&ev.pod.context("event without a pod")?.pod_json)?;
            if pods::condition(&pod, "ContainersReady") == "True" {
                break;
            }
        }
        anyhow::Ok(kinds)
    })?;
    ensure!(
        watched.len() >= 2 && watched[0] == "ADDED" && watched[1..].iter().all(|k| k == "MODIFIED"),
        "watch events {watched:?}"
    );
    let p = pods::wait_for(&d, "gated", 30, "containers ready", |p| {
        pods::condition(p, "ContainersReady") == "True"
    })?;
    ensure!(
        pods::condition(&p, "Ready") == "False",
        "Ready without its gate"
    );
    // `bosun pod get -w`: the table, then a row per change, in the table's columns.
    let table = pods::Follower::start(&d, &["get", "-w"])?;
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    for _ in 0..2 {
        lines.push(table.line(deadline).context("get -w printed no table")?);
    }
    pods::cli(
        &d,
        &[
            "condition",
            "set",
            "gated",
            "example.com/load-balancer=True",
            "--reason",
            "Attached",
        ],
    )?;
    let p = pods::wait_for(&d, "gated", 10, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    // The gate's change is watched: one more row.
    lines.push(
        table
            .line(deadline)
            .context("get -w printed no watched row")?,
    );
    drop(table);
    // Every column of every row starts where its header does.
    let starts: Vec<usize> = ["READY", "STATUS", "RESTARTS", "AGE"]
        .iter()
        .filter_map(|h| lines[0].find(h))
        .collect();
    ensure!(starts.len() == 4, "header {:?}", lines[0]);
    for r in &lines[1..] {
        let b = r.as_bytes();
        ensure!(
            r.starts_with("gated ")
                && starts
                    .iter()
                    .all(|&i| b.get(i).is_some_and(|c| *c != b' ') && b[i - 1] == b' '),
            "row {r:?} not under {:?}",
            lines[0]
        );
    }
    ensure!(pods::condition(&p, "example.com/load-balancer") == "True");
    let err = pods::cli_fails(&d, &["condition", "set", "gated", "x=Maybe"])?;
    ensure!(err.contains("True or False"), "{err}");
    pods::delete_and_check(&d, "gated")
}

/// A host-network pod's httpGet and tcpSocket probes go to 127.0.0.1; fields that only a
/// scheduler uses are accepted with a warning.
fn host_network() -> Result<()> {
    Scenario::supervisor(10).run_sync(|d| {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let port = i32::from(port);
        let yaml = PodManifest::new("hostnet")
            .spec(|s| {
                s.host_network = Some(true);
                s.node_selector = Some([("disk".to_string(), "ssd".to_string())].into());
                s.tolerations = Some(vec![k::Toleration {
                    key: Some("k".into()),
                    operator: Some("Exists".into()),
                    ..Default::default()
                }]);
            })
            .grace(1)
            .container(
                busybox("web")
                    .sh(&format!(
                        "mkdir -p /www; echo ok > /www/index.html; exec httpd -f -p 127.0.0.1:{port} -h /www"
                    ))
                    .readiness(ProbeManifest::http("/index.html", port).period(1))
                    .liveness(ProbeManifest::tcp(port).period(1)),
            )
            .yaml();
        let f = pods::manifest_file(d, &yaml)?;
        let out = d.cli(&["pod", "apply", "-f", &f.to_string_lossy()])?;
        ensure!(out.status.success(), "apply failed");
        let stderr = String::from_utf8_lossy(&out.stderr);
        ensure!(
            stderr.contains("nodeSelector")
                && stderr.contains("tolerations")
                && stderr.contains("no effect"),
            "warnings: {stderr}"
        );
        let p = pods::wait_for(d, "hostnet", 30, "Ready", |p| {
            pods::condition(p, "Ready") == "True"
        })?;
        ensure!(
            pods::restarts(&p, "web") == 0,
            "liveness failed on loopback"
        );
        let status = p.status.clone().unwrap_or_default();
        ensure!(
            status.pod_ip.is_some() && status.pod_ip == status.host_ip,
            "a host-network pod's IP is the node's: {:?} vs {:?}",
            status.pod_ip,
            status.host_ip
        );
        pods::delete_and_check(d, "hostnet")?;
        Ok(())
    })
}
