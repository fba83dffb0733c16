//! Init containers one at a time in order, sidecars started before the next and stopped after
//! the app; a failed init container with restartPolicy Never failing the pod.

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::pods::{self, BUSYBOX};
use crate::support::trial;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::lifecycle::init_containers_in_order_sidecars_start_before_and_stop_after",
            NEEDS,
            init_and_sidecars,
        ),
        trial(
            "pod::lifecycle::failed_init_container_with_never_fails_the_pod",
            NEEDS,
            failed_init,
        ),
    ]
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
