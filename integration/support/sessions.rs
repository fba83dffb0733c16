//! Interactive sessions on an in-process runtime (support::inproc): one sandbox per test, the
//! requests a session is opened with, and its streams read to an end, a size or a marker.

use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bosun::runtime::{SessionEnd, StreamRequest};
use tokio::io::{AsyncRead, AsyncReadExt};

use super::block_on;
use super::inproc::InProc;

/// Runs `body` on a fresh in-process runtime with one sandbox, then cleans up.
pub fn with_runtime<F>(body: F) -> Result<()>
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
pub async fn read_all(r: Option<std::pin::Pin<Box<dyn AsyncRead + Send>>>) -> Result<Vec<u8>> {
    let mut out = Vec::new();
    if let Some(mut r) = r {
        r.read_to_end(&mut out).await?;
    }
    Ok(out)
}

/// Waits for a session's end, at most `secs`.
pub async fn end_of(
    done: futures::future::BoxFuture<'static, bosun::Result<SessionEnd>>,
    secs: u64,
) -> Result<SessionEnd> {
    Ok(tokio::time::timeout(Duration::from_secs(secs), done)
        .await
        .context("session did not end")??)
}

/// What a session streams: stdin, stdout, stderr, a terminal.
pub fn req(stdin: bool, stdout: bool, stderr: bool, tty: bool) -> StreamRequest {
    StreamRequest {
        tty,
        stdin,
        stdout,
        stderr,
    }
}

/// A command line as a session takes it.
pub fn argv(cmd: &[&str]) -> Vec<String> {
    cmd.iter().map(|s| s.to_string()).collect()
}

/// Reads `r` until the accumulated output contains `want` (at most `secs`).
pub async fn read_until(
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

pub fn running(env: &InProc, id: &str) -> bool {
    env.rt
        .container(id)
        .is_ok_and(|c| c.status().state() == bosun::runtime::ContainerState::Running)
}
