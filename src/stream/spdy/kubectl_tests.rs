//! Interop with a real Go SPDY client: kubectl (client-go + spdystream) against a fake apiserver.
//!
//! Needs `kubectl` on PATH, hence `#[ignore]`: run with
//! `cargo test --lib stream::spdy::kubectl_tests -- --ignored --nocapture`.
//! The fake apiserver answers the pod GET and upgrades exec / port-forward requests exactly as
//! the doc on `Connection` describes, then serves the remotecommand v4 / portforward protocols.

use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, bail, Context as _, Result};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

use super::{Connection, Stream};

const T: Duration = Duration::from_secs(60);
const VERSION: &str = r#"{"major":"1","minor":"32","gitVersion":"v1.32.4"}"#;
const API: &str = r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}"#;
const APIS: &str = r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#;
const API_V1: &str = r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#;
const POD: &str = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"default"},"spec":{"containers":[{"name":"c","image":"x"}]},"status":{"phase":"Running"}}"#;

struct Request {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
}

impl Request {
    fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }
}

async fn read_request(conn: &mut BufReader<TcpStream>) -> Result<Option<Request>> {
    let mut line = String::new();
    if conn.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let method = parts
        .next()
        .ok_or_else(|| anyhow!("no method"))?
        .to_string();
    let path = parts.next().ok_or_else(|| anyhow!("no path"))?.to_string();
    let mut headers = Vec::new();
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l
            .split_once(':')
            .ok_or_else(|| anyhow!("bad header {l:?}"))?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let req = Request {
        method,
        path,
        headers,
    };
    if let Some(len) = req.all("content-length").first() {
        let mut body = vec![0u8; len.parse()?];
        conn.read_exact(&mut body).await?;
    }
    Ok(Some(req))
}

/// Serves one client connection: pod GETs, then an upgrade handed to `session`.
async fn serve<F, Fut>(tcp: TcpStream, session: F) -> Result<()>
where
    F: FnOnce(Connection, super::Incoming, Request) -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let mut conn = BufReader::new(tcp);
    while let Some(req) = read_request(&mut conn).await? {
        eprintln!(
            "fake apiserver: {} {} {:?}",
            req.method, req.path, req.headers
        );
        let path = req.path.split('?').next().unwrap_or_default();
        let body = match (req.method.as_str(), path) {
            ("GET", "/api/v1/namespaces/default/pods/p") => Some(POD),
            ("GET", "/version") => Some(VERSION),
            ("GET", "/api") => Some(API),
            ("GET", "/apis") => Some(APIS),
            ("GET", "/api/v1") => Some(API_V1),
            _ => None,
        };
        if let Some(body) = body {
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(resp.as_bytes()).await?;
            continue;
        }
        let upgrade = req
            .all("upgrade")
            .first()
            .is_some_and(|u| u.eq_ignore_ascii_case(super::UPGRADE_PROTOCOL));
        if !upgrade
            || !req
                .all("connection")
                .iter()
                .any(|c| c.to_ascii_lowercase().contains("upgrade"))
        {
            conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                .await?;
            continue;
        }
        let offered = req.all("x-stream-protocol-version");
        let chosen = ["v4.channel.k8s.io", "portforward.k8s.io"]
            .into_iter()
            .find(|p| offered.contains(p))
            .ok_or_else(|| anyhow!("client offered {offered:?}"))?;
        let resp = format!(
            "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: {chosen}\r\n\r\n"
        );
        conn.write_all(resp.as_bytes()).await?;
        if !conn.buffer().is_empty() {
            bail!("client sent frames before the 101");
        }
        let (c, incoming) = Connection::server(conn.into_inner());
        return session(c, incoming, req).await;
    }
    Ok(())
}

fn kubeconfig(dir: &std::path::Path, port: u16) -> Result<std::path::PathBuf> {
    let path = dir.join("kubeconfig");
    std::fs::write(
        &path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: x\n"
        ),
    )?;
    Ok(path)
}

fn kubectl(config: &std::path::Path) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig").arg(config);
    // Force SPDY: kubectl >= 1.31 tries WebSocket first for exec and port-forward.
    cmd.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", "false");
    cmd.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
    cmd.kill_on_drop(true);
    cmd
}

/// The remotecommand v4 server side of `exec -i … -- cat; exit <code>`: copies stdin to stdout.
async fn exec_cat(conn: Connection, mut incoming: super::Incoming, exit: i32) -> Result<()> {
    let mut streams: Vec<Stream> = Vec::new();
    while streams.len() < 4 {
        let s = timeout(T, incoming.accept())
            .await?
            .ok_or_else(|| anyhow!("session ended early"))?;
        eprintln!("stream {} {:?}", s.id(), s.headers());
        streams.push(s);
    }
    let mut take = |kind: &str| -> Result<Stream> {
        let at = streams
            .iter()
            .position(|s| s.header("streamtype") == Some(kind))
            .ok_or_else(|| anyhow!("no {kind} stream"))?;
        Ok(streams.remove(at))
    };
    let (mut error, mut stdin, mut stdout, mut stderr) = (
        take("error")?,
        take("stdin")?,
        take("stdout")?,
        take("stderr")?,
    );
    let copied = tokio::io::copy(&mut stdin, &mut stdout).await?;
    eprintln!("exec: copied {copied} bytes");
    stdout.shutdown().await?;
    stderr.write_all(b"done\n").await?;
    stderr.shutdown().await?;
    let status = if exit == 0 {
        r#"{"metadata":{},"status":"Success"}"#.to_string()
    } else {
        format!(
            r#"{{"metadata":{{}},"status":"Failure","message":"command terminated with non-zero exit code: {exit}","reason":"NonZeroExitCode","details":{{"causes":[{{"reason":"ExitCode","message":"{exit}"}}]}}}}"#
        )
    };
    error.write_all(status.as_bytes()).await?;
    error.shutdown().await?;
    timeout(T, conn.goaway()).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl (client-go's SPDY client) on PATH"]
async fn kubectl_exec_streams_10_mib_through_and_gets_the_exit_code() -> Result<()> {
    let dir = tempfile::tempdir()?;
    for (exit, len) in [(0, 10 * 1024 * 1024 + 7), (3, 1000)] {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let config = kubeconfig(dir.path(), listener.local_addr()?.port())?;
        let server = tokio::spawn(async move {
            loop {
                let (tcp, _) = listener.accept().await?;
                tokio::spawn(async move {
                    if let Err(e) = serve(tcp, |c, i, _req| exec_cat(c, i, exit)).await {
                        eprintln!("fake apiserver: {e:#}");
                    }
                });
            }
            #[allow(unreachable_code)]
            anyhow::Ok(())
        });
        let input: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
        let mut child = kubectl(&config)
            .args(["exec", "-i", "p", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("spawn kubectl")?;
        let mut stdin = child.stdin.take().ok_or_else(|| anyhow!("stdin"))?;
        let feed = {
            let input = input.clone();
            tokio::spawn(async move {
                stdin.write_all(&input).await?;
                drop(stdin);
                anyhow::Ok(())
            })
        };
        let start = std::time::Instant::now();
        let out = timeout(T, child.wait_with_output()).await??;
        let fed = feed.await?;
        eprintln!(
            "kubectl exec: {len} bytes in {:?}, stderr {:?}",
            start.elapsed(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(exit),
            "stderr: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.stdout.len(), input.len());
        assert_eq!(Sha256::digest(&out.stdout), Sha256::digest(&input));
        assert!(String::from_utf8_lossy(&out.stderr).contains("done"));
        fed?;
        server.abort();
    }
    Ok(())
}

/// The portforward.k8s.io server side: each (error, data) stream pair is echoed.
async fn forward_echo(_conn: Connection, mut incoming: super::Incoming) -> Result<()> {
    let mut errors = Vec::new();
    while let Some(mut s) = incoming.accept().await {
        eprintln!("stream {} {:?}", s.id(), s.headers());
        assert_eq!(s.header("port"), Some("80"));
        assert!(s.header("requestid").is_some());
        match s.header("streamtype") {
            Some("error") => errors.push(s),
            Some("data") => {
                tokio::spawn(async move {
                    let (mut r, mut w) = tokio::io::split(&mut s);
                    let n = tokio::io::copy(&mut r, &mut w).await?;
                    eprintln!("forward: echoed {n} bytes");
                    w.shutdown().await?;
                    anyhow::Ok(())
                });
            }
            other => bail!("unexpected stream type {other:?}"),
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs kubectl (client-go's SPDY client) on PATH"]
async fn kubectl_port_forward_echoes_through_several_connections() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let config = kubeconfig(dir.path(), listener.local_addr()?.port())?;
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await?;
            tokio::spawn(async move {
                if let Err(e) = serve(tcp, |c, i, _req| forward_echo(c, i)).await {
                    eprintln!("fake apiserver: {e:#}");
                }
            });
        }
        #[allow(unreachable_code)]
        anyhow::Ok(())
    });
    let mut child = kubectl(&config)
        .args(["port-forward", "pod/p", ":80"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .context("spawn kubectl")?;
    let mut lines = BufReader::new(child.stdout.take().ok_or_else(|| anyhow!("stdout"))?).lines();
    let line = timeout(T, lines.next_line())
        .await??
        .ok_or_else(|| anyhow!("kubectl said nothing"))?;
    // "Forwarding from 127.0.0.1:41234 -> 80"
    let port: u16 = line
        .split_whitespace()
        .nth(2)
        .and_then(|a| a.rsplit(':').next())
        .ok_or_else(|| anyhow!("unexpected {line:?}"))?
        .parse()?;
    for round in 0..3usize {
        let len = 3 * 1024 * 1024 + round;
        let data: Vec<u8> = (0..len).map(|i| (i * 7 + round) as u8).collect();
        let mut tcp = TcpStream::connect(("127.0.0.1", port)).await?;
        let (mut r, mut w) = tcp.split();
        let send = async {
            w.write_all(&data).await?;
            anyhow::Ok(())
        };
        let recv = async {
            let mut got = vec![0u8; len];
            r.read_exact(&mut got).await?;
            anyhow::Ok(got)
        };
        let (s, got) = timeout(T, async { tokio::join!(send, recv) }).await?;
        s?;
        assert_eq!(Sha256::digest(got?), Sha256::digest(&data), "round {round}");
    }
    child.kill().await?;
    Ok(())
}
