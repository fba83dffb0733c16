//! `bosun attach`: two attached clients and a detach, a slow reader getting every byte, and a
//! reader lagging when the container exits.

use std::time::Duration;

use anyhow::{ensure, Context, Result};

use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::daemon::Daemon;
use crate::support::streaming::{
    bosun, lines_of, show, spawn_bosun, target, KillOnDrop, TRANSPORTS,
};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial("cri::streaming::attach_two_and_detach", NEEDS, attach),
        trial(
            "cri::streaming::a_slow_attach_reader_gets_every_byte",
            NEEDS,
            slow_attach,
        ),
        trial(
            "cri::streaming::an_attach_reader_lagging_at_the_exit_gets_every_byte",
            NEEDS,
            attach_lagging_at_exit,
        ),
    ]
}

fn attach() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(
            d,
            &mut rt,
            "stream-attach",
            "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done",
        )
        .await?;
        let mut a = spawn_bosun(d, &["attach", "--transport", "spdy", &id])?;
        let mut b = spawn_bosun(d, &["attach", "--transport", "websocket", &id])?;
        let (la, lb) = (lines_of(&mut a)?, lines_of(&mut b)?);
        for (name, rx) in [("spdy", &la), ("websocket", &lb)] {
            let line = rx
                .recv_timeout(Duration::from_secs(10))
                .with_context(|| format!("{name} attach saw no output"))?;
            ensure!(line.starts_with("tick-"), "{name} attach: {line:?}");
        }
        // Detaching one leaves the container and the other attach running.
        drop(a);
        tokio::time::sleep(Duration::from_millis(600)).await;
        let line = lb
            .recv_timeout(Duration::from_secs(5))
            .context("the remaining attach stopped")?;
        ensure!(
            line.starts_with("tick-"),
            "websocket attach after the detach: {line:?}"
        );
        drop(b);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let s = cri::status(&mut rt, &id).await?;
        ensure!(
            cri::state_of(&s) == pb::ContainerState::ContainerRunning,
            "container after detaching: {:?}",
            cri::state_of(&s)
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// An attach client that stops reading for 4 s while the container writes ~2 MiB still gets
/// every byte, in order (the monitor queues up to 4 MiB per lagging client), over each
/// transport.
/// Attaches to `id` over transport `t`, then lets its script go (`touch /tmp/go`) once the
/// attach stream is up; the CLI and its unread stdout.
async fn attach_and_go(
    d: &Daemon,
    t: &str,
    id: &str,
) -> Result<(KillOnDrop, std::process::ChildStdout)> {
    let mut child = spawn_bosun(d, &["attach", "--transport", t, id])?;
    let out = child
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .context("stdout")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ok = bosun(d, &["exec", id, "--", "touch", "/tmp/go"], None)?;
    ensure!(ok.status.success(), "exec: {}", show(&ok));
    Ok((child, out))
}

/// `got` is `expected` (a `seq` output) then `done`; the attach may start mid-way through
/// what came before, but everything from `1` on must be whole.
fn check_seq(t: &str, got: &[u8], expected: &str) -> Result<()> {
    let text = String::from_utf8_lossy(got);
    let body = text.strip_suffix("done\n").unwrap_or(&text);
    let start = body.find("1\n2\n3\n").unwrap_or(0);
    ensure!(
        body[start..] == *expected && text.ends_with("done\n"),
        "{t}: got {} bytes, want {} and done (first difference at {:?})",
        text.len() - start,
        expected.len() + 5,
        body[start..]
            .bytes()
            .zip(expected.bytes())
            .position(|(a, b)| a != b)
    );
    Ok(())
}

fn slow_attach() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(
            d,
            &mut rt,
            "stream-slow-attach",
            "while true; do while [ ! -f /tmp/go ]; do sleep 0.1; done; rm /tmp/go; \
             seq 1 300000; echo done; done",
        )
        .await?;
        let expected: String = (1..=300000).map(|i| format!("{i}\n")).collect();
        for t in TRANSPORTS {
            let (child, mut out) = attach_and_go(d, t, &id).await?;
            // Not reading: the CLI's stdout pipe fills, the stream backs up to the monitor.
            tokio::time::sleep(Duration::from_secs(4)).await;
            let reader = std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut buf = [0u8; 65536];
                while let Ok(n) = std::io::Read::read(&mut out, &mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.extend_from_slice(&buf[..n]);
                    if got.ends_with(b"done\n") {
                        break;
                    }
                }
                got
            });
            let got = tokio::task::spawn_blocking(move || reader.join())
                .await?
                .map_err(|_| anyhow::anyhow!("reader panicked"))?;
            check_seq(t, &got, &expected)?;
            drop(child);
        }
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

/// An attach client that is still behind when the container exits: the monitor holds what
/// the client has not taken yet (2 MB, within its 4 MiB queue) and must send it before it ends
/// the stream, rather than drop it with the exit (found by the kubectl test in CI).
fn attach_lagging_at_exit() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let busybox = cri::import(d, "busybox")?;
        let expected: String = (1..=300000).map(|i| format!("{i}\n")).collect();
        for t in TRANSPORTS {
            let pod = cri::run_pod(&mut rt, cri::pod_config(d, &format!("lag-{t}"))).await?;
            let script = "echo ready; while [ ! -f /tmp/go ]; do sleep 0.1; done; \
                          seq 1 300000; echo done";
            let c = cri::sh_config(&pod, "target", &busybox, script);
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let log = pod.log_of(&c);
            cri::wait_log(&log, 10, |l| l.iter().any(|x| x == "ready")).await?;
            let (child, mut out) = attach_and_go(d, t, &id).await?;
            // Not reading until the container wrote its last line and exits: the monitor
            // has logged everything, and holds most of it for this client.
            cri::wait_log(&log, 20, |l| l.last().is_some_and(|x| x == "done")).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            let got = tokio::task::spawn_blocking(move || {
                let mut got = Vec::new();
                std::io::Read::read_to_end(&mut out, &mut got).map(|_| got)
            })
            .await??;
            check_seq(t, &got, &expected)?;
            let s = cri::wait_exited(&mut rt, &id, 10).await?;
            cri::check_exit(&s, 0, "Completed")?;
            drop(child);
            cri::remove_pod(&mut rt, &pod.id).await?;
        }
        Ok(())
    })
}
