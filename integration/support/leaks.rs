//! The full leak check of the crash tests: once every pod is removed, nothing any pod had may
//! be left on the host — files under the daemon's dirs, mounts and pinned namespaces,
//! processes (monitors, pod inits, runc, CNI plugin calls), cgroups, runc state, IP leases,
//! veths (on the bridge or not), iptables/ip6tables rules and chains, nftables map elements.

use std::path::{Path, PathBuf};

use anyhow::Result;

use super::{cri, wait_until, Daemon};

/// Every line of `iptables-save` and `ip6tables-save` (all tables).
pub fn firewall_lines() -> Vec<String> {
    ["iptables-save", "ip6tables-save"]
        .iter()
        .flat_map(|tool| {
            std::process::Command::new(tool)
                .output()
                .map(|o| {
                    String::from_utf8_lossy(&o.stdout)
                        .lines()
                        .map(|l| format!("{tool}: {l}"))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect()
}

/// Files named `.tmp-*` (interrupted atomic writes) under `dir`, not crossing into mounts.
fn temp_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let Ok(t) = e.file_type() else { continue };
            if e.file_name().to_string_lossy().starts_with(".tmp-") {
                out.push(e.path());
            } else if t.is_dir() {
                stack.push(e.path());
            }
        }
    }
    out
}

/// What is left of any pod of daemon `d` (empty when clean). `sandbox_ids`: every sandbox
/// the test saw, whose per-pod firewall chains are looked up by name.
pub fn leaks(d: &Daemon, sandbox_ids: &[String]) -> Vec<String> {
    let mut out = cri::leftovers(d);
    out.extend(
        cri::runc_containers(&d.state())
            .into_iter()
            .map(|c| format!("runc container {c}")),
    );
    // Per-object files: CNI records (the pod CIDR is the node's, not a pod's), runc state,
    // bundles' temp dirs, interrupted writes anywhere.
    let network = d.root().join("network");
    for (dir, keep) in [
        (network.clone(), &["pod-cidr"][..]),
        (d.state().join("runc"), &[][..]),
        (d.state().join("tmp"), &[][..]),
    ] {
        for e in cri::entries(&dir) {
            if !keep.contains(&e.as_str()) {
                out.push(format!("file {}", dir.join(e).display()));
            }
        }
    }
    for dir in [d.root(), d.state()] {
        out.extend(
            temp_files(&dir)
                .into_iter()
                .map(|p| format!("temp file {}", p.display())),
        );
    }
    let net = d.net();
    out.extend(net.leases().into_iter().map(|ip| format!("IP lease {ip}")));
    let brif = Path::new("/sys/class/net").join(&net.bridge).join("brif");
    out.extend(
        cri::entries(&brif)
            .into_iter()
            .map(|v| format!("veth {v} on bridge {}", net.bridge)),
    );
    // The embedded network unplugs a pod's veth and leaves the pair to the netns's end: it
    // must be gone from the host too, not merely off the bridge.
    out.extend(
        sandbox_ids
            .iter()
            .map(|id| bosun::network::native::veth_name(id))
            .filter(|v| Path::new("/sys/class/net").join(v).exists())
            .map(|v| format!("veth {v} (off the bridge)")),
    );
    // The embedded network's hostPort elements in its nftables table.
    out.extend(
        net.nft_elements()
            .into_iter()
            .map(|e| format!("nft element {e}")),
    );
    let chains: Vec<String> = sandbox_ids
        .iter()
        .flat_map(|id| bosun::network::firewall::pod_chains(&net.name, id))
        .collect();
    for l in firewall_lines() {
        let ours = l.contains(&net.name)
            || l.contains(&net.subnet())
            || sandbox_ids.iter().any(|id| l.contains(id.as_str()))
            || chains.iter().any(|c| l.contains(c.as_str()));
        if ours {
            out.push(format!("firewall {l}"));
        }
    }
    for pid in bosun::network::orphans::find(&network.display().to_string()) {
        out.push(format!("CNI plugin call {pid}: {:?}", cri::cmdline(pid)));
    }
    out
}

/// Fails naming every leftover (after up to 10 s for exits to settle).
pub fn assert_none(d: &Daemon, sandbox_ids: &[String]) -> Result<()> {
    wait_until(10, || leaks(d, sandbox_ids).is_empty());
    let left = leaks(d, sandbox_ids);
    let r = if left.is_empty() {
        Ok(())
    } else {
        Err(anyhow::anyhow!("left behind:\n  {}", left.join("\n  ")))
    };
    cri::with_log(d, r)
}
