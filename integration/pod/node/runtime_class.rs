//! Supervised pods' `spec.runtimeClassName`: the handler of that name runs the pod, its declared pod overhead sizes the pod cgroup, an unknown name keeps the pod from starting with FailedCreatePodSandBox saying why.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use k8s_openapi::api::core::v1::Pod;

use super::resources::{main_id, read, uid, v1};
use crate::cri::handlers::listed;
use crate::support::cri::{self, NEEDS};
use crate::support::node::{needs_and, pod, run};
use crate::support::pods;
use crate::support::{runc_bin, trial, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "pod::node::runtime_class_picks_the_handler_and_its_overhead_sizes_the_pod_cgroup_v1",
            needs_and(Need::CgroupV1),
            handler_and_overhead_v1,
        ),
        trial(
            "pod::node::an_unknown_runtime_class_keeps_the_pod_from_starting_saying_why",
            NEEDS,
            unknown_class,
        ),
    ]
}

/// A second runc-backed handler `alt` with a root of its own, declaring 50m and 16 MiB.
fn alt_handler() -> Result<String> {
    let runc = runc_bin().context("runc")?;
    Ok(format!(
        "[runtimes.alt]\nbinary = {:?}\nroot = \"@DIR@/alt-root\"\n\
         pod_overhead = {{ cpu = \"50m\", memory = \"16Mi\" }}\n",
        runc.display().to_string()
    ))
}

/// `runtimeClassName: alt`: the container is in alt's root (not the default one); the pod
/// gets alt's overhead as spec.overhead, and its Guaranteed pod cgroup the containers'
/// limits plus the overhead (the kubelet's ResourceConfigForPod): memory 32+16 MiB, CFS quota
/// of 100m+50m, shares of the 150m requested. Deleting the pod empties alt's root.
fn handler_and_overhead_v1() -> Result<()> {
    let d = pods::daemon(10, &alt_handler()?)?;
    let r = (|| {
        let limits = "{requests: {cpu: 100m, memory: 32Mi}, limits: {cpu: 100m, memory: 32Mi}}";
        let p = run(
            &d,
            &pod("classy", limits, "  runtimeClassName: alt\n"),
            "classy",
        )?;
        let id = main_id(&d, "classy")?;
        let root = d.dir().join("alt-root");
        ensure!(
            listed(&root)?.contains(&id),
            "{id} not under {}",
            root.display()
        );
        ensure!(
            !d.dir().join("state/runc").join(&id).exists(),
            "also under the default root"
        );
        let overhead = p.spec.as_ref().and_then(|s| s.overhead.clone());
        let overhead = overhead.context("no spec.overhead")?;
        ensure!(
            overhead.get("cpu").map(|q| q.0.as_str()) == Some("50m")
                && overhead.get("memory").map(|q| q.0.as_str()) == Some(&(16u64 << 20).to_string()),
            "spec.overhead {overhead:?}"
        );
        let parent = d.cgroup_parent();
        let dir = |c: &str| v1(c, &parent, &format!("kubepods/pod{}", uid(&p)));
        ensure!(read(&dir("memory"), "memory.limit_in_bytes")? == (48i64 << 20).to_string());
        ensure!(read(&dir("cpu"), "cpu.cfs_quota_us")? == "15000");
        ensure!(read(&dir("cpu"), "cpu.shares")? == "153");
        pods::cli(&d, &["delete", "--wait=true", "classy"])?;
        ensure!(listed(&root)?.is_empty(), "left under {}", root.display());
        ensure!(!dir("memory").exists(), "pod cgroup left");
        cri::assert_clean(&d)
    })();
    cri::with_log(&d, r)
}

/// `runtimeClassName: kata`, not configured: the pod stays Pending with no container, and a
/// FailedCreatePodSandBox Warning names the runtimeClassName and the configured handlers
/// (the kubelet's event for a RuntimeClass that does not exist); deleting it works.
fn unknown_class() -> Result<()> {
    let d = pods::daemon(10, "")?;
    let r = (|| {
        pods::apply(&d, &pod("lost", "{}", "  runtimeClassName: kata\n"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        let events = loop {
            let events = pods::events(&d, "lost")?;
            if events.contains("FailedCreatePodSandBox") {
                break events;
            }
            if Instant::now() > deadline {
                bail!("no FailedCreatePodSandBox event:\n{events}");
            }
            std::thread::sleep(Duration::from_millis(200));
        };
        ensure!(
            events.contains("runtimeClassName \"kata\"")
                && events.contains("not configured")
                && events.contains("runc"),
            "{events}"
        );
        let p: Pod = pods::get(&d, "lost")?.context("pod gone")?;
        ensure!(pods::phase(&p) == "Pending", "phase {}", pods::phase(&p));
        ensure!(!pods::running(&p, "main"), "main runs");
        pods::cli(&d, &["delete", "--wait=true", "lost"])?;
        cri::assert_clean(&d)
    })();
    cri::with_log(&d, r)
}
