//! A pod's lease and veth are released exactly once: at StopPodSandbox, across a kill -9 with
//! calls in flight (the embedded network and a CNI config), and after 200 lifecycles.

use std::time::Instant;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt, NEEDS};
use crate::support::network::iptables_save;
use crate::support::podnet::{free_port, pod_ips, stop_pod, NET_NEEDS};
use crate::support::Scenario;
use crate::support::{block_on, trial, wait_until, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let _ = NEEDS;
    vec![
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
    ]
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
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "lease")).await?;
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
            journal_count(d, "+", &pod.id) == 1 && journal_count(d, "-", &pod.id) == 1,
            "journal: {:?}",
            d.net().journal_lines()
        );
        ensure!(
            d.net().calls().is_empty(),
            "plugins ran: {:?}",
            d.net().calls()
        );
        Ok(())
    })
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

/// 200 pod lifecycles (RunPodSandbox with a hostPort, StopPodSandbox, RemovePodSandbox):
/// afterwards no lease, veth, map element or iptables line is left and the table still has
/// exactly its fixed rules (nothing per pod).
fn lifecycles_leave_nothing() -> Result<()> {
    Scenario::new().no_image().run(async |s| {
        let d = &s.daemon;
        let net = d.net().clone();
        let port = free_port()?;
        let mut rt = s.rt.clone();
        let warm = cri::run_pod(&mut rt, cri::pod_config(d, "warm")).await?;
        cri::remove_pod(&mut rt, &warm.id).await?;
        let rules = net.nft_rules();
        ensure!(rules > 0, "no table after the first pod");
        let t = Instant::now();
        for i in 0..200 {
            let mut cfg = cri::pod_config(d, "cycle");
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
    })
}
