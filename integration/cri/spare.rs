//! The spare monitor (issue 13): StartContainer hands a waiting `bosun monitor --standby` its container; the monitor it becomes is known by its command line across a daemon kill -9; a spare dies with its daemon.

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::Scenario;
use crate::support::{trial, wait_until};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::spare::starts_go_through_a_spare_that_dies_with_its_daemon",
        NEEDS,
        spare_monitor,
    )]
}

/// The live spare monitors of daemon `daemon`: processes running `bosun monitor --standby`
/// whose argument pipe (fd 4) the daemon holds the other end of. A spare forks away at once,
/// so it is no child of the daemon (its parent before the fork is not counted).
fn spares_of(daemon: i32) -> Vec<i32> {
    let held: Vec<_> = std::fs::read_dir(format!("/proc/{daemon}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .collect()
        })
        .unwrap_or_default();
    cri::pids()
        .into_iter()
        // The daemon's own child is the process that forks the spare away, about to exit.
        .filter(|p| cri::proc_state(*p).is_some_and(|(s, ppid)| s != 'Z' && ppid != daemon))
        .filter(|p| cri::cmdline(*p).get(1..3) == Some(&["monitor".into(), "--standby".into()]))
        .filter(|p| {
            std::fs::read_link(format!("/proc/{p}/fd/4"))
                .is_ok_and(|l| l.to_string_lossy().starts_with("pipe:") && held.contains(&l))
        })
        .collect()
}

fn live(pid: i32) -> bool {
    cri::proc_state(pid).is_some_and(|(s, _)| s != 'Z')
}

/// One spare of `daemon` within 10 s.
fn one_spare(daemon: i32) -> Result<i32> {
    let mut got = Vec::new();
    wait_until(10, || {
        got = spares_of(daemon);
        got.len() == 1
    });
    ensure!(got.len() == 1, "spares of daemon {daemon}: {got:?}");
    Ok(got[0])
}

/// A first start leaves one spare behind; the next start uses it (the spare becomes its
/// monitor, no child of the daemon, and another spare takes its place) and the monitor shows
/// `monitor --id <id> …` like a spawned one; a start whose
/// command line cannot fit the spare's (a 2.3 KB log path) spawns its own and leaves the spare
/// alone. kill -9 of the daemon: its spare exits; the restarted daemon stops the containers
/// the spare-born monitors run, with the exit codes they record.
fn spare_monitor() -> Result<()> {
    Scenario::new().run(async |s| {
        let busybox = s.image("busybox");
        let d = &s.daemon;
        let daemon = d.pid().context("daemon pid")? as i32;
        let trap = "trap 'exit 7' TERM; echo up; sleep 3600 & wait";
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, ids, spare) = async {
            let pod = cri::run_pod(&mut rt, cri::pod_config(d, "spare")).await?;
            ensure!(spares_of(daemon).is_empty(), "a spare before any start");
            let mut logs = Vec::new();
            let first = cri::sh_config(&pod, "first", &busybox, trap);
            logs.push(pod.log_of(&first));
            let first = cri::create_start(&mut rt, &pod, &first).await?;
            let spare = one_spare(daemon)?;

            let second = cri::sh_config(&pod, "second", &busybox, trap);
            logs.push(pod.log_of(&second));
            let second = cri::create_start(&mut rt, &pod, &second).await?;
            // The spare became the second container's monitor, in place.
            let monitors = cri::monitors_of(&second);
            ensure!(
                monitors == [spare],
                "monitors of {second}: {monitors:?}, the spare was {spare}"
            );
            ensure!(
                cri::proc_state(spare).is_some_and(|(_, ppid)| ppid != daemon),
                "the spare {spare} is still the daemon's child"
            );
            let argv = cri::cmdline(monitors[0]);
            ensure!(
                argv.iter().any(|a| a == "--bundle") && argv.iter().any(|a| a == "--exit-file"),
                "the monitor's command line: {argv:?}"
            );
            let spare = one_spare(daemon)?;
            // The processes that forked the spares away were reaped, not left as zombies.
            let zombies = || {
                cri::pids()
                    .into_iter()
                    .filter(|p| cri::proc_state(*p) == Some(('Z', daemon)))
                    .collect::<Vec<_>>()
            };
            ensure!(
                wait_until(5, || zombies().is_empty()),
                "zombie children of the daemon: {:?}",
                zombies()
            );

            // A log path longer than the spare's room: the start spawns a monitor of its own.
            let deep: String = (0..9)
                .map(|i| format!("{}/", format!("{i}").repeat(250)))
                .collect();
            std::fs::create_dir_all(pod.log_dir().join(&deep))?;
            let mut long = cri::sh_config(&pod, "long", &busybox, trap);
            long.log_path = format!("{deep}long.log");
            logs.push(pod.log_of(&long));
            let long = cri::create_start(&mut rt, &pod, &long).await?;
            ensure!(
                cri::monitors_of(&long).len() == 1,
                "monitor of {long}: {:?}",
                cri::monitors_of(&long)
            );
            ensure!(
                spares_of(daemon) == [spare],
                "the spare after a start that did not fit it: {:?} (was {spare})",
                spares_of(daemon)
            );
            let ids = vec![
                (first, logs[0].clone()),
                (second, logs[1].clone()),
                (long, logs[2].clone()),
            ];
            for (id, log) in &ids {
                // The trap is set once `up` is written.
                cri::wait_log(log, 10, |l| l.iter().any(|x| x == "up"))
                    .await
                    .with_context(|| format!("container {id}"))?;
            }
            Ok::<_, anyhow::Error>((pod, ids, spare))
        }
        .await?;
        let d = &mut s.daemon;
        d.kill9();
        ensure!(
            wait_until(10, || !live(spare)),
            "the spare {spare} outlived its daemon"
        );
        d.restart()?;
        s.reconnect().await?;
        let mut rt = s.rt.clone();
        async {
            for (id, log) in &ids {
                cri::stop(&mut rt, id, 10).await?;
                let s = cri::wait_exited(&mut rt, id, 10).await?;
                cri::check_exit(&s, 7, "Error").with_context(|| format!("container {id}"))?;
                let log = cri::read_log(log)?;
                ensure!(cri::lines_of(&log, "stdout") == ["up"], "{id}: {log:?}");
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }
        .await?;
        Ok(())
    })
}
