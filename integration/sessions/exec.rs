//! Streaming exec sessions on real runc containers: output, exit codes, stdin and EOF, errors;
//! a terminal and its resize; 10 MiB without loss; a dropped session and a stopped container
//! killing the process.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::runtime::{SessionEnd, TerminalSize};
use bosun::ErrorKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::support::cri::{processes_with_argv, NEEDS};
use crate::support::inproc::InProc;
use crate::support::sessions::{argv, end_of, read_all, read_until, req, with_runtime};
use crate::support::{trial, wait_until};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "sessions::exec::output_exit_codes_stdin_eof_and_errors",
            NEEDS,
            exec_basics,
        ),
        trial("sessions::exec::tty_resize_and_eof", NEEDS, exec_tty),
        trial(
            "sessions::exec::ten_mib_without_loss_and_latency",
            NEEDS,
            exec_large,
        ),
        trial(
            "sessions::exec::dropped_session_and_container_stop_kill_the_process",
            NEEDS,
            exec_kills,
        ),
    ]
}

/// Runs `cmd` without stdin; returns (stdout, stderr, end).
async fn run(env: &InProc, id: &str, cmd: &[&str]) -> Result<(Vec<u8>, Vec<u8>, SessionEnd)> {
    let s = env
        .rt
        .exec(id, argv(cmd), req(false, true, true, false))
        .await?;
    let (out, err) = tokio::join!(read_all(s.stdout), read_all(s.stderr));
    Ok((out?, err?, end_of(s.done, 20).await?))
}

fn exec_basics() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let id = env
                .container(sb, "target", "exec sleep 1000", |_| {})
                .await?;
            let (out, err, end) = run(env, &id, &["echo", "hi"]).await?;
            ensure!(out == b"hi\n" && err.is_empty(), "echo: {out:?} {err:?}");
            ensure!(end == SessionEnd::Exited(0), "echo ended {end:?}");

            let (out, err, end) =
                run(env, &id, &["sh", "-c", "echo out; echo err >&2; exit 3"]).await?;
            ensure!(
                out == b"out\n" && err == b"err\n",
                "streams: {out:?} {err:?}"
            );
            ensure!(end == SessionEnd::Exited(3), "exit 3 ended {end:?}");

            // runc exec reports a signalled process as 128+signal.
            let (_, _, end) = run(env, &id, &["sh", "-c", "kill -TERM $$"]).await?;
            ensure!(end == SessionEnd::Exited(143), "SIGTERM ended {end:?}");

            // stdin EOF: `cat` ends once stdin is shut down.
            let mut s = env
                .rt
                .exec(&id, argv(&["cat"]), req(true, true, false, false))
                .await?;
            ensure!(
                s.stderr.is_none() && s.resize.is_none(),
                "unasked streams: {s:?}"
            );
            let mut stdin = s.stdin.take().context("no stdin")?;
            let reader = tokio::spawn(read_all(s.stdout.take()));
            stdin.write_all(b"line one\nline two\n").await?;
            stdin.shutdown().await?;
            let out = tokio::time::timeout(Duration::from_secs(10), reader)
                .await
                .context("cat did not end after stdin EOF")???;
            ensure!(out == b"line one\nline two\n", "cat echoed {out:?}");
            ensure!(
                end_of(s.done, 10).await? == SessionEnd::Exited(0),
                "cat exit"
            );

            // Only stderr asked: stdout goes to /dev/null, the process does not block.
            let s = env
                .rt
                .exec(
                    &id,
                    argv(&["sh", "-c", "echo dropped; echo kept >&2"]),
                    req(false, false, true, false),
                )
                .await?;
            ensure!(
                s.stdout.is_none() && s.stdin.is_none(),
                "unasked streams: {s:?}"
            );
            let err = read_all(s.stderr).await?;
            ensure!(err == b"kept\n", "stderr only: {err:?}");
            end_of(s.done, 10).await?;

            // A missing binary: runc's error, naming the container.
            let s = env
                .rt
                .exec(
                    &id,
                    argv(&["/no-such-binary"]),
                    req(false, true, true, false),
                )
                .await?;
            let _ = tokio::join!(read_all(s.stdout), read_all(s.stderr));
            match tokio::time::timeout(Duration::from_secs(10), s.done).await? {
                Err(e) => ensure!(
                    e.to_string().contains(&id),
                    "error names the container: {e}"
                ),
                Ok(end) => ensure!(end != SessionEnd::Exited(0), "missing binary ran: {end:?}"),
            }

            // Errors: unknown → NotFound, not running → FailedPrecondition.
            let e = env
                .rt
                .exec(
                    "no-such-container",
                    argv(&["true"]),
                    req(false, true, false, false),
                )
                .await
                .err()
                .context("unknown container")?;
            ensure!(e.kind() == ErrorKind::NotFound, "unknown: {e}");
            let done = env.container(sb, "done", "true", |_| {}).await?;
            ensure!(
                wait_until(10, || env
                    .rt
                    .container(&done)
                    .is_ok_and(|c| c.status().finished_ns > 0)),
                "short container did not exit"
            );
            let e = env
                .rt
                .exec(&done, argv(&["true"]), req(false, true, false, false))
                .await
                .err()
                .context("exited container")?;
            ensure!(
                e.kind() == ErrorKind::FailedPrecondition && e.to_string().contains(&done),
                "exited: {e}"
            );
            Ok(())
        })
    })
}

/// Runs `stty size` in the terminal's shell until it reports `want` ("rows cols"), for at most
/// 10 s. A resize reaches the container's terminal asynchronously (runc copies it on
/// SIGWINCH, as under containerd), so the first `stty size` may still see the old size.
async fn until_size(
    stdin: &mut (dyn AsyncWrite + Send + Unpin),
    stdout: &mut (dyn AsyncRead + Send + Unpin),
    seen: &mut Vec<u8>,
    want: &str,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        stdin.write_all(b"stty size\n").await?;
        match read_until(stdout, seen, want, 1).await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= deadline => return Err(e),
            Err(_) => {}
        }
    }
}

fn exec_tty() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let id = env
                .container(sb, "target", "exec sleep 1000", |_| {})
                .await?;
            let mut s = env
                .rt
                .exec(&id, argv(&["sh"]), req(true, true, true, true))
                .await?;
            ensure!(s.stderr.is_none(), "a terminal has one output");
            let resize = s.resize.clone().context("no resize channel")?;
            let mut stdin = s.stdin.take().context("no stdin")?;
            let mut stdout = s.stdout.take().context("no stdout")?;
            resize.send(TerminalSize {
                width: 123,
                height: 45,
            })?;
            let mut seen = Vec::new();
            stdin.write_all(b"tty\n").await?;
            read_until(&mut stdout, &mut seen, "/dev/pts/", 10).await?;
            until_size(&mut stdin, &mut stdout, &mut seen, "45 123").await?;
            resize.send(TerminalSize {
                width: 90,
                height: 20,
            })?;
            until_size(&mut stdin, &mut stdout, &mut seen, "20 90").await?;
            stdin.write_all(b"exit 7\n").await?;
            let reader = tokio::spawn(async move { read_all(Some(stdout)).await });
            ensure!(
                end_of(s.done, 10).await? == SessionEnd::Exited(7),
                "tty exit code"
            );
            reader.await??;

            // stdin EOF on a terminal: ^D ends `cat` (twice after an unfinished line).
            let mut s = env
                .rt
                .exec(&id, argv(&["cat"]), req(true, true, false, true))
                .await?;
            let mut stdin = s.stdin.take().context("no stdin")?;
            let reader = tokio::spawn(read_all(s.stdout.take()));
            stdin.write_all(b"hello\nunfinished").await?;
            stdin.shutdown().await?;
            ensure!(
                end_of(s.done, 10).await? == SessionEnd::Exited(0),
                "cat on a tty ends with ^D"
            );
            let out = String::from_utf8_lossy(&reader.await??).into_owned();
            ensure!(
                out.contains("hello") && out.contains("unfinished"),
                "tty cat: {out:?}"
            );
            Ok(())
        })
    })
}

fn exec_large() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let id = env
                .container(sb, "target", "exec sleep 1000", |_| {})
                .await?;
            const SIZE: usize = 10 << 20;
            let t = Instant::now();
            let s = env
                .rt
                .exec(&id, argv(&["sh", "-c", "dd if=/dev/zero bs=65536 count=160 2>/dev/null | tr '\\000' x; echo err >&2"]), req(false, true, true, false))
                .await?;
            let (out, err) = tokio::join!(read_all(s.stdout), read_all(s.stderr));
            let (out, err) = (out?, err?);
            let took = t.elapsed();
            ensure!(
                out.len() == SIZE && out.iter().all(|&b| b == b'x'),
                "got {} bytes",
                out.len()
            );
            ensure!(err == b"err\n", "stderr {err:?}");
            ensure!(end_of(s.done, 20).await? == SessionEnd::Exited(0), "exit");
            eprintln!(
                "exec 10 MiB stdout: {took:?} ({:.0} MiB/s)",
                10.0 / took.as_secs_f64()
            );

            // Latency: Runtime::exec to the first byte of `echo`.
            let mut lat = Vec::new();
            for _ in 0..15 {
                let t = Instant::now();
                let mut s = env
                    .rt
                    .exec(&id, argv(&["echo", "hi"]), req(false, true, false, false))
                    .await?;
                let mut byte = [0u8; 1];
                s.stdout
                    .as_mut()
                    .context("stdout")?
                    .read_exact(&mut byte)
                    .await?;
                lat.push(t.elapsed());
                let _ = read_all(s.stdout.take()).await?;
                end_of(s.done, 10).await?;
            }
            lat.sort();
            eprintln!(
                "exec echo first byte: p50 {:?}, min {:?}, max {:?} ({} runs)",
                lat[lat.len() / 2],
                lat[0],
                lat[lat.len() - 1],
                lat.len()
            );
            Ok(())
        })
    })
}

fn exec_kills() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let id = env
                .container(sb, "target", "exec sleep 1000", |_| {})
                .await?;
            // Dropping the session before it ended kills the process.
            let secs = format!("{}", 700_000 + std::process::id() % 90_000);
            let s = env
                .rt
                .exec(&id, argv(&["sleep", &secs]), req(false, true, false, false))
                .await?;
            let sleep = ["sleep", secs.as_str()];
            ensure!(
                wait_until(10, || !processes_with_argv(&sleep).is_empty()),
                "exec'd sleep never ran"
            );
            drop(s);
            ensure!(
                wait_until(5, || processes_with_argv(&sleep).is_empty()),
                "dropped session left {:?}",
                processes_with_argv(&sleep)
            );

            // Exec'd processes die with their container, and their sessions end.
            let secs = format!("{}", 600_000 + std::process::id() % 90_000);
            let sleep = ["sleep", secs.as_str()];
            let mut sessions = Vec::new();
            for tty in [false, true] {
                sessions.push(
                    env.rt
                        .exec(&id, argv(&sleep), req(false, true, false, tty))
                        .await?,
                );
            }
            ensure!(
                wait_until(10, || processes_with_argv(&sleep).len() == 2),
                "exec'd sleeps never ran"
            );
            env.rt.stop_container(&id, 0).await?;
            for s in sessions {
                let _ = read_all(s.stdout).await;
                let end = end_of(s.done, 10).await?;
                ensure!(
                    end == SessionEnd::Exited(137),
                    "exec ended {end:?} when its container stopped"
                );
            }
            ensure!(
                wait_until(5, || processes_with_argv(&sleep).is_empty()),
                "container stop left {:?}",
                processes_with_argv(&sleep)
            );
            Ok(())
        })
    })
}
