//! kubectl's streaming clients (client-go SPDY and WebSocket) against bosun's streaming server, through a proxying fake apiserver.
//!
//! The fake apiserver answers kubectl's discovery and pod GETs, and for `exec` and
//! `port-forward` does what kube-apiserver and the kubelet do together: it asks bosun for a
//! streaming URL over CRI and splices kubectl's upgrade request onto it. kubectl then speaks
//! to bosun's server directly, as kubelet (SPDY) and crictl (SPDY or WebSocket) do.

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use sha2::{Digest, Sha256};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

use crate::support::cri::{self, Rt};
use crate::support::{block_on, trial, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "kubectl::exec_and_port_forward_over_spdy_and_websocket",
        &[
            Need::Root,
            Need::Runc,
            Need::Images,
            Need::Cni,
            Need::Kubectl,
        ],
        exec_and_port_forward,
    )]
}

const T: Duration = Duration::from_secs(60);

/// What the fake apiserver knows: the pod's sandbox and its containers by name.
#[derive(Clone)]
struct Cluster {
    rt: Rt,
    sandbox: String,
    containers: HashMap<String, String>,
}

struct Head {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
}

async fn read_head(conn: &mut BufReader<TcpStream>) -> Result<Option<Head>> {
    let mut line = String::new();
    if conn.read_line(&mut line).await? == 0 {
        return Ok(None);
    }
    let mut parts = line.split_whitespace();
    let (method, target) = match (parts.next(), parts.next()) {
        (Some(m), Some(t)) => (m.to_string(), t.to_string()),
        _ => bail!("bad request line {line:?}"),
    };
    let mut headers = Vec::new();
    loop {
        line.clear();
        conn.read_line(&mut line).await?;
        let l = line.trim_end();
        if l.is_empty() {
            break;
        }
        let (n, v) = l.split_once(':').context("bad header")?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let len = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map(|(_, v)| v.parse::<usize>())
        .transpose()?
        .unwrap_or(0);
    let mut body = vec![0u8; len];
    conn.read_exact(&mut body).await?;
    Ok(Some(Head {
        method,
        target,
        headers,
    }))
}

fn query(target: &str) -> Vec<(String, String)> {
    target
        .split_once('?')
        .map(|(_, q)| q)
        .unwrap_or_default()
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), percent_decode(v)))
        .collect()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

const DISCOVERY: [(&str, &str); 4] = [
    (
        "/version",
        r#"{"major":"1","minor":"32","gitVersion":"v1.32.4"}"#,
    ),
    (
        "/api",
        r#"{"kind":"APIVersions","versions":["v1"],"serverAddressByClientCIDRs":[]}"#,
    ),
    (
        "/apis",
        r#"{"kind":"APIGroupList","apiVersion":"v1","groups":[]}"#,
    ),
    (
        "/api/v1",
        r#"{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"pods","singularName":"pod","namespaced":true,"kind":"Pod","verbs":["get","list"],"shortNames":["po"]},{"name":"pods/exec","singularName":"","namespaced":true,"kind":"PodExecOptions","verbs":["create","get"]},{"name":"pods/portforward","singularName":"","namespaced":true,"kind":"PodPortForwardOptions","verbs":["create","get"]}]}"#,
    ),
];

fn pod_json(c: &Cluster) -> String {
    let containers: Vec<_> = c
        .containers
        .keys()
        .map(|n| serde_json::json!({"name": n, "image": "busybox", "stdin": n == "a", "stdinOnce": n == "a"}))
        .collect();
    serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": containers},
        "status": {"phase": "Running"},
    })
    .to_string()
}

/// Serves one kubectl connection until it is upgraded (spliced to bosun) or closed.
async fn serve(tcp: TcpStream, mut cluster: Cluster) -> Result<()> {
    let mut conn = BufReader::new(tcp);
    while let Some(head) = read_head(&mut conn).await? {
        let path = head
            .target
            .split('?')
            .next()
            .unwrap_or_default()
            .to_string();
        let body = DISCOVERY
            .iter()
            .find(|(p, _)| *p == path)
            .map(|(_, b)| b.to_string())
            .or_else(|| (path == "/api/v1/namespaces/default/pods/p").then(|| pod_json(&cluster)));
        if let Some(body) = body {
            let resp = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            conn.write_all(resp.as_bytes()).await?;
            continue;
        }
        let q = query(&head.target);
        let flag = |k: &str| q.iter().any(|(n, v)| n == k && v == "true");
        let url = match path.as_str() {
            "/api/v1/namespaces/default/pods/p/exec" => {
                let name = q
                    .iter()
                    .find(|(k, _)| k == "container")
                    .map(|(_, v)| v.clone());
                let id = name
                    .and_then(|n| cluster.containers.get(&n).cloned())
                    .context("exec: unknown container")?;
                let cmd = q
                    .iter()
                    .filter(|(k, _)| k == "command")
                    .map(|(_, v)| v.clone())
                    .collect();
                cluster
                    .rt
                    .exec(pb::ExecRequest {
                        container_id: id,
                        cmd,
                        tty: flag("tty"),
                        stdin: flag("stdin"),
                        stdout: flag("stdout"),
                        stderr: flag("stderr"),
                    })
                    .await?
                    .into_inner()
                    .url
            }
            "/api/v1/namespaces/default/pods/p/attach" => {
                let name = q
                    .iter()
                    .find(|(k, _)| k == "container")
                    .map(|(_, v)| v.clone());
                let id = name
                    .and_then(|n| cluster.containers.get(&n).cloned())
                    .context("attach: unknown container")?;
                cluster
                    .rt
                    .attach(pb::AttachRequest {
                        container_id: id,
                        tty: flag("tty"),
                        stdin: flag("stdin"),
                        stdout: flag("stdout"),
                        stderr: flag("stderr"),
                    })
                    .await?
                    .into_inner()
                    .url
            }
            "/api/v1/namespaces/default/pods/p/portforward" => {
                cluster
                    .rt
                    .port_forward(pb::PortForwardRequest {
                        pod_sandbox_id: cluster.sandbox.clone(),
                        port: vec![],
                    })
                    .await?
                    .into_inner()
                    .url
            }
            _ => {
                conn.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    .await?;
                continue;
            }
        };
        return splice(conn, head, &url).await;
    }
    Ok(())
}

/// Sends kubectl's request to bosun's `url` (same method and headers, bosun's path), then
/// copies bytes both ways: bosun's 101 and the protocol go straight back to kubectl.
async fn splice(client: BufReader<TcpStream>, head: Head, url: &str) -> Result<()> {
    let rest = url.strip_prefix("http://").context("not an http URL")?;
    let (hostport, path) = rest.split_at(rest.find('/').context("URL without a path")?);
    let mut upstream = TcpStream::connect(hostport).await?;
    let mut req = format!("{} {path} HTTP/1.1\r\nHost: {hostport}\r\n", head.method);
    for (n, v) in &head.headers {
        if !n.eq_ignore_ascii_case("host") {
            req.push_str(&format!("{n}: {v}\r\n"));
        }
    }
    req.push_str("\r\n");
    upstream.write_all(req.as_bytes()).await?;
    upstream.write_all(client.buffer()).await?;
    let mut client = client.into_inner();
    let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    Ok(())
}

async fn apiserver(cluster: Cluster) -> Result<(u16, tokio::task::JoinHandle<()>)> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let c = cluster.clone();
            tokio::spawn(async move {
                if let Err(e) = serve(tcp, c).await {
                    eprintln!("fake apiserver: {e:#}");
                }
            });
        }
    });
    Ok((port, task))
}

fn kubectl(config: &std::path::Path, websocket: bool) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("kubectl");
    cmd.arg("--kubeconfig")
        .arg(config)
        .arg("--request-timeout=60s");
    let ws = if websocket { "true" } else { "false" };
    cmd.env("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", ws);
    // The runtime leg of port-forward is SPDY (kube-apiserver tunnels WebSocket clients).
    cmd.env("KUBECTL_PORT_FORWARD_WEBSOCKETS", "false");
    cmd.kill_on_drop(true);
    cmd
}

/// `kubectl exec [-i] p -c c -- args`, with `input` on stdin; (exit code, stdout, stderr).
async fn exec(
    config: &std::path::Path,
    websocket: bool,
    args: &[&str],
    input: Option<Vec<u8>>,
) -> Result<(i32, Vec<u8>, String)> {
    let mut cmd = kubectl(config, websocket);
    cmd.args(["exec", "p", "-c", "c"]);
    if input.is_some() {
        cmd.arg("-i");
    }
    cmd.arg("--").args(args);
    let mut child = cmd
        .stdin(if input.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("spawn kubectl")?;
    let feed = child.stdin.take().map(|mut stdin| {
        let input = input.unwrap_or_default();
        tokio::spawn(async move {
            stdin.write_all(&input).await?;
            drop(stdin);
            anyhow::Ok(())
        })
    });
    let out = tokio::time::timeout(T, child.wait_with_output())
        .await
        .context("kubectl exec did not finish in 60 s")??;
    if let Some(f) = feed {
        f.await??;
    }
    Ok((
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn exec_and_port_forward() -> Result<()> {
    let d = cri::daemon()?;
    let busybox = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "kubectl")).await?;
            let c = cri::sh_config(&pod, "c", &busybox, "exec sleep 100000");
            let c_id = cri::create_start(&mut rt, &pod, &c).await?;
            let e = cri::sh_config(&pod, "echo", &busybox, "exec nc -ll -p 8080 -e cat");
            let e_id = cri::create_start(&mut rt, &pod, &e).await?;
            let mut a = cri::sh_config(&pod, "a", &busybox, "exec cat");
            a.stdin = true;
            a.stdin_once = true;
            let a_id = cri::create_start(&mut rt, &pod, &a).await?;
            let cluster = Cluster {
                rt: rt.clone(),
                sandbox: pod.id.clone(),
                containers: HashMap::from([
                    ("c".to_string(), c_id),
                    ("echo".to_string(), e_id),
                    ("a".to_string(), a_id.clone()),
                ]),
            };
            let (port, server) = apiserver(cluster).await?;
            let dir = tempfile::tempdir()?;
            let config = dir.path().join("kubeconfig");
            std::fs::write(
                &config,
                format!(
                    "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\nusers:\n- name: u\n  user: {{}}\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n    namespace: default\ncurrent-context: x\n"
                ),
            )?;

            for websocket in [false, true] {
                let via = if websocket { "websocket" } else { "spdy" };
                // 10 MiB through `cat` and back, byte for byte.
                let input: Vec<u8> = (0..10 * 1024 * 1024 + 7)
                    .map(|i: usize| (i * 31 % 251) as u8)
                    .collect();
                let t = std::time::Instant::now();
                let (code, out, err) =
                    exec(&config, websocket, &["cat"], Some(input.clone())).await?;
                eprintln!(
                    "kubectl exec ({via}): 10 MiB through cat in {:?}",
                    t.elapsed()
                );
                ensure!(code == 0, "{via}: cat exited {code}: {err}");
                ensure!(
                    out.len() == input.len() && Sha256::digest(&out) == Sha256::digest(&input),
                    "{via}: {} bytes came back of {}",
                    out.len(),
                    input.len()
                );
                // Exit codes and stderr.
                let (code, out, err) = exec(
                    &config,
                    websocket,
                    &["sh", "-c", "echo out; echo err >&2; exit 3"],
                    None,
                )
                .await?;
                ensure!(code == 3, "{via}: exit code {code} (stderr {err:?})");
                ensure!(
                    out == b"out\n",
                    "{via}: stdout {:?}",
                    String::from_utf8_lossy(&out)
                );
                ensure!(err.contains("err"), "{via}: stderr {err:?}");
            }

            // attach -i to `cat` with stdinOnce: the input comes back, stdin's end ends `cat`,
            // and kubectl returns when the container exits.
            // 1 MiB: kubectl behind this proxy falls behind; the monitor queues what a lagging
            // attach client cannot take yet (up to 4 MiB) instead of dropping it.
            let input: Vec<u8> = (0..(1 << 20) + 3)
                .map(|i: usize| (i * 13 % 241) as u8)
                .collect();
            let mut child = kubectl(&config, false)
                .args(["attach", "-i", "p", "-c", "a"])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("spawn kubectl attach")?;
            let mut stdin = child.stdin.take().context("stdin")?;
            let feed = {
                let input = input.clone();
                tokio::spawn(async move {
                    stdin.write_all(&input).await?;
                    drop(stdin);
                    anyhow::Ok(())
                })
            };
            let out = tokio::time::timeout(T, child.wait_with_output())
                .await
                .context("kubectl attach did not finish in 60 s")??;
            feed.await??;
            let err = String::from_utf8_lossy(&out.stderr);
            ensure!(
                out.status.success(),
                "kubectl attach: {:?}: {err}",
                out.status
            );
            ensure!(
                out.stdout.len() == input.len()
                    && Sha256::digest(&out.stdout) == Sha256::digest(&input),
                "attach: {} bytes came back of {} ({err})",
                out.stdout.len(),
                input.len()
            );
            let st = cri::wait_exited(&mut rt, &a_id, 10).await?;
            cri::check_exit(&st, 0, "Completed")?;

            // port-forward (SPDY on the runtime leg): three connections echoed by nc in the pod.
            let mut child = kubectl(&config, false)
                .args(["port-forward", "pod/p", ":8080"])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .context("spawn kubectl port-forward")?;
            let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
            let line = tokio::time::timeout(T, lines.next_line())
                .await??
                .context("kubectl port-forward said nothing")?;
            // "Forwarding from 127.0.0.1:41234 -> 8080"
            let local: u16 = line
                .split_whitespace()
                .nth(2)
                .and_then(|a| a.rsplit(':').next())
                .with_context(|| format!("unexpected {line:?}"))?
                .parse()?;
            for round in 0..3usize {
                let data: Vec<u8> = (0..(1 << 20) + round)
                    .map(|i| (i * 7 + round) as u8)
                    .collect();
                let mut tcp = TcpStream::connect(("127.0.0.1", local)).await?;
                let (mut r, mut w) = tcp.split();
                let send = async {
                    w.write_all(&data).await?;
                    anyhow::Ok(())
                };
                let recv = async {
                    let mut got = vec![0u8; data.len()];
                    r.read_exact(&mut got).await?;
                    anyhow::Ok(got)
                };
                let (sent, got) =
                    tokio::time::timeout(T, async { tokio::join!(send, recv) }).await?;
                sent?;
                ensure!(got? == data, "port-forward round {round}: echo differs");
            }
            child.kill().await?;
            server.abort();
            cri::remove_pod(&mut rt, &pod.id).await?;
            cri::assert_clean(&d)
        }),
    )
}
