//! CNI across daemon crashes (issue 16): a plugin call of a killed daemon must not run on
//! beside the next daemon's recovery DEL of the same sandbox, and a DEL that did not remove
//! what ADD made (masquerade rules) must not count as done.

use std::time::Duration;

use anyhow::{ensure, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::crash::{self as steps, call, Net, Rpc, NEEDS};
use crate::support::cri;
use crate::support::network::DEBIAN_PLUGINS;
use crate::support::{block_on, leaks, trial};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "crash::cni::a_killed_daemons_plugin_call_dies_before_recovery_deletes",
            NEEDS,
            orphaned_add,
        ),
        trial(
            "crash::cni::a_del_that_left_masquerade_rules_is_not_done",
            NEEDS,
            del_left_rules,
        ),
        trial(
            "crash::cni::a_del_cut_short_by_a_crash_is_not_trusted",
            NEEDS,
            del_cut_short,
        ),
    ]
}

/// The daemon dies while bridge's ADD runs (slowed down to 3 s × BOSUN_TEST_TIME_SCALE: under
/// qemu TCG the restart alone takes ~6 s, and the ADD must outlast it). The next daemon
/// recovers the sandbox at once (NOTREADY, DEL). Had the old ADD gone on, it would create the
/// veth, the lease and the masquerade chain after that DEL, for good.
fn orphaned_add() -> Result<()> {
    let mut d = steps::daemon(Net::Plugins)?;
    let slow = 3 * crate::support::time_scale();
    d.net().wrap(
        "bridge",
        &format!("[ \"$CNI_COMMAND\" = ADD ] && sleep {slow}\nexec {DEBIAN_PLUGINS}/bridge"),
    )?;
    let config = cri::pod_config(&d, "orphan");
    // Plugin calls of an ADD: bridge, then portmap (the loopback is set up in-process).
    d.crash_at("cni.add.plugin-running=kill", |d| {
        call(d, Rpc::RunPod(&config))
    })?;
    // Longer than the slowed ADD: what it would have made is there by now.
    std::thread::sleep(crate::support::scaled(Duration::from_secs(4)));
    let mut seen = Vec::new();
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            for p in cri::list_pods(&mut rt, None).await? {
                ensure!(
                    p.state == pb::PodSandboxState::SandboxNotready as i32,
                    "a sandbox whose set-up was cut short: {p:?}"
                );
                seen.push(p.id.clone());
                cri::remove_pod(&mut rt, &p.id).await?;
            }
            Ok(())
        }),
    )?;
    leaks::assert_none(&d, &seen)?;
    ensure!(
        d.log()
            .contains("killed a CNI plugin call left by the previous daemon"),
        "recovery did not report the killed plugin call"
    );
    Ok(())
}

/// Rules of sandbox `id` in the firewall.
fn tagged(id: &str) -> Vec<String> {
    leaks::firewall_lines()
        .into_iter()
        .filter(|l| l.contains(id))
        .collect()
}

/// The first DEL deletes the pod's interface and then fails (as bridge does when iptables
/// answers "Device or resource busy"); the retried DEL finds no interface, so bridge skips the
/// masquerade teardown and says it succeeded. The rules it left must be found and removed
/// before the sandbox counts as detached.
fn del_left_rules() -> Result<()> {
    interrupted_del(false)
}

/// The same, but the first DEL is cut short by the daemon's death after it deleted the
/// interface (the next daemon kills what is left of the call).
fn del_cut_short() -> Result<()> {
    interrupted_del(true)
}

/// A pod whose first bridge DEL deletes the interface, then fails or (`crash`) hangs while the
/// daemon is killed; StopPodSandbox again must leave no rule of the pod.
fn interrupted_del(crash: bool) -> Result<()> {
    let mut d = steps::daemon(Net::Plugins)?;
    let flag = d.dir().join("first-del-done");
    let end = if crash {
        "exec sleep 600"
    } else {
        "echo '{\"cniVersion\":\"1.0.0\",\"code\":999,\"msg\":\"simulated: iptables: Device or resource busy\"}'; exit 1"
    };
    d.net().wrap(
        "bridge",
        &format!(
            "if [ \"$CNI_COMMAND\" = DEL ] && [ ! -e {flag} ]; then\n\
             touch {flag}\n\
             nsenter --net=\"$CNI_NETNS\" ip link del \"$CNI_IFNAME\"\n\
             {end}\n\
             fi\n\
             exec {DEBIAN_PLUGINS}/bridge",
            flag = flag.display()
        ),
    )?;
    let pod = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::run_pod(&mut rt, cri::pod_config(&d, "masq")).await
        }),
    )?;
    ensure!(
        !tagged(&pod.id).is_empty(),
        "bridge made no masquerade rule naming the sandbox: the test proves nothing"
    );
    if crash {
        // DEL runs portmap, then bridge (the second plugin call).
        d.crash_at("cni.del.plugin-running=2@kill", |d| {
            call(d, Rpc::StopPod(&pod.id))
        })?;
    } else {
        let first = call(&d, Rpc::StopPod(&pod.id));
        ensure!(first.is_err(), "the first DEL did not fail: {first:?}");
    }
    ensure!(flag.exists(), "the first DEL never ran");
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            rt.stop_pod_sandbox(pb::StopPodSandboxRequest {
                pod_sandbox_id: pod.id.clone(),
            })
            .await?;
            let left = tagged(&pod.id);
            ensure!(
                left.is_empty(),
                "StopPodSandbox succeeded with rules of the pod left:\n{}",
                left.join("\n")
            );
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    leaks::assert_none(&d, &[pod.id])
}
