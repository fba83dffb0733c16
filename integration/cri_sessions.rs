//! Interactive sessions on real runc containers through an in-process runtime: streaming exec
//! (pipes and terminal), attach through the monitor, port-forward into the pod's netns.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::runtime::{SessionEnd, StreamRequest, TerminalSize};
use bosun::ErrorKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::support::cri::{processes_with_argv, NEEDS};
use crate::support::inproc::InProc;
use crate::support::{block_on, trial, wait_until};

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
        trial(
            "sessions::port_forward::pod_netns_host_network_and_errors",
            NEEDS,
            port_forward,
        ),
    ]
}

/// Runs `body` on a fresh in-process runtime with one sandbox, then cleans up.
fn with_runtime<F>(body: F) -> Result<()>
where
    F: for<'a> FnOnce(&'a InProc, &'a str) -> futures::future::BoxFuture<'a, Result<()>>,
{
    block_on(async {
        let env = InProc::open().await?;
        let r = async {
            let sb = env.sandbox("sessions", false).await?;
            body(&env, &sb).await
        }
        .await;
        env.cleanup().await;
        r
    })
}

/// Reads a session stream to its end.
async fn read_all(r: Option<std::pin::Pin<Box<dyn AsyncRead + Send>>>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(mut r) = r {
        r.read_to_end(&mut out).await?;
    }
    Ok(out)
}

/// Waits for a session's end, at most `secs`.
async fn end_of(
    done: futures::future::BoxFuture<'static, bosun::Result<SessionEnd>>,
    secs: u64,
) -> Result<SessionEnd> {
    Ok(tokio::time::timeout(Duration::from_secs(secs), done)
        .await
        .context("session did not end")??)
}

fn req(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> StreamRequest {
    StreamRequest {
        tty,
        stdin,
        stdout,
        stderr,
    }
}

fn argv(cmd: &[&str]) -> Vec<String> {
    cmd.iter().map(|s| s.to_string()).collect()
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

/// Reads `r` until the accumulated output contains `want` (at most `secs`).
async fn read_until(
    r: &mut (dyn AsyncRead + Send + Unpin),
    seen: &mut Vec<u8>,
    want: &str,
    secs: u64,
) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(seen).contains(want) {
        let left = deadline.saturating_duration_since(Instant::now());
        let n = tokio::time::timeout(left, r.read(&mut buf))
            .await
            .with_context(|| format!("no {want:?} in {:?}", String::from_utf8_lossy(seen)))??;
        if n == 0 {
            bail!("EOF before {want:?}: {:?}", String::from_utf8_lossy(seen));
        }
        seen.extend_from_slice(&buf[..n]);
    }
    Ok(())
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
            stdin.write_all(b"tty; stty size\n").await?;
            read_until(&mut stdout, &mut seen, "45 123", 10).await?;
            ensure!(
                String::from_utf8_lossy(&seen).contains("/dev/pts/"),
                "no terminal: {:?}",
                String::from_utf8_lossy(&seen)
            );
            resize.send(TerminalSize {
                width: 90,
                height: 20,
            })?;
            tokio::time::sleep(Duration::from_millis(200)).await;
            stdin.write_all(b"stty size\n").await?;
            read_until(&mut stdout, &mut seen, "20 90", 10).await?;
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

/// Sends `msg` over a port-forward to `port` of `sandbox` (retrying while the server starts)
/// and returns what came back.
async fn echo_through(env: &InProc, sandbox: &str, port: u16, msg: &[u8]) -> Result<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut conn = loop {
        match env.rt.port_forward(sandbox, port).await {
            Ok(c) => break c,
            Err(e) if Instant::now() < deadline && e.kind() == ErrorKind::Unavailable => {
                tokio::time::sleep(Duration::from_millis(50)).await
            }
            Err(e) => return Err(e.into()),
        }
    };
    conn.write_all(msg).await?;
    let mut back = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut back))
        .await
        .context("no echo")??;
    Ok(back)
}

fn port_forward() -> Result<()> {
    with_runtime(|env, sb| {
        Box::pin(async move {
            let port = 20_000 + (std::process::id() % 20_000) as u16;
            let server = format!("exec nc -ll -p {port} -e cat");
            env.container(sb, "echo", &server, |_| {}).await?;
            let back = echo_through(env, sb, port, b"ping through the pod\n").await?;
            ensure!(back == b"ping through the pod\n", "echo {back:?}");
            // It was the pod's loopback: nothing listens there on the host's.
            ensure!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "port {port} answers on the host: not the pod's netns?"
            );
            // A closed port in the pod: Unavailable.
            let e = env
                .rt
                .port_forward(sb, port + 1)
                .await
                .err()
                .context("closed port")?;
            ensure!(
                e.kind() == ErrorKind::Unavailable && e.to_string().contains(sb),
                "closed: {e}"
            );

            // hostNetwork: the host's loopback.
            let host = env.sandbox("hostnet", true).await?;
            let hport = port + 2;
            env.container(
                &host,
                "echo",
                &format!("exec nc -ll -p {hport} -e cat"),
                |_| {},
            )
            .await?;
            let back = echo_through(env, &host, hport, b"host\n").await?;
            ensure!(back == b"host\n", "host echo {back:?}");

            // Errors: unknown → NotFound; stopped → FailedPrecondition.
            let e = env
                .rt
                .port_forward("no-such-sandbox", port)
                .await
                .err()
                .context("unknown")?;
            ensure!(e.kind() == ErrorKind::NotFound, "unknown: {e}");
            env.rt.stop_sandbox(&host).await?;
            let e = env
                .rt
                .port_forward(&host, hport)
                .await
                .err()
                .context("stopped")?;
            ensure!(e.kind() == ErrorKind::FailedPrecondition, "stopped: {e}");
            Ok(())
        })
    })
}
