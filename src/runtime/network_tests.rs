//! Sandbox networking with the fake network: DEL on stop before the netns goes, once per
//! attach as far as the runtime is concerned, kept for a retry when it fails, run by recovery.

use super::state::meta::{SandboxMeta, SandboxRequest};
use super::state::status::{now_ns, SandboxState, SandboxStatus};
use super::test_fixture::{fixture, Fixture};
use crate::network::fake::Call;
use crate::network::{FakeNetwork, Network};
use crate::oci::NamespaceMode;
use crate::runtime::PodName;

/// A sandbox record as RunPodSandbox leaves it: READY (or only CREATED), attached with the
/// fake's address when it has its own network.
async fn sandbox(fx: &Fixture, name: &str, network: NamespaceMode, ready: bool) -> String {
    let req = SandboxRequest {
        pod: PodName {
            name: name.into(),
            namespace: "ns".into(),
            uid: format!("uid-{name}"),
            attempt: 0,
        },
        network,
        ..SandboxRequest::default()
    };
    let t = &fx.rt.state.sandboxes;
    let res = t.reserve(&req.pod.key()).expect("reserve");
    let id = res.id().to_string();
    let meta = SandboxMeta {
        request: req,
        hostname: name.into(),
        state_dir: fx.dir.path().join("state/sandboxes").join(&id),
    };
    let entry = t
        .create(res, meta, SandboxStatus::created(now_ns()))
        .expect("create");
    let ips = fx
        .rt
        .attach_network(&id, entry.meta())
        .await
        .expect("attach");
    if ready {
        entry
            .update(|s| {
                s.ready(now_ns(), 0)?;
                s.ips = ips.iter().map(ToString::to_string).collect();
                s.network_attached = network != NamespaceMode::Node;
                Ok(())
            })
            .expect("ready");
    }
    id
}

fn detaches(net: &FakeNetwork, id: &str) -> usize {
    net.calls()
        .iter()
        .filter(|c| **c == Call::Detach(id.to_string()))
        .count()
}

#[tokio::test]
async fn stop_detaches_and_clears_the_addresses_host_network_skips_cni() {
    let fx = fixture();
    let id = sandbox(&fx, "web", NamespaceMode::Pod, true).await;
    let st = fx.rt.sandbox(&id).expect("entry").status();
    assert_eq!(st.ips, ["10.99.0.1"]);
    assert!(st.network_attached);
    fx.rt.stop_sandbox(&id).await.expect("stop");
    assert_eq!(detaches(&fx.net, &id), 1);
    assert!(fx.net.attached().is_empty(), "IP not released");
    let st = fx.rt.sandbox(&id).expect("entry").status();
    assert_eq!(st.state(), SandboxState::NotReady);
    assert!(st.ips.is_empty() && !st.network_attached, "{st:?}");
    fx.rt.remove_sandbox(&id).await.expect("remove");

    let host = sandbox(&fx, "hostnet", NamespaceMode::Node, true).await;
    fx.rt.stop_sandbox(&host).await.expect("stop");
    fx.rt.remove_sandbox(&host).await.expect("remove");
    let touched = fx.net.calls().iter().any(|c| match c {
        Call::Attach(i) | Call::Detach(i) | Call::Check(i) | Call::Defer(i) => i == &host,
    });
    assert!(
        !touched,
        "host network pod reached CNI: {:?}",
        fx.net.calls()
    );
}

#[tokio::test]
async fn a_failed_detach_fails_the_stop_and_keeps_the_sandbox_for_a_retry() {
    let fx = fixture();
    let id = sandbox(&fx, "web", NamespaceMode::Pod, true).await;
    fx.net.fail_detach(Some("plugin exploded"));
    let e = fx.rt.stop_sandbox(&id).await.expect_err("stop fails");
    assert!(e.to_string().contains("plugin exploded"), "{e}");
    let st = fx.rt.sandbox(&id).expect("entry").status();
    assert_eq!(st.state(), SandboxState::Ready, "{st:?}");
    assert!(st.network_attached);
    fx.net.fail_detach(None);
    // RemovePodSandbox of the not-stopped pod DELs too.
    fx.rt.remove_sandbox(&id).await.expect("remove");
    assert!(fx.net.attached().is_empty());
    assert!(fx.rt.sandbox(&id).is_err(), "still there");
}

#[tokio::test]
async fn recovery_detaches_interrupted_and_vanished_sandboxes_only() {
    let fx = fixture();
    // Set-up interrupted after ADD (CREATED), and a READY one whose netns is gone (reboot).
    let interrupted = sandbox(&fx, "half", NamespaceMode::Pod, false).await;
    let gone = sandbox(&fx, "gone", NamespaceMode::Pod, true).await;
    fx.rt.recover().await;
    for id in [&interrupted, &gone] {
        assert_eq!(detaches(&fx.net, id), 1, "{id}: {:?}", fx.net.calls());
        let st = fx.rt.sandbox(id).expect("entry").status();
        assert_eq!(st.state(), SandboxState::NotReady);
        assert!(!st.network_attached && st.ips.is_empty(), "{st:?}");
    }
    assert!(fx.net.attached().is_empty());
    // A second recovery (another restart) finds nothing left to detach.
    let before = fx.net.calls().len();
    fx.rt.recover().await;
    assert_eq!(fx.net.calls().len(), before, "{:?}", fx.net.calls());
}

#[test]
fn status_json_from_before_networking_still_loads() {
    let old = r#"{"version":3,"created_ns":1,"ready_ns":2,"stopped_ns":0,"pid":0,"message":"","removing":false,"unknown":false}"#;
    let st: SandboxStatus = serde_json::from_str(old).expect("old status.json");
    assert_eq!(st.state(), SandboxState::Ready);
    assert!(st.ips.is_empty() && !st.network_attached);
}

#[tokio::test]
async fn network_status_and_pod_cidr_reach_the_network() {
    let fx = fixture();
    assert!(fx.rt.network_status().ready);
    fx.rt.set_pod_cidr("10.1.0.0/24").expect("cidr");
    assert_eq!(fx.net.pod_cidr(), "10.1.0.0/24");
    assert!(fx.rt.set_pod_cidr("not-a-cidr").is_err());
    fx.net.set_not_ready("no config");
    let s = fx.net.status();
    assert!(!s.ready && s.message == "no config");
}

#[test]
fn pod_network_maps_host_ports_dns_and_bandwidth_annotations() {
    use super::state::meta::{Dns, PortMapping};
    let mut req = SandboxRequest {
        pod: PodName {
            name: "web".into(),
            namespace: "ns".into(),
            uid: "u".into(),
            attempt: 1,
        },
        port_mappings: vec![
            PortMapping {
                protocol: "UDP".into(),
                container_port: 53,
                host_port: 5353,
                host_ip: "127.0.0.1".into(),
            },
            PortMapping {
                protocol: "TCP".into(),
                container_port: 80,
                host_port: 0,
                host_ip: String::new(),
            },
        ],
        dns: Some(Dns {
            servers: vec!["10.96.0.10".into()],
            ..Dns::default()
        }),
        ..SandboxRequest::default()
    };
    req.annotations
        .insert("kubernetes.io/ingress-bandwidth".into(), "10M".into());
    req.annotations
        .insert("kubernetes.io/egress-bandwidth".into(), "1Mi".into());
    let meta = SandboxMeta {
        request: req,
        hostname: "web".into(),
        state_dir: "/run/bosun/sandboxes/sb".into(),
    };
    let p = super::network::pod_network("sb", &meta);
    assert_eq!(
        p.netns,
        std::path::Path::new("/run/bosun/sandboxes/sb/ns/net")
    );
    assert_eq!(
        (p.name.as_str(), p.namespace.as_str(), p.uid.as_str()),
        ("web", "ns", "u")
    );
    assert_eq!(p.port_mappings.len(), 1, "host_port 0 is not a mapping");
    let m = &p.port_mappings[0];
    assert_eq!(
        (
            m.host_port,
            m.container_port,
            m.protocol.as_str(),
            m.host_ip.as_str()
        ),
        (5353, 53, "udp", "127.0.0.1")
    );
    assert_eq!(
        p.dns.as_ref().map(|d| d.servers.clone()),
        Some(vec!["10.96.0.10".to_string()])
    );
    let bw = p.bandwidth.expect("bandwidth");
    assert_eq!((bw.ingress_rate, bw.egress_rate), (10_000_000, 1 << 20));
    assert_eq!(bw.ingress_burst, u64::from(u32::MAX));
    let mut bad = std::collections::BTreeMap::new();
    bad.insert(
        "kubernetes.io/ingress-bandwidth".to_string(),
        "fast".to_string(),
    );
    assert!(super::network::bandwidth(&bad).is_none());
}

/// Issue 28: a DEL handed over by a failed RunPodSandbox is retried in the background (the
/// ordinary DEL leaves it alone meanwhile) until it succeeds; a restart resumes it.
#[tokio::test(start_paused = true)]
async fn a_handed_over_del_is_retried_in_the_background_until_it_succeeds() {
    use std::time::Duration;
    let fx = fixture();
    let id = sandbox(&fx, "web", NamespaceMode::Pod, true).await;
    let entry = fx.rt.sandbox(&id).expect("entry");
    fx.net.fail_detach(Some("plugin exploded"));
    let why = fx.rt.detach_network(&entry).await.expect_err("DEL fails");
    fx.rt
        .hand_over_detach(&entry, &why)
        .await
        .expect("handed over");
    assert!(fx.net.calls().contains(&Call::Defer(id.clone())));
    fx.rt
        .detach_network(&entry)
        .await
        .expect("left to the retry");
    let before = detaches(&fx.net, &id);
    // Tries at 1, 3 and 7 s, all failing.
    tokio::time::sleep(Duration::from_millis(7500)).await;
    assert_eq!(detaches(&fx.net, &id) - before, 3, "{:?}", fx.net.calls());
    assert_eq!(fx.net.deferred().len(), 1);
    fx.net.fail_detach(None);
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(fx.net.deferred().is_empty(), "{:?}", fx.net.calls());
    assert!(fx.net.attached().is_empty(), "the address is back");

    // What a restart finds handed over is tried again at once.
    let pod = super::network::pod_network(&id, entry.meta());
    fx.net.defer_detach(&pod).await.expect("deferred");
    fx.rt.resume_deferred_detaches();
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(fx.net.deferred().is_empty(), "{:?}", fx.net.calls());
}
