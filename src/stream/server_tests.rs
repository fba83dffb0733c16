//! The streaming server against the fake backend, over SPDY and WebSocket, with our own clients.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::cache::Cache;
use super::client::{self, spdy, ws, ExecIo};
use super::fake::{pattern, Fake};
use super::server::Server;
use super::status::Outcome;
use crate::runtime::{StreamRequest, TerminalSize};

async fn setup() -> (Arc<Fake>, Arc<Server>) {
    let fake = Fake::new().await;
    let server = Server::start("127.0.0.1:0".parse().expect("addr"), fake.clone())
        .await
        .expect("server");
    (fake, server)
}

fn words(cmd: &str) -> Vec<String> {
    cmd.split_whitespace().map(str::to_string).collect()
}

/// How a test client talks: transport plus the protocols it offers.
#[derive(Clone, Copy, Debug)]
enum Via {
    Spdy(&'static [&'static str]),
    Ws(&'static [&'static str]),
}

const SPDY: Via = Via::Spdy(&spdy::EXEC_PROTOCOLS);
const WS: Via = Via::Ws(&ws::EXEC_PROTOCOLS);

#[derive(Default)]
struct Run {
    stdin: Option<Vec<u8>>,
    tty: bool,
    stderr: bool,
    resize: Option<TerminalSize>,
}

struct Ran {
    outcome: Outcome,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

fn collector() -> (
    std::pin::Pin<Box<dyn tokio::io::AsyncWrite + Send>>,
    tokio::task::JoinHandle<Vec<u8>>,
) {
    let (w, mut r) = tokio::io::duplex(256 << 10);
    let task = tokio::spawn(async move {
        let mut v = Vec::new();
        let _ = r.read_to_end(&mut v).await;
        v
    });
    (Box::pin(w), task)
}

async fn exec(server: &Server, via: Via, cmd: &str, run: Run) -> anyhow::Result<Ran> {
    let req = StreamRequest {
        tty: run.tty,
        stdin: run.stdin.is_some(),
        stdout: true,
        stderr: run.stderr,
    };
    let url = server.exec_url("c1", words(cmd), req)?;
    let (out_w, out) = collector();
    let (err_w, err) = collector();
    let resize = run.resize.map(|s| {
        let (tx, rx) = mpsc::channel(1);
        let _ = tx.try_send(s);
        // The sender stays alive for the session (dropping it only ends resizes).
        std::mem::forget(tx);
        rx
    });
    let io = ExecIo {
        stdin: run.stdin.map(|b| {
            Box::pin(std::io::Cursor::new(b)) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>
        }),
        stdout: Some(out_w),
        stderr: run.stderr.then_some(err_w),
        resize,
        tty: run.tty,
    };
    let outcome = tokio::time::timeout(Duration::from_secs(30), async {
        match via {
            Via::Spdy(p) => spdy::exec(&url, p, io).await,
            Via::Ws(p) => ws::exec(&url, p, io).await,
        }
    })
    .await??;
    Ok(Ran {
        outcome,
        stdout: out.await?,
        stderr: err.await?,
    })
}

#[tokio::test]
async fn exec_output_and_exit_codes_over_both_transports() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    for via in [SPDY, WS] {
        let r = exec(&server, via, "echo hi there", Run::default()).await?;
        assert_eq!(
            (r.outcome, r.stdout),
            (Outcome::Success, b"hi there\n".to_vec()),
            "{via:?}"
        );
        let r = exec(&server, via, "exit 3", Run::default()).await?;
        assert_eq!(r.outcome, Outcome::ExitCode(3), "{via:?}");
        let r = exec(
            &server,
            via,
            "err oops",
            Run {
                stderr: true,
                ..Default::default()
            },
        )
        .await?;
        assert_eq!(
            (r.outcome, r.stderr),
            (Outcome::Success, b"oops".to_vec()),
            "{via:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn stdin_eof_ends_the_command() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    for via in [SPDY, WS] {
        let r = exec(
            &server,
            via,
            "cat",
            Run {
                stdin: Some(b"hi\n".to_vec()),
                ..Default::default()
            },
        )
        .await?;
        assert_eq!(
            (r.outcome, r.stdout),
            (Outcome::Success, b"hi\n".to_vec()),
            "{via:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn tty_resize_reaches_the_process() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    for via in [SPDY, WS, Via::Spdy(&["v3.channel.k8s.io"])] {
        let run = Run {
            tty: true,
            resize: Some(TerminalSize {
                width: 132,
                height: 43,
            }),
            ..Default::default()
        };
        let r = exec(&server, via, "size", run).await?;
        assert_eq!(
            (r.outcome, r.stdout),
            (Outcome::Success, b"43 132\n".to_vec()),
            "{via:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn older_and_base64_protocols() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    for via in [
        Via::Spdy(&["v3.channel.k8s.io"]),
        Via::Spdy(&["v2.channel.k8s.io"]),
        Via::Spdy(&["channel.k8s.io"]),
        Via::Ws(&["v4.base64.channel.k8s.io"]),
        Via::Ws(&["base64.channel.k8s.io"]),
        Via::Ws(&["channel.k8s.io"]),
        Via::Ws(&[]),
    ] {
        let r = exec(&server, via, "echo old", Run::default()).await?;
        assert_eq!(
            (r.outcome, r.stdout),
            (Outcome::Success, b"old\n".to_vec()),
            "{via:?}"
        );
        let r = exec(&server, via, "exit 4", Run::default()).await?;
        let expected_v4 =
            matches!(via, Via::Ws(p) if p.first().is_some_and(|p| p.starts_with("v4")));
        if expected_v4 {
            assert_eq!(r.outcome, Outcome::ExitCode(4), "{via:?}");
        } else {
            // Before v4 the error stream carries only a message.
            assert!(
                matches!(&r.outcome, Outcome::Failed(m) if m.contains("exit status 4")),
                "{via:?}: {:?}",
                r.outcome
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn large_output_arrives_whole() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    let n = 10 << 20;
    let want = Sha256::digest(pattern(n));
    for via in [SPDY, WS] {
        let r = exec(&server, via, &format!("big {n}"), Run::default()).await?;
        assert_eq!(r.outcome, Outcome::Success);
        assert_eq!(r.stdout.len(), n, "{via:?}");
        assert_eq!(Sha256::digest(&r.stdout), want, "{via:?}");
    }
    Ok(())
}

#[tokio::test]
async fn concurrent_sessions() -> anyhow::Result<()> {
    let (fake, server) = setup().await;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let server = server.clone();
        let via = if i % 2 == 0 { SPDY } else { WS };
        tasks.push(tokio::spawn(async move {
            let stdin = format!("session {i}\n").repeat(1000).into_bytes();
            let r = exec(
                &server,
                via,
                "cat",
                Run {
                    stdin: Some(stdin.clone()),
                    ..Default::default()
                },
            )
            .await?;
            anyhow::ensure!(
                r.stdout == stdin && r.outcome == Outcome::Success,
                "session {i}"
            );
            Ok(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    assert_eq!(fake.live.load(Ordering::SeqCst), 0);
    Ok(())
}

/// Raw HTTP request; returns the status line.
async fn raw(server: &Server, req: String) -> anyhow::Result<String> {
    let mut tcp = TcpStream::connect(server.addr()).await?;
    tcp.write_all(req.as_bytes()).await?;
    let mut buf = vec![0u8; 1024];
    let n = tcp.read(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf[..n])
        .lines()
        .next()
        .unwrap_or("")
        .to_string())
}

#[tokio::test]
async fn tokens_are_single_use_and_expire() -> anyhow::Result<()> {
    let fake = Fake::new().await;
    let server = Server::start_with(
        "127.0.0.1:0".parse()?,
        fake.clone(),
        Cache::new(Duration::from_millis(200), 100),
    )
    .await?;
    let req = StreamRequest {
        stdout: true,
        ..Default::default()
    };
    let url = server.exec_url("c1", words("echo once"), req.clone())?;
    let io = || ExecIo {
        stdout: Some(collector().0),
        ..Default::default()
    };
    assert_eq!(
        client::exec(&url, client::Transport::Spdy, io()).await?,
        Outcome::Success
    );
    for t in [client::Transport::Spdy, client::Transport::Websocket] {
        let e = client::exec(&url, t, io()).await.expect_err("a used token");
        assert!(e.to_string().contains("404"), "{e}");
    }
    let url = server.exec_url("c1", words("echo late"), req)?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = client::exec(&url, client::Transport::Websocket, io())
        .await
        .expect_err("expired");
    assert!(e.to_string().contains("404"), "{e}");
    // Unknown kinds of path and wrong kinds for a token are 404 too.
    let url = server.port_forward_url("s1")?;
    let token = url.rsplit('/').next().unwrap_or("");
    let line = raw(&server, format!("POST /exec/{token} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n")).await?;
    assert!(line.contains(" 404"), "{line}");
    Ok(())
}

#[tokio::test]
async fn bad_upgrades_are_refused() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    let req = StreamRequest {
        stdout: true,
        ..Default::default()
    };
    let path = |url: String| {
        url.splitn(4, '/')
            .nth(3)
            .map(|p| format!("/{p}"))
            .unwrap_or_default()
    };
    // No upgrade at all.
    let p = path(server.exec_url("c1", words("echo x"), req.clone())?);
    let line = raw(&server, format!("GET {p} HTTP/1.1\r\nHost: x\r\n\r\n")).await?;
    assert!(line.contains(" 400"), "{line}");
    // SPDY without a protocol version.
    let p = path(server.exec_url("c1", words("echo x"), req.clone())?);
    let line = raw(
        &server,
        format!("POST {p} HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"),
    )
    .await?;
    assert!(line.contains(" 400"), "{line}");
    // SPDY with only unknown versions: 403 as apimachinery answers.
    let url = server.exec_url("c1", words("echo x"), req.clone())?;
    let e = spdy::exec(&url, &["v9.channel.k8s.io"], ExecIo::default())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("403"), "{e}");
    // WebSocket with an unknown subprotocol.
    let url = server.exec_url("c1", words("echo x"), req.clone())?;
    let e = ws::exec(&url, &["nope.k8s.io"], ExecIo::default())
        .await
        .expect_err("refused");
    assert!(e.to_string().contains("400"), "{e}");
    // Registration checks the container.
    assert_eq!(
        server
            .exec_url("gone", words("x"), req.clone())
            .map_err(|e| e.kind()),
        Err(crate::ErrorKind::NotFound)
    );
    assert_eq!(
        server.attach_url("stopped", req).map_err(|e| e.kind()),
        Err(crate::ErrorKind::FailedPrecondition)
    );
    Ok(())
}

#[tokio::test]
async fn a_vanished_client_kills_the_exec() -> anyhow::Result<()> {
    let (fake, server) = setup().await;
    for via in [SPDY, WS] {
        let req = StreamRequest {
            stdout: true,
            ..Default::default()
        };
        let url = server.exec_url("c1", words("sleep"), req)?;
        let (out_w, _out) = collector();
        let io = ExecIo {
            stdout: Some(out_w),
            ..Default::default()
        };
        let t = tokio::spawn(async move {
            match via {
                Via::Spdy(p) => spdy::exec(&url, p, io).await,
                Via::Ws(p) => ws::exec(&url, p, io).await,
            }
        });
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while fake.live.load(Ordering::SeqCst) == 0 {
            anyhow::ensure!(tokio::time::Instant::now() < deadline, "exec never started");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        t.abort();
        while fake.live.load(Ordering::SeqCst) != 0 {
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "{via:?}: exec outlived its client"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    Ok(())
}

#[tokio::test]
async fn attaches_share_the_output_and_detach_alone() -> anyhow::Result<()> {
    let (fake, server) = setup().await;
    let req = StreamRequest {
        stdout: true,
        ..Default::default()
    };
    let mut clients = Vec::new();
    for t in [client::Transport::Spdy, client::Transport::Websocket] {
        let url = server.attach_url("c1", req.clone())?;
        let (w, out) = collector();
        let io = ExecIo {
            stdout: Some(w),
            ..Default::default()
        };
        clients.push((
            tokio::spawn(async move { client::exec(&url, t, io).await }),
            out,
        ));
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while fake.attached() < 2 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "attaches never started"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    fake.write(b"hello attach\n");
    // The first attach detaches: the other still gets output.
    let (first, _first_out) = clients.remove(0);
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.abort();
    tokio::time::sleep(Duration::from_millis(100)).await;
    fake.write(b"still here\n");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // The "container" closes its stdio: the remaining attach ends with success.
    let (second, out) = clients.remove(0);
    fake.close_stdio();
    let outcome = tokio::time::timeout(Duration::from_secs(5), second).await???;
    assert_eq!(outcome, Outcome::Success);
    assert_eq!(out.await?, b"hello attach\nstill here\n".to_vec());
    Ok(())
}

async fn echo_through(local: &mut TcpStream, msg: &[u8]) -> anyhow::Result<Vec<u8>> {
    local.write_all(msg).await?;
    let mut got = vec![0u8; msg.len()];
    local.read_exact(&mut got).await?;
    Ok(got)
}

/// A connected pair: `a` is handed to a forwarder, `b` is the test's end.
async fn pair() -> anyhow::Result<(TcpStream, TcpStream)> {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let a = TcpStream::connect(l.local_addr()?).await?;
    let (b, _) = l.accept().await?;
    Ok((a, b))
}

#[tokio::test]
async fn port_forward_over_spdy() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    // Two connections over one session.
    let pf = spdy::PortForwarder::connect(&server.port_forward_url("s1")?).await?;
    let pf = Arc::new(pf);
    for i in 0..2 {
        let (a, mut b) = pair().await?;
        let pf2 = pf.clone();
        let t = tokio::spawn(async move { pf2.forward(8080, a).await });
        let msg = format!("spdy {i}").into_bytes();
        assert_eq!(echo_through(&mut b, &msg).await?, msg);
        b.shutdown().await?;
        tokio::time::timeout(Duration::from_secs(5), t).await???;
    }
    // A port that cannot be reached is reported on the error stream.
    let (a, _b) = pair().await?;
    let e = pf.forward(1, a).await.expect_err("refused port");
    assert!(e.to_string().contains("connection refused"), "{e}");
    pf.close().await;
    Ok(())
}

#[tokio::test]
async fn port_forward_over_websocket() -> anyhow::Result<()> {
    let (_fake, server) = setup().await;
    // SPDY tunnelled over WebSocket (client-go's dialer).
    let pf = ws::port_forward_tunnel(&server.port_forward_url("s1")?).await?;
    let (a, mut b) = pair().await?;
    let t = tokio::spawn(async move { pf.forward(80, a).await });
    assert_eq!(echo_through(&mut b, b"tunnel").await?, b"tunnel".to_vec());
    b.shutdown().await?;
    tokio::time::timeout(Duration::from_secs(5), t).await???;
    // wsstream channel pairs.
    let url = server.port_forward_url("s1")?;
    let (a, mut b) = pair().await?;
    let t = tokio::spawn(async move { ws::port_forward_channels(&url, 80, a).await });
    assert_eq!(
        echo_through(&mut b, b"channels").await?,
        b"channels".to_vec()
    );
    b.shutdown().await?;
    tokio::time::timeout(Duration::from_secs(5), t).await???;
    // Missing ports are a 400.
    let url = server.port_forward_url("s1")?;
    let e = ws::connect(&url, &["v4.channel.k8s.io"])
        .await
        .expect_err("no ports");
    assert!(e.to_string().contains("400"), "{e}");
    Ok(())
}
