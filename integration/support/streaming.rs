//! The `bosun exec|attach|port-forward` client (crictl-compatible) against a test daemon: runs
//! to its end or kept running and killed on drop, its output read line by line; the pod and
//! container the streaming tests stream to.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Output, Stdio};

use anyhow::{Context, Result};

use super::cri;
use super::daemon::{Daemon, BOSUN};

/// The two streaming protocols `bosun exec|attach` speak (`--transport`).
pub const TRANSPORTS: [&str; 2] = ["spdy", "websocket"];

/// A pod with a busybox container running `script`; returns (pod, container id).
pub async fn target(
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
pub fn bosun(d: &Daemon, args: &[&str], stdin: Option<&[u8]>) -> Result<Output> {
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

/// A finished command's status and the start of its stdout and stderr, for messages.
pub fn show(o: &Output) -> String {
    format!(
        "{} stdout {:?} stderr {:?}",
        o.status,
        String::from_utf8_lossy(&o.stdout[..o.stdout.len().min(300)]),
        String::from_utf8_lossy(&o.stderr[..o.stderr.len().min(300)])
    )
}

/// Kills and reaps a child process when dropped (a failed test leaves none behind).
pub struct KillOnDrop(pub Option<Child>);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if let Some(mut c) = self.0.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `bosun <args>` against `d`, kept running (stdout and stderr piped).
pub fn spawn_bosun(d: &Daemon, args: &[&str]) -> Result<KillOnDrop> {
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
pub fn lines_of(child: &mut KillOnDrop) -> Result<std::sync::mpsc::Receiver<String>> {
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
