//! Pod networking as a test sees it: the needs of a networked test, a web server for a pod,
//! pod IPs, HTTP GETs from the host, a container's exec output, free host ports.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use super::cri::{self, Rt};
use super::{wait_until, Need};

/// Root, runc, the test images and the CNI plugins with iproute2 and nftables.
pub const NET_NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

/// busybox httpd on :8080 answering `hello-<hostname>`.
pub const HTTPD: &str =
    "mkdir -p /www && echo hello-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www";

/// The pod's IP (and additional IPs) from PodSandboxStatus.
pub async fn pod_ips(rt: &mut Rt, id: &str) -> Result<(String, Vec<String>)> {
    let st = cri::pod_status(rt, id).await?;
    let net = st.network.context("PodSandboxStatus without network")?;
    Ok((
        net.ip,
        net.additional_ips.into_iter().map(|i| i.ip).collect(),
    ))
}

/// An HTTP GET of `/` at `addr` from the host; the body.
pub fn http_get(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Waits (10 s) until `addr` serves `want`; the last error otherwise.
pub fn wait_http(addr: SocketAddr, want: &str) -> Result<()> {
    let mut last = String::new();
    let ok = wait_until(10, || match http_get(addr) {
        Ok(body) if body.contains(want) => true,
        Ok(body) => {
            last = body;
            false
        }
        Err(e) => {
            last = format!("{e:#}");
            false
        }
    });
    ensure!(ok, "{addr} did not serve {want:?}: {last}");
    Ok(())
}

/// StopPodSandbox.
pub async fn stop_pod(rt: &mut Rt, id: &str) -> Result<()> {
    rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .with_context(|| format!("StopPodSandbox {id}"))?;
    Ok(())
}

/// ExecSync of `cmd` (10 s), which must exit 0; its stdout.
pub async fn exec_out(rt: &mut Rt, id: &str, cmd: &[&str]) -> Result<String> {
    let r = cri::exec(rt, id, cmd, 10).await?;
    ensure!(
        r.exit_code == 0,
        "{cmd:?}: exit {}: {}",
        r.exit_code,
        String::from_utf8_lossy(&r.stderr)
    );
    Ok(String::from_utf8_lossy(&r.stdout).into_owned())
}

/// A free TCP port on the host (bound and released).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("0.0.0.0:0")?
        .local_addr()?
        .port())
}
