//! Streaming exec/attach/port-forward with the real daemon and runc, through `bosun exec|attach|port-forward` (our crictl-compatible client) over SPDY and WebSocket.

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};

use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::daemon::{Daemon, BOSUN};
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::streaming::exec_over_spdy_and_websocket",
            NEEDS,
            exec_both,
        ),
        trial("cri::streaming::tty_exec_and_resize", NEEDS, tty_resize),
        trial(
            "cri::streaming::large_output_and_concurrent_sessions",
            NEEDS,
            large_and_concurrent,
        ),
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
        trial("cri::streaming::port_forward_to_pod", NEEDS, port_forward),
        trial(
            "cri::streaming::measure_exec_latency_and_throughput",
            NEEDS,
            measure,
        ),
    ]
}

const TRANSPORTS: [&str; 2] = ["spdy", "websocket"];

/// A pod with a busybox container running `script`; returns (pod, container id).
async fn target(
    d: &Daemon,
    rt: &mut cri::Rt,
    name: &str,
    script: &str,
) -> Result<(cri::Pod, String)> {
    let busybox = cri::import(d, "busybox")?;
    let pod = cri::run_pod(rt, cri::pod_config(d, name)).await?;
    let c = cri::sh_config(&pod, "target", &busybox, &format!("echo ready; {script}"));
    let id = cri::create_start(rt, &pod, &c).await?;
    cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;
    Ok((pod, id))
}

/// `bosun <args>` against `d`, with `stdin` fed (then closed) when given.
fn bosun(d: &Daemon, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
    let mut child = Command::new(BOSUN)
        .arg("--socket")
        .arg(d.socket())
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(input) = stdin {
        let mut w = child.stdin.take().context("stdin")?;
        w.write_all(input)?;
    }
    Ok(child.wait_with_output()?)
}

fn show(o: &Output) -> String {
    format!(
        "{} stdout {:?} stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout[..o.stdout.len().min(300)]),
        String::from_utf8_lossy(&o.stderr[..o.stderr.len().min(300)])
    )
}

fn exec_both() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(&d, &mut rt, "stream-exec", "exec sleep 1000").await?;
            for t in TRANSPORTS {
                let o = bosun(
                    &d,
                    &["exec", "--transport", t, &id, "--", "echo", "hi"],
                    None,
                )?;
                ensure!(
                    o.status.code() == Some(0) && o.stdout == b"hi\n",
                    "{t} echo: {}",
                    show(&o)
                );
                let o = bosun(
                    &d,
                    &[
                        "exec",
                        "--transport",
                        t,
                        &id,
                        "--",
                        "sh",
                        "-c",
                        "echo err >&2; exit 3",
                    ],
                    None,
                )?;
                ensure!(
                    o.status.code() == Some(3) && o.stderr == b"err\n",
                    "{t} exit 3: {}",
                    show(&o)
                );
                let o = bosun(
                    &d,
                    &["exec", "-i", "--transport", t, &id, "--", "cat"],
                    Some(b"hi\n"),
                )?;
                ensure!(
                    o.status.code() == Some(0) && o.stdout == b"hi\n",
                    "{t} stdin EOF: {}",
                    show(&o)
                );
            }
            // An exec in a stopped container is refused at the RPC.
            cri::stop(&mut rt, &id, 0).await?;
            let o = bosun(&d, &["exec", &id, "--", "true"], None)?;
            ensure!(
                !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not running"),
                "exec in a stopped container: {}",
                show(&o)
            );
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn tty_resize() -> Result<()> {
    use bosun::runtime::TerminalSize;
    use bosun::stream::client::{self, ExecIo, Transport};
    use bosun::stream::status::Outcome;
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(&d, &mut rt, "stream-tty", "exec sleep 1000").await?;
            for (t, transport) in [
                ("spdy", Transport::Spdy),
                ("websocket", Transport::Websocket),
            ] {
                // Through the CLI: the process has a terminal.
                let o = bosun(
                    &d,
                    &["exec", "-t", "--transport", t, &id, "--", "tty"],
                    None,
                )?;
                ensure!(
                    o.status.success()
                        && String::from_utf8_lossy(&o.stdout).starts_with("/dev/pts/"),
                    "{t} tty: {}",
                    show(&o)
                );
                // Through the client library (the test has no terminal to resize): the
                // size sent reaches the process's terminal.
                let url = rt
                    .exec(pb::ExecRequest {
                        container_id: id.clone(),
                        cmd: ["sh", "-c", "sleep 0.5; stty size"]
                            .map(String::from)
                            .to_vec(),
                        tty: true,
                        stdout: true,
                        ..Default::default()
                    })
                    .await?
                    .into_inner()
                    .url;
                let (tx, rx) = tokio::sync::mpsc::channel(2);
                tx.send(TerminalSize {
                    width: 101,
                    height: 37,
                })
                .await?;
                let (w, mut r) = tokio::io::duplex(1 << 16);
                let io = ExecIo {
                    stdout: Some(Box::pin(w)),
                    resize: Some(rx),
                    tty: true,
                    ..Default::default()
                };
                let collect = tokio::spawn(async move {
                    let mut v = Vec::new();
                    tokio::io::AsyncReadExt::read_to_end(&mut r, &mut v)
                        .await
                        .map(|_| v)
                });
                let outcome = tokio::time::timeout(
                    Duration::from_secs(20),
                    client::exec(&url, transport, io),
                )
                .await??;
                drop(tx);
                let out = collect.await??;
                ensure!(outcome == Outcome::Success, "{t}: {outcome:?}");
                ensure!(
                    String::from_utf8_lossy(&out).trim() == "37 101",
                    "{t} stty size: {:?}",
                    String::from_utf8_lossy(&out)
                );
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn large_and_concurrent() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(&d, &mut rt, "stream-large", "exec sleep 1000").await?;
            let r = cri::exec(
                &mut rt,
                &id,
                &[
                    "sh",
                    "-c",
                    "head -c 10485760 /dev/urandom > /tmp/big && sha256sum /tmp/big",
                ],
                30,
            )
            .await?;
            ensure!(r.exit_code == 0, "make /tmp/big: {r:?}");
            let want = String::from_utf8_lossy(&r.stdout)
                .split_whitespace()
                .next()
                .unwrap_or("")
                .to_string();
            for t in TRANSPORTS {
                let o = bosun(
                    &d,
                    &["exec", "--transport", t, &id, "--", "cat", "/tmp/big"],
                    None,
                )?;
                let got = hex::encode(Sha256::digest(&o.stdout));
                ensure!(
                    o.status.success() && o.stdout.len() == 10 << 20 && got == want,
                    "{t}: {} bytes, sha {got} (want {want}), {}",
                    o.stdout.len(),
                    o.status
                );
            }
            // Ten sessions at once, both transports.
            let mut children = Vec::new();
            for i in 0..10usize {
                let t = TRANSPORTS[i % 2];
                let script = format!(
                    "for n in $(seq 1 200); do echo session-{i}-$n; done; exit {}",
                    i % 4
                );
                let child = Command::new(BOSUN)
                    .arg("--socket")
                    .arg(d.socket())
                    .args(["exec", "--transport", t, &id, "--", "sh", "-c", &script])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .stdin(Stdio::null())
                    .spawn()?;
                children.push((i, KillOnDrop(Some(child))));
            }
            for (i, mut c) in children {
                let o = c.0.take().context("child")?.wait_with_output()?;
                let want: String = (1..=200).map(|n| format!("session-{i}-{n}\n")).collect();
                ensure!(
                    o.status.code() == Some((i % 4) as i32) && o.stdout == want.as_bytes(),
                    "session {i} ({}): {}",
                    TRANSPORTS[i % 2],
                    show(&o)
                );
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// Kills and reaps a child process when dropped (a failed test leaves none behind).
struct KillOnDrop(Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_bosun(d: &Daemon, args: &[&str]) -> Result<KillOnDrop> {
    Ok(KillOnDrop(Some(
        Command::new(BOSUN)
            .arg("--socket")
            .arg(d.socket())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?,
    )))
}

/// Reads `child`'s stdout in a thread; returns a receiver of its lines.
fn lines_of(child: &mut KillOnDrop) -> Result<std::sync::mpsc::Receiver<String>> {
    let out = child
        .0
        .as_mut()
        .and_then(|c| c.stdout.take())
        .context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(std::io::Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    Ok(rx)
}

fn attach() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(
                &d,
                &mut rt,
                "stream-attach",
                "i=0; while true; do i=$((i+1)); echo tick-$i; sleep 0.2; done",
            )
            .await?;
            let mut a = spawn_bosun(&d, &["attach", "--transport", "spdy", &id])?;
            let mut b = spawn_bosun(&d, &["attach", "--transport", "websocket", &id])?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
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
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(
                &d,
                &mut rt,
                "stream-slow-attach",
                "while true; do while [ ! -f /tmp/go ]; do sleep 0.1; done; rm /tmp/go; \
                 seq 1 300000; echo done; done",
            )
            .await?;
            let expected: String = (1..=300000).map(|i| format!("{i}\n")).collect();
            for t in TRANSPORTS {
                let (child, mut out) = attach_and_go(&d, t, &id).await?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// An attach client that is still behind when the container exits: the monitor holds what
/// the client has not taken yet (2 MB, within its 4 MiB queue) and must send it before it ends
/// the stream, rather than drop it with the exit (found by the kubectl test in CI).
fn attach_lagging_at_exit() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let busybox = cri::import(&d, "busybox")?;
            let expected: String = (1..=300000).map(|i| format!("{i}\n")).collect();
            for t in TRANSPORTS {
                let pod = cri::run_pod(&mut rt, cri::pod_config(&d, &format!("lag-{t}"))).await?;
                let script = "echo ready; while [ ! -f /tmp/go ]; do sleep 0.1; done; \
                              seq 1 300000; echo done";
                let c = cri::sh_config(&pod, "target", &busybox, script);
                let id = cri::create_start(&mut rt, &pod, &c).await?;
                let log = pod.log_of(&c);
                cri::wait_log(&log, 10, |l| l.iter().any(|x| x == "ready")).await?;
                let (child, mut out) = attach_and_go(&d, t, &id).await?;
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
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// One HTTP GET of `/` through `addr`; the body.
fn http_get(addr: &str) -> Result<String> {
    let mut s = std::net::TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(b"GET / HTTP/1.0\r\nHost: pod\r\n\r\n")?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    Ok(resp)
}

fn port_forward() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, _id) = target(&d, &mut rt, "stream-pf", "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www").await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
            for t in TRANSPORTS {
                let mut pf =
                    spawn_bosun(&d, &["port-forward", "--transport", t, &pod.id, "0:8080"])?;
                let lines = lines_of(&mut pf)?;
                let line = lines
                    .recv_timeout(Duration::from_secs(10))
                    .with_context(|| format!("{t}: port-forward printed nothing"))?;
                let addr = line
                    .strip_prefix("Forwarding from ")
                    .and_then(|r| r.split(" -> ").next())
                    .with_context(|| format!("{t}: {line:?}"))?
                    .to_string();
                // Several connections over one forward.
                for n in 0..3 {
                    let addr = addr.clone();
                    let body = tokio::task::spawn_blocking(move || http_get(&addr)).await??;
                    ensure!(
                        body.contains("200") && body.contains("hello-from-pod"),
                        "{t} request {n}: {body:?}"
                    );
                }
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn measure() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let (pod, id) = target(&d, &mut rt, "stream-measure", "exec sleep 1000").await?;
            for t in TRANSPORTS {
                let mut times = Vec::new();
                for _ in 0..20 {
                    let start = Instant::now();
                    let o = bosun(&d, &["exec", "--transport", t, &id, "--", "true"], None)?;
                    times.push(start.elapsed());
                    ensure!(o.status.success(), "{t} exec true: {}", show(&o));
                }
                times.sort();
                eprintln!(
                    "MEASURE exec true over {t}: p50 {:?} min {:?} max {:?}",
                    times[10], times[0], times[19]
                );
                let start = Instant::now();
                let o = bosun(
                    &d,
                    &[
                        "exec",
                        "--transport",
                        t,
                        &id,
                        "--",
                        "head",
                        "-c",
                        "104857600",
                        "/dev/zero",
                    ],
                    None,
                )?;
                let took = start.elapsed();
                ensure!(
                    o.status.success() && o.stdout.len() == 100 << 20,
                    "{t} 100 MiB: {} bytes",
                    o.stdout.len()
                );
                eprintln!(
                    "MEASURE stdout 100 MiB over {t}: {:?} = {:.0} MiB/s",
                    took,
                    100.0 / took.as_secs_f64()
                );
            }
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok::<_, anyhow::Error>(())
        }),
    )?;
    cri::assert_clean(&d)
}
