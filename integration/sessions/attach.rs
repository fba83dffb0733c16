//! Attach through the monitor: two attaches, stdin, detach and exit; a terminal, its resize
//! and stdin_once; a stuck attach blocking neither the container nor its log.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::runtime::{SessionEnd, TerminalSize};
use bosun::ErrorKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::support::cri::NEEDS;
use crate::support::sessions::{end_of, read_all, read_until, req, running, with_runtime};
use crate::support::{trial, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "sessions::attach::two_attaches_stdin_detach_and_exit",
            NEEDS,
            attach_basics,
        ),
        trial(
            "sessions::attach::tty_resize_stdin_once_and_errors",
            NEEDS,
            attach_tty,
        ),
        trial(
            "sessions::attach::a_stuck_attach_blocks_neither_container_nor_log",
            // Pushes MiBs of output through a stuck session within seconds: a slow lane's
            // container writes ~30 KiB/s, too little to fill what the session buffers.
            &[Need::Root, Need::Runc, Need::Images, Need::Punctual],
            attach_stuck,
        ),
    ]
}

/// Reads once more from `r` into `seen` (at most 5 s).
async fn read_more(r: &mut (dyn AsyncRead + Send + Unpin), seen: &mut Vec<u8>) -> Result<()> {
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(5), r.read(&mut buf))
        .await
        .context("no output")??;
    ensure!(n > 0, "EOF");
    seen.extend_from_slice(&buf[..n]);
    Ok(())
}

/// `line <n>` numbers in `text`.
fn numbers(text: &str) -> Vec<u64> {
    text.lines()
        .filter_map(|l| l.strip_prefix("line ")?.trim().parse().ok())
        .collect()
}

fn attach_basics() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let ticker = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.05; done";
            let id = env.container(sb, "ticker", ticker, |_| {}).await?;
            let mut a = env.rt.attach(&id, req(false, true, true, false)).await?;
            let mut b = env.rt.attach(&id, req(false, true, false, false)).await?;
            ensure!(
                a.stderr.is_some() && b.stderr.is_none() && a.resize.is_none(),
                "streams: {a:?} {b:?}"
            );
            let (mut sa, mut sb_) = (Vec::new(), Vec::new());
            let mut ra = a.stdout.take().context("a stdout")?;
            let mut rb = b.stdout.take().context("b stdout")?;
            // Both see the same lines: wait until both saw a line the other saw after it.
            let mut seen_both = None;
            let deadline = Instant::now() + Duration::from_secs(10);
            while seen_both.is_none() && Instant::now() < deadline {
                read_more(&mut ra, &mut sa).await?;
                read_more(&mut rb, &mut sb_).await?;
                let (na, nb) = (
                    numbers(&String::from_utf8_lossy(&sa)),
                    numbers(&String::from_utf8_lossy(&sb_)),
                );
                let common: Vec<u64> = na.iter().filter(|n| nb.contains(n)).copied().collect();
                if common.len() >= 3 {
                    seen_both = Some(common);
                }
            }
            let common = seen_both.context("the two attaches never saw the same lines")?;
            ensure!(
                common.windows(2).all(|w| w[1] == w[0] + 1),
                "gaps in {common:?}"
            );
            // Detach both: the container keeps running.
            drop((ra, rb));
            ensure!(
                end_of(b.done, 5).await.context("b")? == SessionEnd::Detached,
                "b detached"
            );
            drop(a);
            tokio::time::sleep(Duration::from_millis(300)).await;
            ensure!(running(env, &id), "detaching stopped the container");
            // The log kept flowing: it has lines beyond what the attaches saw (a slow lane's
            // ticker may take longer than the 300 ms above to print three more).
            let max = common.iter().max().copied().unwrap_or(0);
            let log_path = env.log_of(sb, "ticker")?;
            let want = format!(" stdout F line {}\n", max + 3);
            ensure!(
                crate::support::wait_until(2, || std::fs::read_to_string(&log_path)
                    .is_ok_and(|log| log.contains(&want))),
                "log stopped?"
            );

            // stdin through attach reaches `cat`; a detach keeps it running; exit ends attach.
            let cat = env
                .container(sb, "cat", "cat; echo bye; exit 4", |r| r.stdin = true)
                .await?;
            let mut s = env.rt.attach(&cat, req(true, true, true, false)).await?;
            let mut stdin = s.stdin.take().context("stdin")?;
            let mut out = s.stdout.take().context("stdout")?;
            let mut seen = Vec::new();
            stdin.write_all(b"hello attach\n").await?;
            read_until(&mut out, &mut seen, "hello attach\n", 10).await?;
            drop((stdin, out, s.stderr.take()));
            ensure!(
                end_of(s.done, 5).await.context("cat detach")? == SessionEnd::Detached,
                "detached"
            );
            ensure!(
                running(env, &cat),
                "cat stopped after a detach (no stdin-once)"
            );
            let mut s = env.rt.attach(&cat, req(true, true, false, false)).await?;
            let mut stdin = s.stdin.take().context("stdin")?;
            let mut out = s.stdout.take().context("stdout")?;
            let mut seen = Vec::new();
            stdin.write_all(b"second\n").await?;
            read_until(&mut out, &mut seen, "second\n", 10).await?;
            // Without stdin-once an attach's EOF does not close the container's stdin.
            stdin.shutdown().await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            ensure!(running(env, &cat), "stdin closed without stdin-once");
            drop(s);
            // The container ends; a session attached then ends with its exit code.
            let mut s = env.rt.attach(&cat, req(false, true, false, false)).await?;
            let reader = tokio::spawn(read_all(s.stdout.take()));
            let pid = env.rt.container(&cat)?.status().pid;
            let cat_pid = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))?;
            let cat_pid: i32 = cat_pid
                .split_whitespace()
                .next()
                .context("cat's pid")?
                .parse()?;
            rustix::process::kill_process(
                rustix::process::Pid::from_raw(cat_pid).context("pid")?,
                rustix::process::Signal::TERM,
            )?;
            ensure!(
                end_of(s.done, 10).await.context("cat exit")? == SessionEnd::Exited(4),
                "attach end on exit"
            );
            let out = reader.await??;
            ensure!(out == b"bye\n", "last words {out:?}");
            Ok(())
        })
    })
}

fn attach_tty() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let id = env
                .container(sb, "shell", "exec sh", |r| {
                    r.tty = true;
                    r.stdin = true;
                })
                .await?;
            let mut s = env.rt.attach(&id, req(true, true, true, true)).await?;
            ensure!(s.stderr.is_none(), "a terminal has one output");
            let resize = s.resize.clone().context("resize")?;
            let mut stdin = s.stdin.take().context("stdin")?;
            let mut out = s.stdout.take().context("stdout")?;
            resize.send(TerminalSize {
                width: 77,
                height: 33,
            })?;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut seen = Vec::new();
            stdin.write_all(b"stty size; tty\n").await?;
            read_until(&mut out, &mut seen, "33 77", 10).await?;
            read_until(&mut out, &mut seen, "/dev/pts/", 10).await?;
            drop((stdin, out, resize));
            ensure!(end_of(s.done, 5).await? == SessionEnd::Detached, "detached");
            tokio::time::sleep(Duration::from_millis(200)).await;
            ensure!(running(env, &id), "tty container stopped after a detach");

            // stdin-once: the first attach's stdin EOF ends `cat`'s input, and the container.
            let once = env
                .container(sb, "once", "cat; exit 6", |r| {
                    r.stdin = true;
                    r.stdin_once = true;
                })
                .await?;
            let mut s = env.rt.attach(&once, req(true, true, false, false)).await?;
            let mut stdin = s.stdin.take().context("stdin")?;
            let reader = tokio::spawn(read_all(s.stdout.take()));
            stdin.write_all(b"only once\n").await?;
            stdin.shutdown().await?;
            ensure!(
                end_of(s.done, 10).await? == SessionEnd::Exited(6),
                "stdin-once exit"
            );
            ensure!(reader.await?? == b"only once\n", "stdin-once output");

            // Errors: no stdin asked of a container without one; a monitor with no socket
            // (as an older bosun's); a container that is not running.
            let plain = env
                .container(sb, "plain", "exec sleep 1000", |_| {})
                .await?;
            let e = env
                .rt
                .attach(&plain, req(true, true, false, false))
                .await
                .err()
                .context("stdin on a stdin-less container")?;
            ensure!(e.kind() == ErrorKind::FailedPrecondition, "{e}");
            let sock = env
                .rt
                .container(&plain)?
                .meta()
                .state_dir
                .join("bundle/attach.sock");
            ensure!(sock.exists(), "no attach socket at {}", sock.display());
            std::fs::remove_file(&sock)?;
            let e = env
                .rt
                .attach(&plain, req(false, true, false, false))
                .await
                .err()
                .context("old monitor")?;
            ensure!(
                e.kind() == ErrorKind::FailedPrecondition && e.to_string().contains("older bosun"),
                "{e}"
            );
            let e = env
                .rt
                .attach(&once, req(false, true, false, false))
                .await
                .err()
                .context("exited")?;
            ensure!(e.kind() == ErrorKind::FailedPrecondition, "{e}");
            let e = env
                .rt
                .attach("no-such", req(false, true, false, false))
                .await
                .err()
                .context("unknown")?;
            ensure!(e.kind() == ErrorKind::NotFound, "{e}");
            Ok(())
        })
    })
}

fn attach_stuck() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            // ~2.5 MiB/s of output, numbered lines.
            let spew = "i=0; while true; do echo line $i $(head -c 2000 /dev/zero | tr '\\000' x); i=$((i+1)); done";
            let id = env.container(sb, "spew", spew, |_| {}).await?;
            let log = env.log_of(sb, "spew")?;
            let size = |p: &std::path::Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
            let growth = || async {
                let before = size(&log);
                tokio::time::sleep(Duration::from_secs(2)).await;
                size(&log) - before
            };
            let alone = growth().await;
            // An attach that never reads: the log grows as fast as without it, well past what
            // the socket and the session can buffer.
            let stuck = env.rt.attach(&id, req(false, true, true, false)).await?;
            let at_attach = size(&log);
            let with_stuck = growth().await;
            eprintln!("log growth in 2 s: {alone} bytes alone, {with_stuck} with a stuck attach");
            ensure!(
                with_stuck > alone / 4 && with_stuck > 256 << 10,
                "log grew {with_stuck} bytes with a stuck attach, {alone} without"
            );
            // A live attach still gets output while the stuck one is there.
            let mut live = env.rt.attach(&id, req(false, true, false, false)).await?;
            let mut out = live.stdout.take().context("stdout")?;
            let mut seen = Vec::new();
            read_until(&mut out, &mut seen, "\nline ", 10).await?;
            // The monitor queues up to 4 MiB for a lagging client, then drops it: once 8 MiB
            // more went to the log the stuck session is surely dropped; reading, it ends detached.
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while size(&log).saturating_sub(at_attach) < 8 << 20 {
                ensure!(
                    std::time::Instant::now() < deadline,
                    "the log stopped growing"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let mut stuck = stuck;
            let drained = tokio::spawn(read_all(stuck.stdout.take()));
            let _ = tokio::time::timeout(Duration::from_secs(20), read_all(stuck.stderr.take()))
                .await
                .context("the stuck attach's stderr did not end: not dropped")?;
            let got = tokio::time::timeout(Duration::from_secs(20), drained)
                .await
                .context("the stuck attach's stdout did not end: not dropped")???;
            ensure!(!got.is_empty(), "the stuck attach got nothing at all");
            ensure!(
                end_of(stuck.done, 10).await? == SessionEnd::Detached,
                "stuck attach end"
            );
            ensure!(running(env, &id), "the container stopped");
            drop((out, live));
            Ok(())
        })
    })
}
