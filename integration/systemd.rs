//! bosun under systemd: the shipped unit (Type=notify, KillMode=process, Delegate, restart on failure) keeps containers across restarts and crashes; READY only once serving.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cgroup::{self, unit_property};
use crate::support::cri;
use crate::support::{block_on, runc_bin, trial, wait_until, Daemon, Need};

const UNIT_NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::SystemdV2];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "systemd::unit_restart_and_crash_keep_containers_running",
            UNIT_NEEDS,
            unit_keeps_containers,
        ),
        trial(
            "systemd::ready_is_notified_once_serving_and_not_inherited",
            cri::NEEDS,
            ready_once_serving,
        ),
    ]
}

/// The unified-hierarchy cgroup of a process (`0::<path>` of /proc/PID/cgroup).
fn cgroup_of(pid: i64) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .unwrap_or_default()
        .to_string()
}

/// The container is still the same process, RUNNING for the daemon, and still serves exec.
async fn still_running(d: &Daemon, id: &str, pid: i64, when: &str) -> Result<()> {
    let mut rt = cri::client(d).await?;
    let s = cri::status(&mut rt, id).await?;
    ensure!(
        cri::state_of(&s) == pb::ContainerState::ContainerRunning,
        "{when}: the container is {:?}",
        cri::state_of(&s)
    );
    let now = cri::init_pid(d, id)?;
    ensure!(
        now == pid,
        "{when}: the container's init is {now}, was {pid}"
    );
    let r = cri::exec(&mut rt, id, &["echo", "alive"], 20).await?;
    ensure!(
        r.exit_code == 0 && String::from_utf8_lossy(&r.stdout).trim() == "alive",
        "{when}: exec: {r:?}"
    );
    Ok(())
}

fn unit_keeps_containers() -> Result<()> {
    let runc = runc_bin().context("runc")?;
    let mut d = Daemon::start_unit(&format!("runtime = {:?}\n", runc.display().to_string()))?;
    let unit = d.unit().context("no unit")?.to_string();
    // `systemctl start` returned: READY came, so the socket serves already.
    ensure!(
        std::os::unix::net::UnixStream::connect(d.socket()).is_ok(),
        "the socket does not answer when systemctl start returns"
    );
    for (property, want) in [
        ("Type", "notify"),
        ("NotifyAccess", "main"),
        ("KillMode", "process"),
        ("Delegate", "yes"),
        ("Restart", "on-failure"),
        ("ActiveState", "active"),
    ] {
        let got = unit_property(&unit, property);
        ensure!(got == want, "{unit}: {property}={got}, want {want}");
    }
    let busybox = cri::import(&d, "busybox")?;
    let (pod, id, config) = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "unit")).await?;
            let c = cri::sh_config(
                &pod,
                "ticker",
                &busybox,
                "trap 'exit 3' TERM; i=0; while :; do echo tick $i; i=$((i+1)); sleep 0.2; done",
            );
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            cri::wait_log(&pod.log_of(&c), 20, |l| l.len() >= 2).await?;
            Ok::<_, anyhow::Error>((pod, id, c))
        }),
    )?;
    let pid = cri::init_pid(&d, &id)?;
    let monitors = cri::monitors_of(&id);
    ensure!(monitors.len() == 1, "monitors of {id}: {monitors:?}");
    // The monitor lives in the unit's cgroup (KillMode=process spares it); the container in
    // its own cgroup, outside the unit; neither inherited systemd's notify socket.
    let unit_cgroup = cgroup_of(d.pid().context("no MainPID")?.into());
    ensure!(
        cgroup_of(monitors[0].into()) == unit_cgroup,
        "monitor in {:?}, the unit in {unit_cgroup:?}",
        cgroup_of(monitors[0].into())
    );
    ensure!(
        cgroup_of(pid) == cgroup::container_dir(&d.cgroup_parent(), &id),
        "container init in {:?}",
        cgroup_of(pid)
    );
    let environ = std::fs::read(format!("/proc/{}/environ", monitors[0]))?;
    ensure!(
        !String::from_utf8_lossy(&environ).contains("NOTIFY_SOCKET="),
        "the monitor inherited NOTIFY_SOCKET"
    );

    // `systemctl restart`: a new daemon, the same container.
    let before = d.pid();
    let t = Instant::now();
    cgroup::systemctl(&["restart", &unit])?;
    eprintln!("systemctl restart {unit}: {:?} until READY", t.elapsed());
    ensure!(d.pid() != before, "MainPID unchanged after restart");
    ensure!(
        cri::monitors_of(&id) == monitors,
        "the monitor was replaced"
    );
    cri::with_log(&d, block_on(still_running(&d, &id, pid, "after restart")))?;

    // A crash (SIGKILL of the main process): systemd restarts it, the container stays.
    let crashed = d.pid();
    d.kill9();
    let restarted = wait_until(60, || {
        d.pid().is_some_and(|p| Some(p) != crashed)
            && unit_property(&unit, "ActiveState") == "active"
    });
    ensure!(
        restarted,
        "{unit} not restarted after SIGKILL: {} / MainPID {:?}; NRestarts {}",
        unit_property(&unit, "ActiveState"),
        d.pid(),
        unit_property(&unit, "NRestarts")
    );
    cri::with_log(&d, block_on(still_running(&d, &id, pid, "after the crash")))?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let lines = cri::read_log(&pod.log_of(&config))?.len();
            ensure!(lines > 2, "the log did not grow: {lines} lines");
            cri::stop(&mut rt, &id, 10).await?;
            cri::check_exit(&cri::status(&mut rt, &id).await?, 3, "Error")?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    // `systemctl stop`: a clean exit, and nothing left of the pod.
    let st = d.terminate().context("systemctl stop")?;
    ensure!(st.success(), "{unit} stopped with {st}");
    cri::assert_clean(&d)
}

/// Outside systemd too: READY=1 reaches `$NOTIFY_SOCKET` only when the socket already
/// answers, STOPPING=1 comes with SIGTERM, and containers never see the variable (runc would
/// hold `runc start` until the container itself sent READY).
fn ready_once_serving() -> Result<()> {
    let dir = crate::support::scratch()?;
    let path = dir.path().join("notify");
    let listener = UnixDatagram::bind(&path)?;
    listener.set_read_timeout(Some(Duration::from_secs(30)))?;
    let runc = runc_bin().context("runc")?;
    let mut d = Daemon::start_with_env(
        &format!("runtime = {:?}\n", runc.display().to_string()),
        &[("NOTIFY_SOCKET", &path.display().to_string())],
    )?;
    let mut buf = [0u8; 256];
    let n = listener
        .recv(&mut buf)
        .context("no READY from the daemon")?;
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    ensure!(msg.lines().any(|l| l == "READY=1"), "first message {msg:?}");
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "notify")).await?;
            let c = cri::sh_config(&pod, "env", &busybox, "env; exec sleep 1000");
            let t = Instant::now();
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            ensure!(
                t.elapsed() < Duration::from_secs(20),
                "create+start took {:?}",
                t.elapsed()
            );
            let log = cri::wait_log(&pod.log_of(&c), 20, |l| {
                l.iter().any(|x| x.starts_with("PATH="))
            })
            .await?;
            let lines = cri::lines_of(&log, "stdout");
            ensure!(
                !lines.iter().any(|l| l.starts_with("NOTIFY_SOCKET")),
                "the container sees NOTIFY_SOCKET: {lines:?}"
            );
            let monitor = cri::monitors_of(&id);
            let environ = std::fs::read(format!("/proc/{}/environ", monitor[0]))?;
            ensure!(
                !String::from_utf8_lossy(&environ).contains("NOTIFY_SOCKET="),
                "the monitor inherited NOTIFY_SOCKET"
            );
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    let st = d.terminate().context("no exit status")?;
    ensure!(st.success(), "SIGTERM: {st}");
    let n = listener.recv(&mut buf).context("no STOPPING")?;
    let msg = String::from_utf8_lossy(&buf[..n]).to_string();
    ensure!(msg.contains("STOPPING=1"), "on SIGTERM: {msg:?}");
    cri::assert_clean(&d)
}
