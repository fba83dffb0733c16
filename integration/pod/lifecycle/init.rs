//! Init containers one at a time in order, sidecars started before the next and stopped after
//! the app; a failed init container with restartPolicy Never failing the pod.

use anyhow::{ensure, Context, Result};

use crate::support::cri::NEEDS;
use crate::support::manifest::{busybox, PodManifest, ProbeManifest};
use crate::support::pods;
use crate::support::trial;
use crate::support::Scenario;

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
    Scenario::supervisor(10).run_sync(|d| {
        let m = d.dir().join("markers");
        std::fs::create_dir_all(&m)?;
        // No quotes: some markers run inside single-quoted traps.
        let mark = |label: &str| format!("read up rest < /proc/uptime; echo {label} $up >> /m/log");
        // The sidecar's exec probe must fit its timeout on a slow lane too (a runc exec under qemu
        // TCG takes over a second: 30 timeouts in a row restarted the sidecar there).
        let timeout = crate::support::time_scale();
        let yaml = PodManifest::new("order")
            .grace(10)
            .init_container(
                busybox("first")
                    .sh(&format!("{}; sleep 1", mark("first")))
                    .mount("m", "/m"),
            )
            .init_container(
                busybox("side")
                    .restart_policy("Always")
                    .sh(&format!(
                        "trap '{}; exit 0' TERM; sleep 1; {}; touch /tmp/up; while true; do sleep 0.2; done",
                        mark("side-term"),
                        mark("side-up")
                    ))
                    .startup(
                        ProbeManifest::exec(&["test", "-f", "/tmp/up"])
                            .period(1)
                            .timeout(timeout as i32)
                            .failures(30),
                    )
                    .mount("m", "/m"),
            )
            .init_container(busybox("second").sh(&mark("second")).mount("m", "/m"))
            .container(
                busybox("app")
                    .sh(&format!(
                        "trap '{}; sleep 1; {}; exit 0' TERM; {}; while true; do sleep 0.2; done",
                        mark("app-term"),
                        mark("app-exit"),
                        mark("app")
                    ))
                    .mount("m", "/m"),
            )
            .host_path("m", &m.to_string_lossy(), Some("Directory"))
            .yaml();
        pods::apply(d, &yaml)?;
        let p = pods::wait_for(d, "order", 40, "app running", |p| pods::running(p, "app"))?;
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
        cli_delete_wait(d, "order")?;
        ensure!(
            t("app-exit")? <= t("side-term")?,
            "the sidecar got TERM before the app exited:\n{}",
            std::fs::read_to_string(&log)?
        );
        Ok(())
    })
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
    let yaml = PodManifest::new("badinit")
        .restart_policy("Never")
        .init_container(busybox("init").sh("exit 7"))
        .container(busybox("app").command(&["sleep", "100"]))
        .yaml();
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
