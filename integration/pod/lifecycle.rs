//! Supervised pods, start to finish: init order, sidecars, probes making a pod Ready, what CRI
//! and the CLI show, restart policies and phases, CrashLoopBackOff timing, invalid manifests,
//! static pods, and CRI pods the supervisor leaves alone.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::pods::{self, BUSYBOX};
use crate::support::{block_on, trial, Need};

/// Back-off tests tell 1, 2 and 4 s apart: only where the clock is the test's own.
const PUNCTUAL: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Punctual];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::lifecycle::web_pod_init_probes_ready_cri_labels_and_cli",
            NEEDS,
            web_pod,
        ),
        trial(
            "pod::lifecycle::init_containers_in_order_sidecars_start_before_and_stop_after",
            NEEDS,
            init_and_sidecars,
        ),
        trial(
            "pod::lifecycle::phases_follow_the_restart_policy",
            NEEDS,
            phases,
        ),
        trial(
            "pod::lifecycle::crash_loop_back_off_grows_and_caps",
            PUNCTUAL,
            crash_loop,
        ),
        trial(
            "pod::lifecycle::back_off_resets_after_a_quiet_run_and_sidecars_always_restart",
            PUNCTUAL,
            backoff_reset_and_sidecar_restart,
        ),
        trial(
            "pod::lifecycle::logs_follow_a_container_across_its_restarts",
            NEEDS,
            logs_follow,
        ),
        trial(
            "pod::lifecycle::failed_init_container_with_never_fails_the_pod",
            NEEDS,
            failed_init,
        ),
        trial(
            "pod::lifecycle::invalid_manifests_are_rejected_whole",
            NEEDS,
            invalid_manifests,
        ),
        trial(
            "pod::lifecycle::static_pod_files_create_replace_and_delete_pods",
            NEEDS,
            static_pods,
        ),
        trial(
            "pod::lifecycle::cri_made_pods_are_left_alone_and_reapply_is_unchanged",
            NEEDS,
            cri_pods_untouched,
        ),
        trial(
            "pod::lifecycle::the_examples_reach_their_documented_states",
            NEEDS,
            examples,
        ),
    ]
}

fn web_yaml(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels: {{app: web}}
spec:
  terminationGracePeriodSeconds: 3
  initContainers:
  - name: setup
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "echo hello-from-{name} > /www/index.html; echo setup-done"]
    volumeMounts: [{{name: www, mountPath: /www}}]
  containers:
  - name: web
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "echo serving $(MY_POD) on $(POD_IP); exec httpd -f -p 8080 -h /www"]
    env:
    - {{name: MY_POD, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
    - {{name: POD_IP, valueFrom: {{fieldRef: {{fieldPath: status.podIP}}}}}}
    ports: [{{name: http, containerPort: 8080}}]
    volumeMounts: [{{name: www, mountPath: /www}}]
    readinessProbe: {{httpGet: {{path: /index.html, port: http}}, periodSeconds: 1}}
    livenessProbe: {{tcpSocket: {{port: 8080}}, periodSeconds: 1}}
  volumes:
  - {{name: www, emptyDir: {{}}}}
"#
    )
}

/// The web example: the init container fills an emptyDir, the app serves it, readiness makes
/// the pod Ready; CRI shows kubelet labels and the pod status; the CLI shows all of it.
fn web_pod() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let out = pods::apply(&d, &web_yaml("web"))?;
    ensure!(out.trim() == "pod/web created", "apply said {out:?}");
    let p = pods::wait_for(&d, "web", 30, "Ready", |p| {
        pods::condition(p, "Ready") == "True"
    })?;
    ensure!(pods::phase(&p) == "Running", "phase {}", pods::phase(&p));
    for c in [
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
    ] {
        ensure!(pods::condition(&p, c) == "True", "{c} not True");
    }
    let setup = pods::container(&p, "setup").context("setup status")?;
    let t = setup
        .state
        .and_then(|s| s.terminated)
        .context("setup not terminated")?;
    ensure!(
        t.exit_code == 0 && t.reason.as_deref() == Some("Completed"),
        "{t:?}"
    );
    let ip = p
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .context("no pod IP")?;
    ensure!(d.net().contains(&ip), "pod IP {ip} not in the test network");
    // The page the init container wrote, served from the pod IP.
    let body = block_on(async {
        let resp = reqwest::Client::builder()
            .no_proxy()
            .build()?
            .get(format!("http://{ip}:8080/index.html"))
            .send()
            .await?;
        anyhow::Ok(resp.text().await?)
    })?;
    ensure!(body.trim() == "hello-from-web", "served {body:?}");

    // CRI: kubelet labels and annotations, the pod status in the sandbox's verbose info.
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let list = rt
                .list_containers(pb::ListContainersRequest { filter: None })
                .await?
                .into_inner()
                .containers;
            let web = list
                .iter()
                .find(|c| {
                    c.labels
                        .get("io.kubernetes.container.name")
                        .map(String::as_str)
                        == Some("web")
                })
                .context("no container labelled web")?;
            ensure!(web.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some("web"));
            ensure!(
                web.labels
                    .get("io.kubernetes.pod.namespace")
                    .map(String::as_str)
                    == Some("default")
            );
            ensure!(web.annotations.contains_key("io.kubernetes.container.hash"));
            ensure!(
                web.annotations
                    .get("io.kubernetes.container.restartCount")
                    .map(String::as_str)
                    == Some("0")
            );
            ensure!(
                web.annotations
                    .get("io.kubernetes.container.terminationMessagePath")
                    .map(String::as_str)
                    == Some("/dev/termination-log")
            );
            let st = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: web.pod_sandbox_id.clone(),
                    verbose: true,
                })
                .await?
                .into_inner();
            let pod = st.info.get("pod").context("no verbose info \"pod\"")?;
            let v: serde_json::Value = serde_json::from_str(pod)?;
            ensure!(v["status"]["phase"] == "Running", "verbose pod: {pod}");
            Ok(())
        }),
    )?;

    // CLI views.
    let table = pods::cli(&d, &["get"])?;
    ensure!(
        table.starts_with("NAME   READY   STATUS    RESTARTS   AGE")
            && table.contains("web    1/1     Running   0"),
        "get:\n{table}"
    );
    let describe = pods::cli(&d, &["describe", "web"])?;
    for want in [
        "Init Containers:",
        "Readiness:",
        "Last result: Success",
        "Ready                       True",
    ] {
        ensure!(
            describe.contains(want),
            "describe lacks {want:?}:\n{describe}"
        );
    }
    let logs = pods::cli(&d, &["logs", "web"])?;
    ensure!(
        logs.trim() == format!("serving web on {ip}"),
        "logs {logs:?}"
    );
    let setup_logs = pods::cli(&d, &["logs", "web", "-c", "setup"])?;
    ensure!(
        setup_logs.trim() == "setup-done",
        "setup logs {setup_logs:?}"
    );
    let events = pods::events(&d, "web")?;
    ensure!(
        events.contains("Started") && events.contains("Created container web"),
        "{events}"
    );
    pods::delete_and_check(&d, "web")
}

/// Init containers run one at a time in order; a sidecar (init container with restartPolicy
/// Always) is started (and its startupProbe passed) before the next init container, keeps
/// running beside the app, and is stopped only after the app has exited.
fn init_and_sidecars() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let m = d.dir().join("markers");
    std::fs::create_dir_all(&m)?;
    // No quotes: some markers run inside single-quoted traps.
    let mark = |label: &str| format!("read up rest < /proc/uptime; echo {label} $up >> /m/log");
    // The sidecar's exec probe must fit its timeout on a slow lane too (a runc exec under qemu
    // TCG takes over a second: 30 timeouts in a row restarted the sidecar there).
    let timeout = crate::support::time_scale();
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: order}}
spec:
  terminationGracePeriodSeconds: 10
  initContainers:
  - name: first
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "{first}; sleep 1"]
    volumeMounts: [{{name: m, mountPath: /m}}]
  - name: side
    image: {BUSYBOX}
    imagePullPolicy: Never
    restartPolicy: Always
    command: [sh, -c, "trap '{side_term}; exit 0' TERM; sleep 1; {side_up}; touch /tmp/up; while true; do sleep 0.2; done"]
    startupProbe: {{exec: {{command: [test, -f, /tmp/up]}}, periodSeconds: 1, timeoutSeconds: {timeout}, failureThreshold: 30}}
    volumeMounts: [{{name: m, mountPath: /m}}]
  - name: second
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "{second}"]
    volumeMounts: [{{name: m, mountPath: /m}}]
  containers:
  - name: app
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "trap '{app_term}; sleep 1; {app_exit}; exit 0' TERM; {app}; while true; do sleep 0.2; done"]
    volumeMounts: [{{name: m, mountPath: /m}}]
  volumes:
  - {{name: m, hostPath: {{path: {m:?}, type: Directory}}}}
"#,
        first = mark("first"),
        side_up = mark("side-up"),
        side_term = mark("side-term"),
        second = mark("second"),
        app = mark("app"),
        app_term = mark("app-term"),
        app_exit = mark("app-exit"),
    );
    pods::apply(&d, &yaml)?;
    let p = pods::wait_for(&d, "order", 40, "app running", |p| pods::running(p, "app"))?;
    ensure!(
        pods::running(&p, "side"),
        "the sidecar is not running beside the app"
    );
    let side = pods::container(&p, "side").context("side")?;
    ensure!(side.started == Some(true), "sidecar not started: {side:?}");
    let log = m.join("log");
    let t = |l: &str| pods::marker(&log, l);
    ensure!(
        t("first")? < t("side-up")?,
        "sidecar before first init finished"
    );
    ensure!(
        t("side-up")? <= t("second")?,
        "second init ran before the sidecar's startupProbe"
    );
    ensure!(
        t("second")? <= t("app")?,
        "app before the last init container"
    );
    cli_delete_wait(&d, "order")?;
    ensure!(
        t("app-exit")? <= t("side-term")?,
        "the sidecar got TERM before the app exited:\n{}",
        std::fs::read_to_string(&log)?
    );
    cri::assert_clean(&d)
}

fn cli_delete_wait(d: &crate::support::Daemon, name: &str) -> Result<()> {
    pods::cli(d, &["delete", name])?;
    pods::wait_gone(d, name, 30)?;
    Ok(())
}

fn one_shot(name: &str, policy: &str, code: i32) -> String {
    format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: {policy}
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "sleep 0.5; echo bye > /dev/termination-log; exit {code}"]
"#
    )
}

/// Never: exit 0 → Succeeded, exit 1 → Failed; OnFailure: exit 0 → Succeeded, exit 1 →
/// restarted; Always: exit 0 → restarted. The termination message comes from the file.
fn phases() -> Result<()> {
    let d = pods::daemon(10, "")?;
    for (name, policy, code) in [
        ("never-ok", "Never", 0),
        ("never-fail", "Never", 1),
        ("onfailure-ok", "OnFailure", 0),
        ("onfailure-fail", "OnFailure", 1),
        ("always-ok", "Always", 0),
    ] {
        pods::apply(&d, &one_shot(name, policy, code))?;
    }
    for (name, want) in [
        ("never-ok", "Succeeded"),
        ("never-fail", "Failed"),
        ("onfailure-ok", "Succeeded"),
    ] {
        let p = pods::wait_for(&d, name, 30, want, |p| pods::phase(p) == want)?;
        let t = pods::container(&p, "main")
            .and_then(|c| c.state)
            .and_then(|s| s.terminated)
            .context("not terminated")?;
        ensure!(
            t.message.as_deref().map(str::trim) == Some("bye"),
            "{name}: termination message {:?}",
            t.message
        );
        ensure!(
            pods::condition(&p, "Ready") == "False",
            "{name} still Ready"
        );
    }
    for name in ["onfailure-fail", "always-ok"] {
        let p = pods::wait_for(&d, name, 30, "a restart", |p| {
            pods::restarts(p, "main") >= 1
        })?;
        let ph = pods::phase(&p);
        ensure!(
            ph == "Running" || ph == "Pending",
            "{name}: phase {ph} while restarting"
        );
        let last = pods::container(&p, "main")
            .and_then(|c| c.last_state)
            .and_then(|s| s.terminated)
            .context("no lastState.terminated")?;
        ensure!(
            last.finished_at.is_some() && last.started_at.is_some(),
            "{last:?}"
        );
    }
    for name in [
        "never-ok",
        "never-fail",
        "onfailure-ok",
        "onfailure-fail",
        "always-ok",
    ] {
        pods::cli(
            &d,
            &[
                "delete",
                name,
                "--wait=false",
                "--grace-period",
                "0",
                "--force",
            ],
        )?;
    }
    for name in [
        "never-ok",
        "never-fail",
        "onfailure-ok",
        "onfailure-fail",
        "always-ok",
    ] {
        pods::wait_gone(&d, name, 30)?;
    }
    cri::assert_clean(&d)
}

/// A container that always fails is restarted after 1, 2, 4 s, then every 4 s (the configured
/// cap), and waits in CrashLoopBackOff in between.
fn crash_loop() -> Result<()> {
    let d = pods::daemon(4, "")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: crash}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "exit 3"]
"#
    );
    pods::apply(&d, &yaml)?;
    let start = Instant::now();
    let mut seen_backoff = false;
    let mut starts: Vec<(i32, Instant)> = Vec::new();
    while start.elapsed() < Duration::from_secs(30) {
        if let Some(p) = pods::get(&d, "crash")? {
            let n = pods::restarts(&p, "main");
            if starts.last().is_none_or(|(last, _)| n > *last) {
                starts.push((n, Instant::now()));
            }
            seen_backoff |= pods::waiting_reason(&p, "main") == "CrashLoopBackOff";
            if n >= 5 {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let gaps: Vec<f64> = starts
        .windows(2)
        .map(|w| (w[1].1 - w[0].1).as_secs_f64())
        .collect();
    println!("restart gaps (s): {gaps:.2?}");
    ensure!(seen_backoff, "never saw CrashLoopBackOff");
    ensure!(starts.len() >= 5, "restarts seen: {starts:?}");
    // gaps[0] is 1→2 (2 s back-off), then 4, 4 (capped); generous windows.
    let within = |g: f64, want: f64| g > want - 0.8 && g < want + 2.0;
    ensure!(
        within(gaps[1], 2.0),
        "second back-off {:.2} s, want ~2",
        gaps[1]
    );
    ensure!(
        within(gaps[2], 4.0),
        "third back-off {:.2} s, want ~4",
        gaps[2]
    );
    ensure!(
        within(gaps[3], 4.0),
        "capped back-off {:.2} s, want ~4",
        gaps[3]
    );
    let table = pods::cli(&d, &["get", "crash"])?;
    ensure!(
        table.contains("CrashLoopBackOff")
            || table.contains("Error")
            || table.contains("ExitCode:3"),
        "{table}"
    );
    let events = pods::events(&d, "crash")?;
    ensure!(events.contains("BackOff"), "no BackOff event:\n{events}");
    pods::delete_and_check(&d, "crash")
}

/// With a 4 s cap the back-off is forgotten after 8 s without a restart (twice the cap, the
/// kubelet's rule; 10 min with its default cap): a container that crashed three times, then
/// ran 10 s, is restarted after the initial 1 s, not the capped 4 s. In the same pod
/// (restartPolicy OnFailure) a sidecar that exits 0 is restarted all the same.
fn backoff_reset_and_sidecar_restart() -> Result<()> {
    let d = pods::daemon(4, "")?;
    let m = d.dir().join("markers");
    std::fs::create_dir_all(&m)?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: quiet}}
spec:
  restartPolicy: OnFailure
  terminationGracePeriodSeconds: 1
  initContainers:
  - name: side
    image: {BUSYBOX}
    imagePullPolicy: Never
    restartPolicy: Always
    command: [sh, -c, "sleep 1; exit 0"]
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, "{script}"]
    volumeMounts: [{{name: m, mountPath: /m}}]
  volumes:
  - {{name: m, hostPath: {{path: {m:?}, type: Directory}}}}
"#,
        // Start n writes "start<n> <uptime>"; the 4th run lasts 10 s; every run exits 1.
        script = "n=$(cat /m/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /m/n; \
                  read up rest < /proc/uptime; echo start$n $up >> /m/log; \
                  if [ $n -eq 4 ]; then sleep 10; fi; exit 1",
    );
    pods::apply(&d, &yaml)?;
    let log = m.join("log");
    let deadline = Instant::now() + Duration::from_secs(60);
    while pods::marker(&log, "start6").is_err() {
        ensure!(
            Instant::now() < deadline,
            "six starts not reached in 60 s:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let t = |n: u32| pods::marker(&log, &format!("start{n}"));
    let gaps = [
        t(2)? - t(1)?,
        t(3)? - t(2)?,
        t(4)? - t(3)?,
        t(5)? - t(4)? - 10.0,
        t(6)? - t(5)?,
    ];
    println!("back-off before starts 2..6 (s, the 10 s run taken out of the 4th): {gaps:.2?}");
    let within = |g: f64, want: f64| g > want - 0.8 && g < want + 1.5;
    ensure!(within(gaps[2], 4.0), "capped back-off {gaps:.2?}");
    ensure!(
        within(gaps[3], 1.0),
        "after a 10 s run (> 2 × 4 s cap) the back-off starts over at 1 s: {gaps:.2?}"
    );
    ensure!(within(gaps[4], 2.0), "then grows again: {gaps:.2?}");
    let p = pods::get(&d, "quiet")?.context("pod")?;
    let side = pods::restarts(&p, "side");
    ensure!(
        side >= 2,
        "the sidecar (exit 0 every second) restarted {side} times under restartPolicy OnFailure"
    );
    pods::delete_and_check(&d, "quiet")?;
    cri::assert_clean(&d)
}

/// An init container failing with restartPolicy Never makes the pod Failed; app containers
/// never start.
fn failed_init() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: badinit}}
spec:
  restartPolicy: Never
  initContainers:
  - {{name: init, image: {BUSYBOX}, imagePullPolicy: Never, command: [sh, -c, "exit 7"]}}
  containers:
  - {{name: app, image: {BUSYBOX}, imagePullPolicy: Never, command: [sleep, "100"]}}
"#
    );
    pods::apply(&d, &yaml)?;
    let p = pods::wait_for(&d, "badinit", 30, "Failed", |p| pods::phase(p) == "Failed")?;
    ensure!(!pods::running(&p, "app"), "app started after a failed init");
    ensure!(pods::condition(&p, "Initialized") == "False");
    let table = pods::cli(&d, &["get", "badinit"])?;
    ensure!(
        table.contains("Init:Error") || table.contains("Init:ExitCode:7"),
        "{table}"
    );
    pods::delete_and_check(&d, "badinit")
}

/// One bad document rejects the whole text: every error with its field path, nothing created.
fn invalid_manifests() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: fine}}
spec:
  containers: [{{name: a, image: {BUSYBOX}}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: Bad_Name}}
spec:
  restartPolicy: Sometimes
  containers:
  - name: a
    image: {BUSYBOX}
    livenessProbe: {{periodSeconds: 0}}
  - {{name: a, image: {BUSYBOX}}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {{name: dep}}
"#
    );
    let f = pods::manifest_file(&d, &yaml)?;
    let err = pods::cli_fails(&d, &["apply", "-f", &f.to_string_lossy()])?;
    for want in [
        "metadata.name",
        "spec.restartPolicy",
        "spec.containers[0].livenessProbe",
        "spec.containers[1].name",
        "Deployment",
    ] {
        ensure!(err.contains(want), "error lacks {want:?}:\n{err}");
    }
    let list = pods::cli(&d, &["get", "-A", "-o", "name"])?;
    ensure!(list.trim().is_empty(), "something was created: {list}");
    cri::assert_clean(&d)
}

/// Files in `[pod] manifest_dir` are pods: added → created, changed → replaced (new uid),
/// removed → deleted.
fn static_pods() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let dir = d.dir().join("manifests");
    std::fs::create_dir_all(&dir)?;
    let yaml = |cmd: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: static}}\nspec:\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {{name: a, image: {BUSYBOX}, imagePullPolicy: Never, command: [sh, -c, {cmd:?}]}}\n"
        )
    };
    std::fs::write(dir.join("static.yaml"), yaml("sleep 1000"))?;
    let p = pods::wait_for(&d, "static", 30, "running", |p| pods::running(p, "a"))?;
    let uid = p.metadata.uid.clone().unwrap_or_default();
    let source = p
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("kubernetes.io/config.source").cloned());
    ensure!(
        source.as_deref() == Some("file"),
        "config.source {source:?}"
    );
    std::fs::write(dir.join("static.yaml"), yaml("sleep 2000"))?;
    pods::wait_for(&d, "static", 30, "replaced with a new uid", |p| {
        p.metadata.uid.as_deref().is_some_and(|u| u != uid) && pods::running(p, "a")
    })?;
    std::fs::remove_file(dir.join("static.yaml"))?;
    pods::wait_gone(&d, "static", 30)?;
    cri::assert_clean(&d)
}

/// A sandbox made over CRI (as a kubelet would) survives the supervisor's resyncs; applying
/// the same manifest twice is `unchanged`.
fn cri_pods_untouched() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let yaml = one_shot("again", "Always", 0).replace("sleep 0.5; ", "sleep 1000; ");
    pods::apply(&d, &yaml)?;
    let out = pods::apply(&d, &yaml)?;
    ensure!(
        out.trim() == "pod/again unchanged",
        "second apply said {out:?}"
    );
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "kubelet-made")).await?;
            // Longer than the supervisor's 5 s resync.
            tokio::time::sleep(Duration::from_secs(7)).await;
            let st = rt
                .pod_sandbox_status(pb::PodSandboxStatusRequest {
                    pod_sandbox_id: pod.id.clone(),
                    verbose: false,
                })
                .await?
                .into_inner();
            ensure!(
                st.status.map(|s| s.state) == Some(pb::PodSandboxState::SandboxReady as i32),
                "the CRI pod was touched"
            );
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(())
        }),
    )?;
    pods::delete_and_check(&d, "again")
}

/// `bosun pod logs -f` keeps printing as the container restarts: each run writes a new log file
/// and the follower moves on to it, without being started again.
fn logs_follow() -> Result<()> {
    let d = pods::daemon(1, "")?;
    let yaml = format!(
        r#"apiVersion: v1
kind: Pod
metadata: {{name: chatty}}
spec:
  terminationGracePeriodSeconds: 1
  containers:
  - name: main
    image: {BUSYBOX}
    imagePullPolicy: Never
    command: [sh, -c, 'echo "run at $(cat /proc/uptime)"; sleep 1; exit 1']
"#
    );
    pods::apply(&d, &yaml)?;
    pods::wait_for(&d, "chatty", 30, "running", |p| pods::running(p, "main"))?;
    let follower = pods::Follower::start(&d, &["logs", "-f", "chatty"])?;
    let deadline = Instant::now() + Duration::from_secs(40);
    let mut runs = Vec::new();
    while runs.len() < 3 {
        match follower.line(deadline) {
            Some(line) if line.starts_with("run at ") => runs.push(line),
            Some(other) => anyhow::bail!("unexpected log line {other:?}"),
            None => break,
        }
    }
    drop(follower);
    ensure!(
        runs.len() == 3,
        "logs -f printed {runs:?}, want the first three runs"
    );
    let p = pods::get(&d, "chatty")?.context("chatty is gone")?;
    ensure!(pods::restarts(&p, "main") >= 2, "fewer than two restarts");
    pods::cli(&d, &["delete", "chatty", "--grace-period", "1"])?;
    pods::wait_gone(&d, "chatty", 30)?;
    cri::assert_clean(&d)
}

/// Every manifest in examples/ does what its comment says: web, sidecar and grpc become Ready,
/// crashloop crash-loops.
fn examples() -> Result<()> {
    let d = pods::daemon(10, "")?;
    cri::import(&d, "grpc-health")?;
    let dir = crate::support::repo_root().join("examples");
    let out = pods::cli(&d, &["apply", "-f", &dir.to_string_lossy()])?;
    for name in ["crashloop", "grpc", "sidecar", "web"] {
        ensure!(
            out.contains(&format!("pod/{name} created")),
            "apply said:\n{out}"
        );
    }
    for name in ["web", "sidecar", "grpc"] {
        pods::wait_for(&d, name, 40, "Ready", |p| {
            pods::condition(p, "Ready") == "True"
        })?;
    }
    let p = pods::wait_for(&d, "crashloop", 40, "CrashLoopBackOff", |p| {
        pods::restarts(p, "flaky") >= 1 && pods::waiting_reason(p, "flaky") == "CrashLoopBackOff"
    })?;
    ensure!(
        pods::phase(&p) == "Running",
        "crashloop phase {}",
        pods::phase(&p)
    );
    let previous = pods::cli(&d, &["logs", "crashloop", "--previous"])?;
    ensure!(
        previous.contains("starting") && previous.contains("giving up"),
        "{previous:?}"
    );
    let table = pods::cli(&d, &["get"])?;
    let row: Vec<&str> = table
        .lines()
        .find(|l| l.starts_with("sidecar "))
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    ensure!(row.get(1..3) == Some(&["2/2", "Running"][..]), "{table}");
    for name in ["crashloop", "grpc", "sidecar", "web"] {
        pods::cli(&d, &["delete", name, "--grace-period", "2", "--wait=false"])?;
    }
    for name in ["crashloop", "grpc", "sidecar", "web"] {
        pods::wait_gone(&d, name, 30)?;
    }
    cri::assert_clean(&d)
}
