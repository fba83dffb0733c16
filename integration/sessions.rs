//! Interactive sessions on real runc containers through an in-process runtime: streaming exec
//! (pipes and terminal), attach through the monitor, port-forward into the pod's netns.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::runtime::{SessionEnd, StreamRequest, TerminalSize};
use bosun::ErrorKind;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::support::cri::{processes_with_argv, NEEDS};
use crate::support::inproc::InProc;
use crate::support::{block_on, trial, wait_until, Need};

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

fn running(env: &InProc, id: &str) -> bool {
    env.rt
        .container(id)
        .is_ok_and(|c| c.status().state() == bosun::runtime::ContainerState::Running)
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
