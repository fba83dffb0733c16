//! The network's own state: NetworkReady false on an unusable config, a slow plugin not
//! stalling other RPCs, the pod CIDR from UpdateRuntimeConfig, the nftables table rebuilt after
//! a flush behind the daemon's back.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt, NEEDS};
use crate::support::podnet::{free_port, http_get, pod_ips, wait_http, HTTPD, NET_NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let _ = NEEDS;
    vec![
        trial(
            "cri::network::nft_table_rebuilt_after_a_flush_behind_our_back",
            NET_NEEDS,
            table_rebuilt,
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
    ]
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
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
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
        let e = cri::run_pod(&mut rt, cri::pod_config(d, "refused"))
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
        let mut host = cri::pod_config(d, "hostnet-while-not-ready");
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
    })
}

/// A plugin that hangs: RunPodSandbox fails at the timeout (the plugin killed, nothing left),
/// and Version/Status/ListPodSandbox answer at once meanwhile.
fn slow_plugin() -> Result<()> {
    Scenario::new()
        .config("[network]\nplugin_timeout_secs = 2\n")
        .no_image()
        .run(async |s| {
            let d = &s.daemon;
            // Hangs on ADD only: the undo's DEL succeeds, so the failed sandbox leaves nothing.
            d.net().wrap(
                "slowpoke",
                "if [ \"$CNI_COMMAND\" = ADD ]; then exec sleep 39.123; fi; cat >/dev/null",
            )?;
            std::fs::write(
                d.net().conf_dir.join("10-slow.conflist"),
                r#"{"cniVersion":"1.0.0","name":"slow","plugins":[{"type":"slowpoke"}]}"#,
            )?;
            let mut rt = s.rt.clone();
            let mut rt2 = rt.clone();
            let cfg = cri::pod_config(d, "slow");
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
        })
}

/// UpdateRuntimeConfig's pod CIDR (dual stack) becomes the embedded network's subnets: the pod
/// gets an IPv4 address in it and an IPv6 one as additional IP, and the host reaches it on both.
fn pod_cidr() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let bb = s.image("busybox");
        let base = d.net().subnet();
        let v4 = base.replace(".0/24", ".128/25");
        let o = d.net().gateway().octets();
        // Canonical spelling (no leading zeros), so the daemon's log and errors read the same.
        let (s0, s1) = (0xfd00 | u16::from(o[1]), u16::from(o[2]));
        let v6 = format!("{s0:x}:{s1:x}::/64");
        let mut rt = s.rt.clone();
        rt.update_runtime_config(pb::UpdateRuntimeConfigRequest {
            runtime_config: Some(pb::RuntimeConfig {
                network_config: Some(pb::NetworkConfig {
                    pod_cidr: format!("{v4},{v6}"),
                }),
            }),
        })
        .await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "cidr")).await?;
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
    })
}

/// The table deleted behind the daemon's back is rebuilt, with the running pod's hostPort, at
/// the next RunPodSandbox; its rules flushed are rebuilt at the next daemon start. iptables-nft
/// keeps working beside it.
fn table_rebuilt() -> Result<()> {
    Scenario::new().run(async |s| {
        let bb = s.image("busybox");
        let d = &s.daemon;
        let net = d.net().clone();
        let port = free_port()?;
        let via_gw = SocketAddr::new(net.gateway().into(), port);
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let (a, want) = async {
            let mut cfg = cri::pod_config(d, "keeper");
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
            let b = cri::run_pod(&mut rt, cri::pod_config(d, "trigger")).await?;
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
            Ok::<_, anyhow::Error>((a, want))
        }
        .await?;
        let d = &mut s.daemon;
        let ipt = std::process::Command::new("iptables-save").output()?;
        ensure!(
            ipt.status.success() && !String::from_utf8_lossy(&ipt.stderr).contains(&net.name),
            "iptables-save beside the table: {}",
            String::from_utf8_lossy(&ipt.stderr)
        );
        d.kill9();
        d.restart()?;
        s.reconnect().await?;
        let mut rt = s.rt.clone();
        async {
            ensure!(net.nft_rules() > 0, "no rules after the restart");
            wait_http(via_gw, &want)?;
            cri::remove_pod(&mut rt, &a.id).await?;
            ensure!(net.nft_elements().is_empty(), "{:?}", net.nft_elements());
            Ok::<_, anyhow::Error>(())
        }
        .await?;
        Ok(())
    })
}
