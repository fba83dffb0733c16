//! `bosun port-forward` into a pod's network namespace.

use std::io::{Read, Write};
use std::time::Duration;

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::streaming::{lines_of, spawn_bosun, target, TRANSPORTS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::streaming::port_forward_to_pod",
        NEEDS,
        port_forward,
    )]
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
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (pod, _id) = target(d, &mut rt, "stream-pf", "mkdir -p /www && echo hello-from-pod > /www/index.html && exec httpd -f -p 8080 -h /www").await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for t in TRANSPORTS {
            let mut pf =
                spawn_bosun(d, &["port-forward", "--transport", t, &pod.id, "0:8080"])?;
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
        Ok(())
    })
}
