//! `bosun exec` over SPDY and WebSocket: output and exit codes, a terminal and its resize,
//! large output and concurrent sessions, latency and throughput (printed).

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};

use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::daemon::BOSUN;
use crate::support::streaming::{bosun, show, target, KillOnDrop, TRANSPORTS};
use crate::support::trial;
use crate::support::Scenario;

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
        trial(
            "cri::streaming::measure_exec_latency_and_throughput",
            NEEDS,
            measure,
        ),
    ]
}

fn exec_both() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(d, &mut rt, "stream-exec", "exec sleep 1000").await?;
        for t in TRANSPORTS {
            let o = bosun(
                d,
                &["exec", "--transport", t, &id, "--", "echo", "hi"],
                None,
            )?;
            ensure!(
                o.status.code() == Some(0) && o.stdout == b"hi\n",
                "{t} echo: {}",
                show(&o)
            );
            let o = bosun(
                d,
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
                d,
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
        let o = bosun(d, &["exec", &id, "--", "true"], None)?;
        ensure!(
            !o.status.success() && String::from_utf8_lossy(&o.stderr).contains("not running"),
            "exec in a stopped container: {}",
            show(&o)
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

fn tty_resize() -> Result<()> {
    use bosun::runtime::TerminalSize;
    use bosun::stream::client::{self, ExecIo, Transport};
    use bosun::stream::status::Outcome;
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(d, &mut rt, "stream-tty", "exec sleep 1000").await?;
        for (t, transport) in [
            ("spdy", Transport::Spdy),
            ("websocket", Transport::Websocket),
        ] {
            // Through the CLI: the process has a terminal.
            let o = bosun(d, &["exec", "-t", "--transport", t, &id, "--", "tty"], None)?;
            ensure!(
                o.status.success() && String::from_utf8_lossy(&o.stdout).starts_with("/dev/pts/"),
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
            let outcome =
                tokio::time::timeout(Duration::from_secs(20), client::exec(&url, transport, io))
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
        Ok(())
    })
}

fn large_and_concurrent() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(d, &mut rt, "stream-large", "exec sleep 1000").await?;
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
                d,
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
        Ok(())
    })
}

fn measure() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, id) = target(d, &mut rt, "stream-measure", "exec sleep 1000").await?;
        for t in TRANSPORTS {
            let mut times = Vec::new();
            for _ in 0..20 {
                let start = Instant::now();
                let o = bosun(d, &["exec", "--transport", t, &id, "--", "true"], None)?;
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
                d,
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
        Ok(())
    })
}
