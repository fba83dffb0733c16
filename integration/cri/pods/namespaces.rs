//! Pods in the host's namespaces (network, IPC, PID: no pins, the host's resolv.conf and
//! hostname), a pod pid namespace with its init as PID 1, and pod sysctls (a host-wide one
//! refused).

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, map, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::pods::host_namespaces_pod_pid_namespace_and_sysctls",
        NEEDS,
        host_and_pod_namespaces,
    )]
}

fn host_and_pod_namespaces() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let host_ns = |n: &str| {
            std::fs::read_link(format!("/proc/self/ns/{n}"))
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        };
        let host_name = std::fs::read_to_string("/proc/sys/kernel/hostname")?
            .trim()
            .to_string();
        let mut rt = s.rt.clone();
        const NS: &str =
            "for n in net ipc pid uts; do echo $n=$(readlink /proc/self/ns/$n); done; \
            echo hostname=$(hostname); echo resolv=$(md5sum < /etc/resolv.conf)";

        // Host network, IPC and PID.
        let mut cfg = cri::pod_config(d, "host-ns");
        let host = pb::NamespaceOption {
            network: pb::NamespaceMode::Node as i32,
            pid: pb::NamespaceMode::Node as i32,
            ipc: pb::NamespaceMode::Node as i32,
            ..Default::default()
        };
        if let Some(sc) = cfg.linux.as_mut().and_then(|l| l.security_context.as_mut()) {
            sc.namespace_options = Some(host.clone());
        }
        let pod = cri::run_pod(&mut rt, cfg).await?;
        let c = cri::sh_config(&pod, "host", &busybox, NS);
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
        let f = cri::facts(&cri::lines_of(&cri::read_log(&pod.log_of(&c))?, "stdout"));
        for n in ["net", "ipc", "pid", "uts"] {
            ensure!(
                f.get(n) == Some(&host_ns(n)),
                "host {n} namespace wanted: {:?} vs host {:?}",
                f.get(n),
                host_ns(n)
            );
        }
        // No DNSConfig: the host's resolv.conf.
        let host_resolv = std::process::Command::new("sh")
            .args(["-c", "md5sum < /etc/resolv.conf"])
            .output()?;
        let host_resolv = String::from_utf8_lossy(&host_resolv.stdout)
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        ensure!(
            f.get("resolv").and_then(|r| r.split_whitespace().next())
                == Some(host_resolv.as_str()),
            "resolv.conf without DNSConfig: {:?}, host {host_resolv:?}",
            f.get("resolv")
        );
        ensure!(
            f.get("hostname") == Some(&host_name),
            "host-network pod hostname {:?}, host {host_name:?}",
            f.get("hostname")
        );
        ensure!(
            cri::mounts_under(&d.state().join("sandboxes").join(&pod.id))
                .iter()
                .all(|(_, fs)| fs != "nsfs"),
            "a host-namespace pod pinned namespaces"
        );
        cri::remove_pod(&mut rt, &pod.id).await?;

        // A pod pid namespace: the pod init is PID 1, containers see each other.
        let mut cfg = cri::pod_config(d, "pod-pid");
        cri::share_pid(&mut cfg);
        cfg.linux.get_or_insert_with(Default::default).sysctls = map(&[
            ("net.ipv4.ip_unprivileged_port_start", "77"),
            ("kernel.shm_rmid_forced", "1"),
        ]);
        let pod = cri::run_pod(&mut rt, cfg).await?;
        let sleeper = format!("{}", 700_000 + std::process::id() % 90_000);
        let a = cri::sh_config(&pod, "a", &busybox, &format!("exec sleep {sleeper}"));
        cri::create_start(&mut rt, &pod, &a).await?;
        let script = format!(
            "echo pid1=$(tr '\\0' ' ' < /proc/1/cmdline); \
             for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -q '^sleep {sleeper}' \
               && echo sees-a=yes || echo sees-a=no; \
             echo port=$(cat /proc/sys/net/ipv4/ip_unprivileged_port_start); \
             echo rmid=$(cat /proc/sys/kernel/shm_rmid_forced); echo me=$$"
        );
        let b = cri::sh_config(&pod, "b", &busybox, &script);
        // a's sleep must be running before b looks.
        let argv = ["sleep", sleeper.as_str()];
        ensure!(
            crate::support::wait_until(10, || !cri::processes_with_argv(&argv).is_empty()),
            "container a's sleep never ran"
        );
        let id = cri::create_start(&mut rt, &pod, &b).await?;
        cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
        let out = cri::lines_of(&cri::read_log(&pod.log_of(&b))?, "stdout");
        let f = cri::facts(&out);
        ensure!(
            f.get("pid1").is_some_and(|c| c.contains("pod-init")),
            "PID 1 of a pod pid namespace: {out:?}"
        );
        ensure!(
            f.get("sees-a").map(String::as_str) == Some("yes"),
            "containers of a shared-pid pod do not see each other: {out:?}"
        );
        ensure!(f.get("me").is_some_and(|p| p != "1"), "{out:?}");
        ensure!(
            f.get("port").map(String::as_str) == Some("77")
                && f.get("rmid").map(String::as_str) == Some("1"),
            "pod sysctls: {out:?}"
        );
        let on_host = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")?;
        ensure!(on_host.trim() != "77", "a pod sysctl leaked to the host");
        cri::remove_pod(&mut rt, &pod.id).await?;

        // A sysctl that is not namespaced is refused, and nothing is left.
        let mut cfg = cri::pod_config(d, "bad-sysctl");
        cfg.linux.get_or_insert_with(Default::default).sysctls = map(&[("kernel.panic", "1")]);
        let err = cri::run_pod(&mut rt, cfg)
            .await
            .err()
            .context("a host sysctl was accepted")?;
        let st = cri::status_of(&err).with_context(|| format!("{err:#}"))?;
        ensure!(
            st.code() == tonic::Code::InvalidArgument && st.message().contains("kernel.panic"),
            "non-namespaced sysctl: {:?} {}",
            st.code(),
            st.message()
        );
        ensure!(cri::list_pods(&mut rt, None).await?.is_empty());
        Ok(())
    })
}
