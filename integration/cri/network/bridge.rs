//! Pods on the test daemon's bridge: IPs in its subnet, pod-to-pod and host-to-pod TCP, no
//! route off the machine; hostPort through the nftables map (a clash refused); hostNetwork
//! pods making no CNI call.

use std::net::SocketAddr;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::podnet::{
    exec_out, free_port, http_get, pod_ips, stop_pod, wait_http, HTTPD, NET_NEEDS,
};
use crate::support::Scenario;
use crate::support::{block_on, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let _ = NEEDS;
    vec![
        trial(
            "cri::network::pods_get_ips_and_talk_over_the_bridge",
            NET_NEEDS,
            pods_talk,
        ),
        trial(
            "cri::network::host_port_reaches_the_pod",
            NET_NEEDS,
            host_port,
        ),
        trial(
            "cri::network::host_network_pod_makes_no_cni_call",
            NET_NEEDS,
            host_network,
        ),
    ]
}

/// Two pods on the bridge: IPs in the subnet, in /etc/hosts, pod-to-pod and host-to-pod TCP,
/// and no route off the machine.
fn pods_talk() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let bb = s.image("busybox");
        let mut rt = s.rt.clone();
        let a = cri::run_pod(&mut rt, cri::pod_config(d, "net-a")).await?;
        let b = cri::run_pod(&mut rt, cri::pod_config(d, "net-b")).await?;
        let (ip_a, more_a) = pod_ips(&mut rt, &a.id).await?;
        let (ip_b, _) = pod_ips(&mut rt, &b.id).await?;
        ensure!(
            d.net().contains(&ip_a) && d.net().contains(&ip_b) && ip_a != ip_b,
            "pod IPs {ip_a} {ip_b} not distinct addresses in {}",
            d.net().subnet()
        );
        ensure!(more_a.is_empty(), "IPv4-only network gave {more_a:?}");
        let server = cri::create_start(&mut rt, &a, &cri::sh_config(&a, "web", &bb, HTTPD)).await?;
        let client =
            cri::create_start(&mut rt, &b, &cri::sh_config(&b, "cl", &bb, "sleep 3600")).await?;
        // Host to pod.
        let host_a = a.config.hostname.clone();
        wait_http(
            SocketAddr::new(ip_a.parse()?, 8080),
            &format!("hello-{host_a}"),
        )?;
        // Pod to pod.
        let body = exec_out(
            &mut rt,
            &client,
            &["wget", "-q", "-O", "-", &format!("http://{ip_a}:8080/")],
        )
        .await?;
        ensure!(
            body.trim() == format!("hello-{host_a}"),
            "pod b got {body:?}"
        );
        let hosts = exec_out(&mut rt, &server, &["cat", "/etc/hosts"]).await?;
        ensure!(
            hosts.lines().any(|l| l == format!("{ip_a}\t{host_a}")),
            "/etc/hosts lacks the pod IP: {hosts}"
        );
        let addr = exec_out(
            &mut rt,
            &client,
            &["ip", "-o", "-4", "addr", "show", "eth0"],
        )
        .await?;
        ensure!(addr.contains(&format!("{ip_b}/24")), "eth0 of b: {addr}");
        let routes = exec_out(&mut rt, &client, &["ip", "route"]).await?;
        ensure!(
            !routes.contains("default"),
            "a route off the machine: {routes}"
        );
        cri::remove_pod(&mut rt, &a.id).await?;
        cri::remove_pod(&mut rt, &b.id).await?;
        ensure!(
            d.net().leases().is_empty(),
            "leases left: {:?}",
            d.net().leases()
        );
        ensure!(
            d.net().veths().is_empty(),
            "veths left: {:?}",
            d.net().veths()
        );
        Ok(())
    })
}

/// hostPort through bosun's nftables map: from the host to the bridge's address and to
/// 127.0.0.1, and from the pod itself to its own hostPort (hairpin, masqueraded); one map
/// element per mapping; a second pod asking for the same hostPort is refused and leaves the
/// first alone. After stop the element is gone; after the daemon, the bridge and the table.
fn host_port() -> Result<()> {
    let d = cri::daemon()?;
    let bb = cri::import(&d, "busybox")?;
    let net = d.net().clone();
    let port = free_port()?;
    let mapping = |host_port: u16, container_port: i32| pb::PortMapping {
        protocol: pb::Protocol::Tcp as i32,
        container_port,
        host_port: i32::from(host_port),
        host_ip: String::new(),
    };
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg = cri::pod_config(&d, "hostport");
            // 9090 without a host port is what the kubelet sends for a plain containerPort.
            cfg.port_mappings = vec![mapping(port, 8080), mapping(0, 9090)];
            let pod = cri::run_pod(&mut rt, cfg).await?;
            let (ip, _) = pod_ips(&mut rt, &pod.id).await?;
            let hostname = pod.config.hostname.clone();
            let web =
                cri::create_start(&mut rt, &pod, &cri::sh_config(&pod, "web", &bb, HTTPD)).await?;
            let want = format!("hello-{hostname}");
            let via_gw = SocketAddr::new(net.gateway().into(), port);
            wait_http(via_gw, &want)?;
            wait_http(SocketAddr::from(([127, 0, 0, 1], port)), &want)?;
            // The pod reaches itself through its hostPort (hairpin + masquerade).
            let body = exec_out(
                &mut rt,
                &web,
                &[
                    "wget",
                    "-q",
                    "-O",
                    "-",
                    &format!("http://{}:{port}/", net.gateway()),
                ],
            )
            .await?;
            ensure!(body.trim() == want, "hairpin got {body:?}");
            let els = net.nft_elements();
            ensure!(
                els.len() == 1 && els[0].contains(&ip) && els[0].contains(&port.to_string()),
                "map elements: {els:?}"
            );
            let mut clash = cri::pod_config(&d, "hostport-clash");
            clash.port_mappings = vec![mapping(port, 80)];
            let e = cri::run_pod(&mut rt, clash)
                .await
                .expect_err("a second pod on the same hostPort");
            let status = e
                .downcast_ref::<tonic::Status>()
                .context("not a gRPC status")?;
            ensure!(
                status.code() == tonic::Code::AlreadyExists
                    && status.message().contains(&format!("{port}/tcp")),
                "{status:?}"
            );
            ensure!(
                net.nft_elements() == els,
                "the clash touched the first pod's element"
            );
            wait_http(via_gw, &want)?;
            stop_pod(&mut rt, &pod.id).await?;
            ensure!(
                net.nft_elements().is_empty(),
                "map elements left after stop: {:?}",
                net.nft_elements()
            );
            ensure!(
                http_get(via_gw).is_err(),
                "hostPort still answers after stop"
            );
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)?;
    drop(d);
    let left = net.leftovers();
    ensure!(left.is_empty(), "daemon cleanup left: {left:?}");
    ensure!(net.nft_table().is_none(), "the test's table is still there");
    Ok(())
}

fn host_network() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let mut cfg = cri::pod_config(d, "hostnet");
        if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
            sc.namespace_options = Some(pb::NamespaceOption {
                network: pb::NamespaceMode::Node as i32,
                pid: pb::NamespaceMode::Container as i32,
                ipc: pb::NamespaceMode::Pod as i32,
                ..Default::default()
            });
        }
        let pod = cri::run_pod(&mut rt, cfg).await?;
        let (ip, more) = pod_ips(&mut rt, &pod.id).await?;
        ensure!(
            ip.is_empty() && more.is_empty(),
            "host network pod reports {ip} {more:?}"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        ensure!(
            d.net().journal_lines().is_empty() && d.net().veths().is_empty(),
            "a lease or veth for a host network pod: {:?} {:?}",
            d.net().journal_lines(),
            d.net().veths()
        );
        Ok(())
    })
}
