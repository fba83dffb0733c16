//! kill -9 of the daemon at every step of the embedded network's attach (RunPodSandbox) and
//! detach (StopPodSandbox), for a pod with a hostPort: after the restart the pod is usable or
//! removable, its lease is released exactly once, and no veth or nftables element outlives it.

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::crash::{
    call, pod_with_container_in, run_pod_killed_at, stopped_again_and_released, suite, Net, Rpc,
    NEEDS, TRAP3,
};
use crate::support::cri;
use crate::support::{block_on, trial, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "crash::embedded_network_attach_at_every_step",
            NEEDS,
            attach,
        ),
        trial(
            "crash::embedded_network_detach_at_every_step",
            NEEDS,
            detach,
        ),
    ]
}

const ATTACH_POINTS: &[&str] = &[
    "net.attach.leased=kill",
    "net.attach.veth=kill",
    "net.attach.configured=kill",
    "net.attach.done=kill",
];

const DETACH_POINTS: &[&str] = &[
    "net.detach.unplugged=kill",
    "net.detach.elements-removed=kill",
];

/// A pod config of `d` mapping `host_port` to the pod's 8080: the embedded network adds an
/// nftables map element for it, which a crash must neither leak nor leave half-made. Every
/// scenario of a suite maps the same port, so an element left by an earlier one makes the next
/// RunPodSandbox fail ("already mapped").
fn with_host_port(d: &Daemon, name: &str, host_port: u16) -> pb::PodSandboxConfig {
    let mut c = cri::pod_config(d, name);
    c.port_mappings = vec![pb::PortMapping {
        protocol: pb::Protocol::Tcp as i32,
        container_port: 8080,
        host_port: i32::from(host_port),
        host_ip: String::new(),
    }];
    c
}

fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("0.0.0.0:0")?
        .local_addr()?
        .port())
}

/// Killed inside the embedded network's attach: as every RunPodSandbox step (the pod is READY
/// and usable, or NOTREADY and removable, or absent), with the hostPort mapped once.
fn attach() -> Result<()> {
    let port = free_port()?;
    suite(Net::Embedded, ATTACH_POINTS, |d, spec, image, seen| {
        let config = with_host_port(d, "crash-attach", port);
        run_pod_killed_at(d, spec, image, seen, &config)?;
        let elements = d.net().nft_elements();
        ensure!(
            elements.len() == 1,
            "one pod with one hostPort, elements: {elements:?}"
        );
        Ok(())
    })
}

/// Killed inside the embedded network's detach: the containers are already killed; the next
/// StopPodSandbox finishes the teardown, releasing the lease and the hostPort element, and the
/// port can be mapped by a new pod.
fn detach() -> Result<()> {
    let port = free_port()?;
    suite(Net::Embedded, DETACH_POINTS, |d, spec, image, seen| {
        let config = with_host_port(d, "crash-detach", port);
        let (pod, id) = pod_with_container_in(d, config, image, TRAP3)?;
        seen.push(pod.id.clone());
        d.crash_at(spec, |d| call(d, Rpc::StopPod(&pod.id)))?;
        cri::with_log(
            d,
            block_on(async {
                let mut rt = cri::client(d).await?;
                stopped_again_and_released(d, &mut rt, &pod.id, &id).await?;
                let elements = d.net().nft_elements();
                ensure!(
                    elements.is_empty(),
                    "after StopPodSandbox: nft elements {elements:?}"
                );
                // The port is free again for the kubelet's next pod.
                let next =
                    cri::run_pod(&mut rt, with_host_port(d, "crash-detach-next", port)).await?;
                seen.push(next.id.clone());
                Ok(())
            }),
        )
    })
}
