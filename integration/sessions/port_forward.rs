//! Port-forward into a pod's network namespace, a host-network pod, and the errors.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use bosun::ErrorKind;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::support::cri::NEEDS;
use crate::support::inproc::InProc;
use crate::support::sessions::with_runtime;
use crate::support::trial;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "sessions::port_forward::pod_netns_host_network_and_errors",
        NEEDS,
        port_forward,
    )]
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
