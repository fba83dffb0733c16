//! Pod networking over CRI with real runc on bosun's embedded network (each daemon its own
//! bridge, /24, lease journal and nftables table; no masquerade, no default route), observed in
//! the real state (links, leases, nft map elements): pod IPs, pod-to-pod and host-to-pod TCP,
//! hostPort from host addresses and 127.0.0.1, release exactly once (also across kill -9), no
//! rule or lease left after 200 lifecycles, the table rebuilt after a flush, hostNetwork,
//! NetworkReady, the pod CIDR; and a conf-dir CNI config with Debian's plugins (DEL exactly
//! once across kill -9, slow plugins).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt, NEEDS};
use crate::support::network::iptables_save;
use crate::support::{block_on, trial, wait_until, Daemon, Need};

const NET_NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Cni];

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
            "cri::network::ip_released_on_stop_exactly_once",
            NET_NEEDS,
            released_on_stop,
        ),
        trial(
            "cri::network::ip_released_once_across_kill9_and_restart",
            NET_NEEDS,
            released_across_restart,
        ),
        trial(
            "cri::network::cni_config_ip_released_once_across_kill9_mid_add",
            NET_NEEDS,
            cni_released_across_restart,
        ),
        trial(
            "cri::network::no_rule_veth_or_lease_left_after_200_lifecycles",
            NET_NEEDS,
            lifecycles_leave_nothing,
        ),
        trial(
            "cri::network::nft_table_rebuilt_after_a_flush_behind_our_back",
            NET_NEEDS,
            table_rebuilt,
        ),
        trial(
            "cri::network::host_network_pod_makes_no_cni_call",
            NET_NEEDS,
            host_network,
        ),
        trial(
            "cri::network::unusable_config_is_network_not_ready",
            NET_NEEDS,
            not_ready,
        ),
        trial(
            "cri::network::slow_plugin_does_not_stall_other_rpcs",
            NET_NEEDS,
            slow_plugin,
        ),
        trial(
            "cri::network::pod_cidr_from_update_runtime_config",
            NET_NEEDS,
            pod_cidr,
        ),
        trial(
            "cri::network::run_and_stop_latency_20_pods",
            NET_NEEDS,
            latency,
        ),
    ]
}

/// busybox httpd on :8080 answering `hello-<hostname>`.
const HTTPD: &str =
    "mkdir -p /www && echo hello-$(hostname) > /www/index.html && exec httpd -f -p 8080 -h /www";

/// The pod's IP (and additional IPs) from PodSandboxStatus.
async fn pod_ips(rt: &mut Rt, id: &str) -> Result<(String, Vec<String>)> {
    let st = cri::pod_status(rt, id).await?;
    let net = st.network.context("PodSandboxStatus without network")?;
    Ok((
        net.ip,
        net.additional_ips.into_iter().map(|i| i.ip).collect(),
    ))
}

/// An HTTP GET of `/` at `addr` from the host; the body.
fn http_get(addr: SocketAddr) -> Result<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .with_context(|| format!("connect {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(b"GET / HTTP/1.0\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Waits (10 s) until `addr` serves `want`; the last error otherwise.
fn wait_http(addr: SocketAddr, want: &str) -> Result<()> {
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

async fn stop_pod(rt: &mut Rt, id: &str) -> Result<()> {
    rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
        pod_sandbox_id: id.into(),
    })
    .await
    .with_context(|| format!("StopPodSandbox {id}"))?;
    Ok(())
}

async fn exec_out(rt: &mut Rt, id: &str, cmd: &[&str]) -> Result<String> {
    let r = cri::exec(rt, id, cmd, 10).await?;
    ensure!(
        r.exit_code == 0,
        "{cmd:?}: exit {}: {}",
        r.exit_code,
        String::from_utf8_lossy(&r.stderr)
    );
    Ok(String::from_utf8_lossy(&r.stdout).into_owned())
}

/// Two pods on the bridge: IPs in the subnet, in /etc/hosts, pod-to-pod and host-to-pod TCP,
/// and no route off the machine.
fn pods_talk() -> Result<()> {
    let d = cri::daemon()?;
    let bb = cri::import(&d, "busybox")?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let a = cri::run_pod(&mut rt, cri::pod_config(&d, "net-a")).await?;
            let b = cri::run_pod(&mut rt, cri::pod_config(&d, "net-b")).await?;
            let (ip_a, more_a) = pod_ips(&mut rt, &a.id).await?;
            let (ip_b, _) = pod_ips(&mut rt, &b.id).await?;
            ensure!(
                d.net().contains(&ip_a) && d.net().contains(&ip_b) && ip_a != ip_b,
                "pod IPs {ip_a} {ip_b} not distinct addresses in {}",
                d.net().subnet()
            );
            ensure!(more_a.is_empty(), "IPv4-only network gave {more_a:?}");
            let server =
                cri::create_start(&mut rt, &a, &cri::sh_config(&a, "web", &bb, HTTPD)).await?;
            let client =
                cri::create_start(&mut rt, &b, &cri::sh_config(&b, "cl", &bb, "sleep 3600"))
                    .await?;
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
        }),
    )?;
    cri::assert_clean(&d)
}

/// A free TCP port on the host (bound and released).
fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("0.0.0.0:0")?
        .local_addr()?
        .port())
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

/// The sandbox's lease: the host-local lease files naming `id`.
fn leases_of(d: &Daemon, id: &str) -> Vec<String> {
    let dir = d.net().data_dir.join(&d.net().name);
    d.net()
        .host_local_leases()
        .into_iter()
        .filter(|ip| std::fs::read_to_string(dir.join(ip)).is_ok_and(|owner| owner.contains(id)))
        .collect()
}

/// How many journal lines record `op` (`+` or `-`) for sandbox `id`.
fn journal_count(d: &Daemon, op: &str, id: &str) -> usize {
    let prefix = format!("{op} {id}");
    d.net()
        .journal_lines()
        .iter()
        .filter(|l| l.starts_with(&prefix))
        .count()
}

/// The lease is journaled at RunPodSandbox with the pod's veth on the bridge, and released
/// exactly once at StopPodSandbox (the veth gone); no plugin runs and no CNI record is kept.
fn released_on_stop() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "lease")).await?;
            let (ip, _) = pod_ips(&mut rt, &pod.id).await?;
            let live = d.net().journal();
            ensure!(
                live.get(&pod.id) == Some(&vec![ip.clone()]) && live.len() == 1,
                "leases: {live:?}"
            );
            let veth = bosun::network::native::veth_name(&pod.id);
            ensure!(
                d.net().veths() == [veth.clone()],
                "veths: {:?}",
                d.net().veths()
            );
            ensure!(
                !d.root()
                    .join("network")
                    .join(format!("{}.json", pod.id))
                    .exists(),
                "a CNI record for the embedded network"
            );
            stop_pod(&mut rt, &pod.id).await?;
            ensure!(
                d.net().journal().is_empty(),
                "lease kept: {:?}",
                d.net().journal()
            );
            ensure!(
                d.net().veths().is_empty(),
                "veth kept: {:?}",
                d.net().veths()
            );
            // Unplugged at once; the pair itself goes with the pod's netns.
            let link = std::path::Path::new("/sys/class/net").join(&veth);
            ensure!(
                wait_until(10, || !link.exists()),
                "veth {veth} still on the host 10 s after StopPodSandbox"
            );
            let (ip_after, _) = pod_ips(&mut rt, &pod.id).await?;
            ensure!(ip_after.is_empty(), "stopped pod still reports {ip_after}");
            stop_pod(&mut rt, &pod.id).await?;
            cri::remove_pod(&mut rt, &pod.id).await?;
            ensure!(
                journal_count(&d, "+", &pod.id) == 1 && journal_count(&d, "-", &pod.id) == 1,
                "journal: {:?}",
                d.net().journal_lines()
            );
            ensure!(
                d.net().calls().is_empty(),
                "plugins ran: {:?}",
                d.net().calls()
            );
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// kill -9 while two pods are READY and eight RunPodSandbox calls are in flight (some
/// leased, some with a veth, some with nothing yet): after the restart exactly the READY
/// sandboxes hold a lease and a veth, and removing everything releases each lease once.
fn released_across_restart() -> Result<()> {
    let mut d = cri::daemon()?;
    let net = d.net().clone();
    let (a, b) = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let a = cri::run_pod(&mut rt, cri::pod_config(&d, "survivor")).await?;
            let b = cri::run_pod(&mut rt, cri::pod_config(&d, "orphan")).await?;
            Ok((a, b))
        }),
    )?;
    let socket = d.socket();
    let cfgs: Vec<pb::PodSandboxConfig> = (0..8)
        .map(|i| cri::pod_config(&d, &format!("inflight{i}")))
        .collect();
    let pending = std::thread::spawn(move || {
        block_on(async move {
            let ch = bosun::cli::client::connect(&socket).await?;
            let rt: Rt = pb::runtime_service_client::RuntimeServiceClient::new(ch);
            let runs = cfgs.into_iter().map(|cfg| {
                let mut rt = rt.clone();
                async move { cri::run_pod(&mut rt, cfg).await }
            });
            let _ = futures::future::join_all(runs).await;
            anyhow::Ok(())
        })
    });
    // Kill once the first in-flight lease is journaled: the rest are mid-way.
    let _ = wait_until(20, || net.journal_lines().len() > 2);
    d.kill9();
    let _ = pending.join();
    d.restart()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let ready: Vec<String> = cri::list_pods(&mut rt, None)
                .await?
                .into_iter()
                .filter(|p| p.state == pb::PodSandboxState::SandboxReady as i32)
                .map(|p| p.id)
                .collect();
            ensure!(
                ready.contains(&a.id) && ready.contains(&b.id),
                "READY after the restart: {ready:?}"
            );
            let leased: Vec<String> = net.journal().into_keys().collect();
            let mut want = ready.clone();
            want.sort();
            ensure!(leased == want, "leases {leased:?} but READY {want:?}");
            ensure!(
                net.veths().len() == ready.len(),
                "veths {:?} for READY {ready:?}",
                net.veths()
            );
            remove_after_restart(&mut rt, d.net(), &a.id, &b.id).await?;
            ensure!(net.leases().is_empty(), "leases left: {:?}", net.leases());
            let lines = net.journal_lines();
            let ids: std::collections::BTreeSet<&str> =
                lines.iter().filter_map(|l| l.split(' ').nth(1)).collect();
            for id in ids {
                ensure!(
                    journal_count(&d, "+", id) == 1 && journal_count(&d, "-", id) == 1,
                    "{id}: journal {lines:?}"
                );
            }
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// After a restart: pod `a` (still READY, its address in the network) is stopped and
/// removed, `b` removed without a stop first, then every other pod.
async fn remove_after_restart(
    rt: &mut Rt,
    net: &crate::support::network::TestNet,
    a: &str,
    b: &str,
) -> Result<()> {
    let (ip_a, _) = pod_ips(rt, a).await?;
    ensure!(net.contains(&ip_a), "after restart pod a reports {ip_a:?}");
    stop_pod(rt, a).await?;
    cri::remove_pod(rt, a).await?;
    rt.remove_pod_sandbox(pb::RemovePodSandboxRequest {
        pod_sandbox_id: b.to_string(),
    })
    .await?;
    for list in cri::list_pods(rt, None).await? {
        cri::remove_pod(rt, &list.id).await?;
    }
    Ok(())
}

/// A conf-dir CNI config (Debian's bridge + host-local behind the logging wrappers): kill -9
/// with a READY pod, a pod nobody stops (removed directly), and a pod whose ADD was running
/// (allocated, not yet recorded as attached): after the restart each IP is released exactly
/// once, by one host-local DEL.
fn cni_released_across_restart() -> Result<()> {
    let mut d = cri::daemon()?;
    let net = d.net().clone();
    net.write_conflist()?;
    let flag = d.dir().join("slow-add");
    // bridge ADD finishes (the address is allocated), then the wrapper holds the answer back
    // while the flag exists: the daemon is killed in that window.
    net.wrap(
        "bridge",
        &format!(
            "in=$(cat); out=$(echo \"$in\" | /usr/lib/cni/bridge); rc=$?\n\
             if [ \"$CNI_COMMAND\" = ADD ] && [ -e {} ]; then touch {}.hit; sleep 20; fi\n\
             echo \"$out\"; exit $rc",
            flag.display(),
            flag.display()
        ),
    )?;
    let (a, b) = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let a = cri::run_pod(&mut rt, cri::pod_config(&d, "survivor")).await?;
            let b = cri::run_pod(&mut rt, cri::pod_config(&d, "orphan")).await?;
            Ok((a, b))
        }),
    )?;
    std::fs::write(&flag, "")?;
    let socket = d.socket();
    let cfg = cri::pod_config(&d, "midadd");
    let pending = std::thread::spawn(move || {
        block_on(async move {
            let ch = bosun::cli::client::connect(&socket).await?;
            let mut rt: Rt = pb::runtime_service_client::RuntimeServiceClient::new(ch);
            let _ = cri::run_pod(&mut rt, cfg).await;
            anyhow::Ok(())
        })
    });
    let hit = flag.with_extension("hit");
    ensure!(
        wait_until(20, || hit.exists()),
        "the mid-ADD pod never reached bridge ADD"
    );
    let mid: String = net
        .calls()
        .iter()
        .find(|c| c.0 == "ADD" && c.3 == "bridge" && c.1 != a.id && c.1 != b.id)
        .map(|c| c.1.clone())
        .context("no ADD for the third pod")?;
    ensure!(
        net.leases().len() == 3,
        "leases before the kill: {:?}",
        net.leases()
    );
    d.kill9();
    std::fs::remove_file(&flag)?;
    let _ = pending.join();
    d.restart()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            // Recovery released the interrupted pod's address, once.
            ensure!(
                leases_of(&d, &mid).is_empty(),
                "mid-ADD lease kept: {:?}",
                net.leases()
            );
            ensure!(
                net.count("DEL", &mid, "host-local") == 1,
                "{:?}",
                net.calls()
            );
            remove_after_restart(&mut rt, d.net(), &a.id, &b.id).await?;
            for id in [&a.id, &b.id, &mid] {
                ensure!(
                    net.count("DEL", id, "host-local") == 1,
                    "{id}: host-local DEL ran {} times: {:?}",
                    net.count("DEL", id, "host-local"),
                    net.calls()
                );
            }
            ensure!(net.leases().is_empty(), "leases left: {:?}", net.leases());
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

fn host_network() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg = cri::pod_config(&d, "hostnet");
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
        }),
    )?;
    cri::assert_clean(&d)
}

async fn network_ready(rt: &mut Rt) -> Result<pb::RuntimeCondition> {
    let st = rt
        .status(pb::StatusRequest { verbose: false })
        .await?
        .into_inner();
    st.status
        .context("no status")?
        .conditions
        .into_iter()
        .find(|c| c.r#type == "NetworkReady")
        .context("no NetworkReady")
}

/// Broken JSON, then a missing plugin: NetworkReady false naming the file / plugin, pod
/// network sandboxes refused (hostNetwork ones still run); config removed: ready again on the
/// embedded network, without a restart.
fn not_ready() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let c = network_ready(&mut rt).await?;
            ensure!(c.status && c.message.contains(&d.net().name), "{c:?}");
            let file = d.net().conf_dir.join("10-broken.conflist");
            std::fs::write(&file, "{ \"cniVersion\": ")?;
            let c = network_ready(&mut rt).await?;
            ensure!(
                !c.status
                    && c.reason == "NetworkPluginNotReady"
                    && c.message.contains("10-broken.conflist"),
                "{c:?}"
            );
            let e = cri::run_pod(&mut rt, cri::pod_config(&d, "refused"))
                .await
                .expect_err("a pod network sandbox while not ready");
            let status = e
                .downcast_ref::<tonic::Status>()
                .context("not a gRPC status")?;
            ensure!(
                status.code() == tonic::Code::FailedPrecondition
                    && status.message().contains("10-broken.conflist"),
                "{status:?}"
            );
            // The kubelet still admits hostNetwork pods: they need no CNI.
            let mut host = cri::pod_config(&d, "hostnet-while-not-ready");
            if let Some(sc) = host
                .linux
                .as_mut()
                .and_then(|l| l.security_context.as_mut())
            {
                sc.namespace_options = Some(pb::NamespaceOption {
                    network: pb::NamespaceMode::Node as i32,
                    pid: pb::NamespaceMode::Container as i32,
                    ipc: pb::NamespaceMode::Pod as i32,
                    ..Default::default()
                });
            }
            let hp = cri::run_pod(&mut rt, host).await?;
            cri::remove_pod(&mut rt, &hp.id).await?;
            std::fs::write(
                &file,
                r#"{"cniVersion":"1.0.0","name":"other","plugins":[{"type":"nosuchplugin"}]}"#,
            )?;
            let c = network_ready(&mut rt).await?;
            ensure!(!c.status && c.message.contains("nosuchplugin"), "{c:?}");
            std::fs::remove_file(&file)?;
            let c = network_ready(&mut rt).await?;
            ensure!(c.status && c.message.contains(&d.net().name), "{c:?}");
            let pods = cri::list_pods(&mut rt, None).await?;
            ensure!(pods.is_empty(), "a refused sandbox is listed: {pods:?}");
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// A plugin that hangs: RunPodSandbox fails at the timeout (the plugin killed, nothing left),
/// and Version/Status/ListPodSandbox answer at once meanwhile.
fn slow_plugin() -> Result<()> {
    let d = cri::daemon_with("[network]\nplugin_timeout_secs = 2\n")?;
    // Hangs on ADD only: the undo's DEL succeeds, so the failed sandbox leaves nothing.
    d.net().wrap(
        "slowpoke",
        "if [ \"$CNI_COMMAND\" = ADD ]; then exec sleep 39.123; fi; cat >/dev/null",
    )?;
    std::fs::write(
        d.net().conf_dir.join("10-slow.conflist"),
        r#"{"cniVersion":"1.0.0","name":"slow","plugins":[{"type":"slowpoke"}]}"#,
    )?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut rt2 = rt.clone();
            let cfg = cri::pod_config(&d, "slow");
            let t = Instant::now();
            let run = tokio::spawn(async move { cri::run_pod(&mut rt2, cfg).await });
            tokio::time::sleep(Duration::from_millis(300)).await;
            for _ in 0..3 {
                let t1 = Instant::now();
                rt.version(pb::VersionRequest::default()).await?;
                network_ready(&mut rt).await?;
                cri::list_pods(&mut rt, None).await?;
                ensure!(
                    t1.elapsed() < crate::support::scaled(Duration::from_millis(500)),
                    "RPCs took {:?} while a plugin hangs",
                    t1.elapsed()
                );
            }
            let r = run.await?;
            let took = t.elapsed();
            let e = match r {
                Ok(p) => bail!("RunPodSandbox succeeded with a hanging plugin: {}", p.id),
                Err(e) => e,
            };
            ensure!(format!("{e:#}").contains("timed out"), "{e:#}");
            ensure!(took < Duration::from_secs(8), "took {took:?}");
            ensure!(
                crate::support::cri::processes_with_argv(&["sleep", "39.123"]).is_empty(),
                "the hanging plugin was not killed"
            );
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// UpdateRuntimeConfig's pod CIDR (dual stack) becomes the embedded network's subnets: the pod
/// gets an IPv4 address in it and an IPv6 one as additional IP, and the host reaches it on both.
fn pod_cidr() -> Result<()> {
    let d = cri::daemon()?;
    let bb = cri::import(&d, "busybox")?;
    let base = d.net().subnet();
    let v4 = base.replace(".0/24", ".128/25");
    let o = d.net().gateway().octets();
    // Canonical spelling (no leading zeros), so the daemon's log and errors read the same.
    let (s0, s1) = (0xfd00 | u16::from(o[1]), u16::from(o[2]));
    let v6 = format!("{s0:x}:{s1:x}::/64");
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            rt.update_runtime_config(pb::UpdateRuntimeConfigRequest {
                runtime_config: Some(pb::RuntimeConfig {
                    network_config: Some(pb::NetworkConfig {
                        pod_cidr: format!("{v4},{v6}"),
                    }),
                }),
            })
            .await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "cidr")).await?;
            let (ip, more) = pod_ips(&mut rt, &pod.id).await?;
            let last: u8 = ip.rsplit('.').next().unwrap_or("0").parse().unwrap_or(0);
            ensure!(d.net().contains(&ip) && last > 128, "{ip} not in {v4}");
            ensure!(more.len() == 1, "additional IPs {more:?}");
            let v6ip: std::net::Ipv6Addr = more[0].parse()?;
            ensure!(v6ip.segments()[..4] == [s0, s1, 0, 0], "{v6ip} not in {v6}");
            // Both families answer from the host at once (no DAD wait on the pod's address).
            cri::create_start(&mut rt, &pod, &cri::sh_config(&pod, "web", &bb, HTTPD)).await?;
            let want = format!("hello-{}", pod.config.hostname);
            wait_http(SocketAddr::new(ip.parse()?, 8080), &want)?;
            wait_http(SocketAddr::new(v6ip.into(), 8080), &want)?;
            cri::remove_pod(&mut rt, &pod.id).await?;
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// RunPodSandbox and StopPodSandbox latency on the embedded network (20 pods, one at a
/// time); prints p50/p90 and checks every pod got its own address.
fn latency() -> Result<()> {
    let d = cri::daemon()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            // Warm-up: the first attach creates the bridge.
            let w = cri::run_pod(&mut rt, cri::pod_config(&d, "warm")).await?;
            let (mut run, mut stop, mut ips, mut ids) = (vec![], vec![], vec![], vec![]);
            for _ in 0..20 {
                let t = Instant::now();
                let p = cri::run_pod(&mut rt, cri::pod_config(&d, "lat")).await?;
                run.push(t.elapsed());
                ips.push(pod_ips(&mut rt, &p.id).await?.0);
                ids.push(p.id);
            }
            for id in &ids {
                let t = Instant::now();
                stop_pod(&mut rt, id).await?;
                stop.push(t.elapsed());
            }
            for id in ids.iter().chain(std::iter::once(&w.id)) {
                cri::remove_pod(&mut rt, id).await?;
            }
            let mut uniq = ips.clone();
            uniq.sort();
            uniq.dedup();
            ensure!(
                uniq.len() == 20 && ips.iter().all(|i| d.net().contains(i)),
                "{ips:?}"
            );
            let pct = |v: &mut Vec<Duration>, p: usize| {
                v.sort();
                v[(v.len() * p / 100).min(v.len() - 1)]
            };
            // The CNI share, from the daemon's log (`ms=` of ADD and DEL).
            let log = d.log();
            let cni_ms = |needle: &str| {
                let mut v: Vec<Duration> = log
                    .lines()
                    .filter(|l| l.contains(needle))
                    .filter_map(|l| {
                        l.split("ms=")
                            .nth(1)?
                            .split_whitespace()
                            .next()?
                            .parse()
                            .ok()
                    })
                    .map(Duration::from_millis)
                    // The second StopPodSandbox (in RemovePodSandbox) has nothing to DEL.
                    .filter(|d| !d.is_zero())
                    .collect();
                if v.is_empty() {
                    Duration::ZERO
                } else {
                    pct(&mut v, 50)
                }
            };
            let (add, del) = (
                cni_ms("pod network attached"),
                cni_ms("pod network DEL done"),
            );
            eprintln!(
                "latency (embedded CNI network, 20 pods): RunPodSandbox p50 {:?} p90 {:?} (CNI ADD p50 {add:?}); StopPodSandbox p50 {:?} p90 {:?} (CNI DEL p50 {del:?})",
                pct(&mut run, 50),
                pct(&mut run, 90),
                pct(&mut stop, 50),
                pct(&mut stop, 90)
            );
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// 200 pod lifecycles (RunPodSandbox with a hostPort, StopPodSandbox, RemovePodSandbox):
/// afterwards no lease, veth, map element or iptables line is left and the table still has
/// exactly its fixed rules (nothing per pod).
fn lifecycles_leave_nothing() -> Result<()> {
    let d = cri::daemon()?;
    let net = d.net().clone();
    let port = free_port()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let warm = cri::run_pod(&mut rt, cri::pod_config(&d, "warm")).await?;
            cri::remove_pod(&mut rt, &warm.id).await?;
            let rules = net.nft_rules();
            ensure!(rules > 0, "no table after the first pod");
            let t = Instant::now();
            for i in 0..200 {
                let mut cfg = cri::pod_config(&d, "cycle");
                cfg.port_mappings = vec![pb::PortMapping {
                    protocol: pb::Protocol::Udp as i32,
                    container_port: 53,
                    host_port: i32::from(port),
                    host_ip: if i % 2 == 0 {
                        "127.0.0.1".into()
                    } else {
                        String::new()
                    },
                }];
                let p = cri::run_pod(&mut rt, cfg).await?;
                if i == 0 {
                    ensure!(net.nft_elements().len() == 1, "{:?}", net.nft_elements());
                    ensure!(net.nft_rules() == rules, "rules changed with a pod");
                }
                cri::remove_pod(&mut rt, &p.id).await?;
            }
            eprintln!("200 lifecycles in {:?}", t.elapsed());
            ensure!(net.journal().is_empty(), "leases left: {:?}", net.journal());
            ensure!(net.veths().is_empty(), "veths left: {:?}", net.veths());
            ensure!(
                net.nft_elements().is_empty(),
                "elements left: {:?}",
                net.nft_elements()
            );
            ensure!(
                net.nft_rules() == rules,
                "{} rules, {rules} before",
                net.nft_rules()
            );
            let ipt: Vec<String> = iptables_save()
                .into_iter()
                .filter(|l| l.contains(&net.name) || l.contains(&net.subnet()))
                .collect();
            ensure!(ipt.is_empty(), "iptables lines: {ipt:?}");
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}

/// The table deleted behind the daemon's back is rebuilt, with the running pod's hostPort, at
/// the next RunPodSandbox; its rules flushed are rebuilt at the next daemon start. iptables-nft
/// keeps working beside it.
fn table_rebuilt() -> Result<()> {
    let mut d = cri::daemon()?;
    let bb = cri::import(&d, "busybox")?;
    let net = d.net().clone();
    let port = free_port()?;
    let via_gw = SocketAddr::new(net.gateway().into(), port);
    let (a, want) = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let mut cfg = cri::pod_config(&d, "keeper");
            cfg.port_mappings = vec![pb::PortMapping {
                protocol: pb::Protocol::Tcp as i32,
                container_port: 8080,
                host_port: i32::from(port),
                host_ip: String::new(),
            }];
            let a = cri::run_pod(&mut rt, cfg).await?;
            cri::create_start(&mut rt, &a, &cri::sh_config(&a, "web", &bb, HTTPD)).await?;
            let want = format!("hello-{}", a.config.hostname);
            wait_http(via_gw, &want)?;
            let rules = net.nft_rules();
            ensure!(net.delete_table(), "nft delete table failed");
            ensure!(
                http_get(via_gw).is_err(),
                "hostPort answers without the table"
            );
            let b = cri::run_pod(&mut rt, cri::pod_config(&d, "trigger")).await?;
            ensure!(
                net.nft_rules() == rules,
                "{} rules after the rebuild, {rules} before",
                net.nft_rules()
            );
            ensure!(net.nft_elements().len() == 1, "{:?}", net.nft_elements());
            wait_http(via_gw, &want)?;
            cri::remove_pod(&mut rt, &b.id).await?;
            ensure!(net.flush_table(), "nft flush table failed");
            ensure!(net.nft_rules() == 0, "flush left rules");
            Ok((a, want))
        }),
    )?;
    let ipt = std::process::Command::new("iptables-save").output()?;
    ensure!(
        ipt.status.success() && !String::from_utf8_lossy(&ipt.stderr).contains(&net.name),
        "iptables-save beside the table: {}",
        String::from_utf8_lossy(&ipt.stderr)
    );
    d.kill9();
    d.restart()?;
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            ensure!(net.nft_rules() > 0, "no rules after the restart");
            wait_http(via_gw, &want)?;
            cri::remove_pod(&mut rt, &a.id).await?;
            ensure!(net.nft_elements().is_empty(), "{:?}", net.nft_elements());
            Ok(())
        }),
    )?;
    cri::assert_clean(&d)
}
