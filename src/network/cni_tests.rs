//! Tests of [`Cni`] with recording shell-script plugins: conf dir choice and reload, chaining,
//! DEL order and exactly-once, capabilities, readiness, the pod CIDR.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::Value;

use super::*;
use crate::config::NetworkConfig;

/// A plugin that logs `type COMMAND IFNAME CNI_ARGS` and its stdin, and answers ADD with a
/// result naming itself in `dns.domain` and address `10.9.0.<n>/24` (`n` from `$N`).
const RECORDER: &str = r#"#!/bin/sh
in=$(cat)
t=$(basename "$0")
printf '%s %s %s %s\n%s\n' "$t" "$CNI_COMMAND" "$CNI_IFNAME" "$CNI_ARGS" "$in" >> "$(dirname "$0")/calls.log"
if [ "$CNI_COMMAND" = ADD ]; then
  printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"interface":0,"address":"10.9.0.7/24"},{"interface":0,"address":"fd09::7/64"}],"dns":{"domain":"%s"}}' "$CNI_IFNAME" "$CNI_NETNS" "$t"
fi
"#;

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new(plugins: &[&str]) -> Env {
        let dir = tempfile::tempdir().expect("tmp");
        std::fs::create_dir_all(dir.path().join("bin")).expect("bin");
        std::fs::create_dir_all(dir.path().join("net.d")).expect("net.d");
        for p in plugins {
            let path = dir.path().join("bin").join(p);
            crate::testutil::script(&path, RECORDER);
        }
        Env { dir }
    }
    fn conf_dir(&self) -> PathBuf {
        self.dir.path().join("net.d")
    }
    fn cfg(&self) -> NetworkConfig {
        NetworkConfig {
            conf_dir: self.conf_dir(),
            bin_dirs: vec![
                self.dir.path().join("nothing-here"),
                self.dir.path().join("bin"),
            ],
            data_dir: self.dir.path().join("ipam"),
            masquerade: false,
            ..NetworkConfig::default()
        }
    }
    fn cni(&self) -> Cni {
        Cni::new(self.cfg(), self.dir.path().join("cache"))
            .expect("cni")
            .with_claims_dir(self.dir.path().join("claims"))
    }
    fn write_conf(&self, name: &str, text: &str) {
        std::fs::write(self.conf_dir().join(name), text).expect("conf");
    }
    /// (type, command, ifname, args, stdin) per call.
    fn calls(&self) -> Vec<(String, String, String, String, Value)> {
        let text =
            std::fs::read_to_string(self.dir.path().join("bin/calls.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines
            .chunks(2)
            .map(|c| {
                let mut head = c[0].splitn(4, ' ').map(str::to_string);
                let mut next = || head.next().unwrap_or_default();
                let (t, cmd, ifname, args) = (next(), next(), next(), next());
                let stdin = serde_json::from_str(c.get(1).copied().unwrap_or("null"))
                    .unwrap_or(Value::Null);
                (t, cmd, ifname, args, stdin)
            })
            .collect()
    }
    fn clear_calls(&self) {
        let _ = std::fs::remove_file(self.dir.path().join("bin/calls.log"));
    }
}

fn pod(id: &str) -> PodNetwork {
    PodNetwork {
        id: id.into(),
        netns: PathBuf::from("/proc/self/ns/net"),
        name: "web".into(),
        namespace: "ns1".into(),
        uid: "uid-1".into(),
        port_mappings: vec![PortMap {
            host_port: 8080,
            container_port: 80,
            protocol: "tcp".into(),
            host_ip: String::new(),
        }],
        ..Default::default()
    }
}

#[tokio::test]
async fn no_config_is_the_embedded_network_which_runs_no_plugin() {
    let env = Env::new(&[]);
    let cni = env.cni();
    let st = cni.status();
    assert!(st.ready, "{st:?}");
    assert_eq!(st.name, "bosun");
    assert!(
        st.message.contains("embedded") && st.message.contains("10.86.0.0/16"),
        "{st:?}"
    );
    // Tearing down a sandbox it never leased an address records nothing.
    cni.detach(&pod("sb1")).await.expect("detach");
    let journal = std::fs::read_to_string(env.dir.path().join("ipam/bosun/leases"));
    assert_eq!(
        journal.unwrap_or_default(),
        "",
        "a release of nothing was recorded"
    );
    assert!(env.calls().is_empty(), "{:?}", env.calls());
    // A conf file turns the plugins on; removing it turns the embedded network back on.
    env.write_conf(
        "10-a.conflist",
        r#"{"cniVersion":"1.0.0","name":"a","plugins":[{"type":"nosuch"}]}"#,
    );
    assert!(!cni.status().ready);
    std::fs::remove_file(env.conf_dir().join("10-a.conflist")).expect("rm");
    assert!(cni.status().ready);
}

#[tokio::test]
async fn lowest_named_file_wins_and_changes_are_picked_up() {
    let env = Env::new(&["bridge", "portmap", "ptp"]);
    env.write_conf(
        "20-b.conflist",
        r#"{"cniVersion":"1.0.0","name":"bee","plugins":[{"type":"bridge"}]}"#,
    );
    env.write_conf(
        "10-a.conf",
        r#"{"cniVersion":"0.4.0","name":"ay","type":"ptp"}"#,
    );
    let cni = env.cni();
    assert_eq!(cni.status().name, "ay");
    cni.attach(&pod("sb2")).await.expect("attach");
    assert_eq!(env.calls()[0].0, "ptp");
    cni.check(&pod("sb2")).await.expect("check (0.4.0)");
    assert_eq!(
        env.calls().last().map(|c| c.1.clone()).as_deref(),
        Some("CHECK")
    );
    // The winner goes away: the next file is used; the attached pod is still DELed with the
    // config it was attached with.
    std::fs::remove_file(env.conf_dir().join("10-a.conf")).expect("rm");
    let st = cni.status();
    assert_eq!(st.name, "bee", "{st:?}");
    env.clear_calls();
    cni.detach(&pod("sb2")).await.expect("detach");
    assert_eq!(env.calls()[0].0, "ptp");
    // Broken JSON in the lowest name: not ready, the message names the file.
    env.write_conf("05-bad.conflist", "{ nope");
    let st = cni.status();
    assert!(!st.ready, "{st:?}");
    assert_eq!(st.reason, REASON_NOT_READY);
    assert!(st.message.contains("05-bad.conflist"), "{st:?}");
    let e = cni.attach(&pod("sb3")).await.expect_err("not ready");
    assert_eq!(e.kind(), crate::error::ErrorKind::FailedPrecondition, "{e}");
    // Fixed again: ready, without restarting anything.
    env.write_conf(
        "05-bad.conflist",
        r#"{"cniVersion":"1.0.0","name":"fixed","plugins":[{"type":"portmap"}]}"#,
    );
    assert_eq!(cni.status().name, "fixed");
}

#[tokio::test]
async fn a_missing_plugin_makes_the_network_not_ready_naming_it() {
    let env = Env::new(&["bridge"]);
    env.write_conf(
        "10-x.conflist",
        r#"{"cniVersion":"1.0.0","name":"x","plugins":[{"type":"nosuch"}]}"#,
    );
    let st = env.cni().status();
    assert!(
        st.message.contains("\"nosuch\"") && st.message.contains("10-x.conflist"),
        "{st:?}"
    );
}

#[tokio::test]
async fn a_failing_plugin_fails_attach_and_detach_undoes_what_ran() {
    let env = Env::new(&["bridge"]);
    let fail = env.dir.path().join("bin/fail");
    crate::testutil::script(
        &fail,
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"code\":11,\"msg\":\"no more addresses\"}'; exit 1; fi\n",
    );
    env.write_conf(
        "10-f.conflist",
        r#"{"cniVersion":"1.0.0","name":"f","plugins":[{"type":"bridge"},{"type":"fail"}]}"#,
    );
    let cni = env.cni();
    let e = cni.attach(&pod("sb4")).await.expect_err("fails");
    assert!(e.to_string().contains("no more addresses"), "{e}");
    env.clear_calls();
    cni.detach(&pod("sb4")).await.expect("detach");
    let calls = env.calls();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(
        (calls[0].0.as_str(), calls[0].1.as_str()),
        ("bridge", "DEL")
    );
}

#[tokio::test]
async fn a_slow_plugin_times_out_without_blocking_other_calls() {
    let env = Env::new(&["bridge"]);
    let slow = env.dir.path().join("bin/slow");
    crate::testutil::script(&slow, "#!/bin/sh\ncat >/dev/null\nexec sleep 30\n");
    env.write_conf(
        "10-s.conflist",
        r#"{"cniVersion":"1.0.0","name":"s","plugins":[{"type":"slow"}]}"#,
    );
    let cni = std::sync::Arc::new(env.cni().with_timeout(Duration::from_millis(1500)));
    let c2 = cni.clone();
    let slow_attach = tokio::spawn(async move { c2.attach(&pod("sb5")).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Status and other sandboxes' DELs go on meanwhile.
    let t = std::time::Instant::now();
    assert!(cni.status().ready);
    cni.detach(&pod("other")).await.expect("detach other");
    assert!(
        t.elapsed() < Duration::from_millis(500),
        "{:?}",
        t.elapsed()
    );
    let e = slow_attach.await.expect("join").expect_err("timeout");
    assert_eq!(e.kind(), crate::error::ErrorKind::DeadlineExceeded, "{e}");
}

#[tokio::test]
async fn pod_cidr_replaces_the_subnet_and_survives_a_restart() {
    let env = Env::new(&[]);
    let cni = env.cni();
    cni.set_pod_cidr("10.44.1.0/24,fd44::/64").expect("set");
    assert!(cni.set_pod_cidr("banana").is_err());
    assert!(cni.status().message.contains("10.44.1.0/24,fd44::/64"));
    // One daemon at a time holds the lease journal: the next one after this one stops.
    drop(cni);
    let again = env.cni();
    assert!(again.status().message.contains("10.44.1.0/24,fd44::/64"));
    again.set_pod_cidr("").expect("clear");
    drop(again);
    assert!(env.cni().status().message.contains("10.86.0.0/16"));
}

/// Issue 16 item 8: a DEL that can never run (CNI_ARGS longer than exec takes, an unreadable
/// record) is given up so the sandbox can be removed; a DEL whose plugin fails stays pending.
#[tokio::test]
async fn a_del_that_can_never_run_is_given_up_but_a_failing_one_is_retried() {
    let env = Env::new(&["bridge"]);
    let del_fails = env.dir.path().join("bin/flaky");
    crate::testutil::script(
        &del_fails,
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = DEL ] && [ ! -e \"$(dirname \"$0\")/ok\" ]; then echo '{\"code\":11,\"msg\":\"busy\"}'; exit 1; fi\necho '{\"cniVersion\":\"1.0.0\"}'\n",
    );
    env.write_conf(
        "10-f.conflist",
        r#"{"cniVersion":"1.0.0","name":"f","plugins":[{"type":"bridge"},{"type":"flaky"}]}"#,
    );
    let cni = env.cni();
    let record = |id: &str| env.dir.path().join("cache").join(format!("{id}.json"));

    // Transient: the plugin's DEL fails; the record stays and a later DEL finishes the job.
    cni.attach(&pod("sb-flaky")).await.expect("attach");
    let e = cni.detach(&pod("sb-flaky")).await.expect_err("DEL fails");
    assert!(e.to_string().contains("busy"), "{e}");
    assert!(
        record("sb-flaky").exists(),
        "a failed DEL must not count as done"
    );
    std::fs::write(env.dir.path().join("bin/ok"), "").expect("ok");
    cni.detach(&pod("sb-flaky"))
        .await
        .expect("DEL succeeds now");
    assert!(!record("sb-flaky").exists());

    // Never: metadata so large that CNI_ARGS exceeds what exec takes. ADD refuses up front;
    // a record left by an older daemon that tried is dropped by DEL without running a plugin.
    let mut huge = pod("sb-huge");
    huge.name = "n".repeat(64 << 10);
    huge.uid = "u".repeat(64 << 10);
    let e = cni.attach(&huge).await.expect_err("ADD cannot run");
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument, "{e}");
    assert!(
        !record("sb-huge").exists(),
        "refused before the record is written"
    );
    std::fs::write(record("sb-huge"), r#"{"network":"f","steps":[{"ifname":"eth0","list":{"cniVersion":"1.0.0","name":"f","plugins":[{"type":"bridge"}]}}]}"#).expect("record");
    env.clear_calls();
    cni.detach(&huge).await.expect("given up");
    assert!(!record("sb-huge").exists());
    assert!(env.calls().is_empty(), "no plugin ran: {:?}", env.calls());

    // Never: a record that is not JSON.
    std::fs::write(record("sb-bad"), "{not json").expect("record");
    cni.detach(&pod("sb-bad")).await.expect("given up");
    assert!(!record("sb-bad").exists());
}

/// Issue 16: a record write the daemon's death cut short leaves a temp file; recovery removes
/// it (and nothing else).
#[tokio::test]
async fn recovery_removes_interrupted_record_writes() {
    let env = Env::new(&[]);
    let cni = env.cni();
    let cache = env.dir.path().join("cache");
    let temp = cache.join(".tmp-0123.json-00000000deadbeef");
    std::fs::write(&temp, b"{\"half").expect("temp");
    std::fs::write(cache.join("0123.json"), b"{}").expect("record");
    cni.recover().await;
    assert!(!temp.exists(), "temp file left");
    assert!(cache.join("0123.json").exists(), "a record was removed");
}

/// Issue 16: what a plugin call leaves running when the daemon dies (here: a child the plugin
/// left behind) carries the daemon's mark, and the next daemon's recovery kills it before any
/// DEL runs.
#[tokio::test]
async fn recovery_kills_what_plugin_calls_of_a_dead_daemon_left_running() {
    let env = Env::new(&["bosun-orphan"]);
    let script = env.dir.path().join("bin/bosun-orphan");
    crate::testutil::script(
        &script,
        "#!/bin/sh\ncat >/dev/null\n(exec sleep 600 </dev/null >/dev/null 2>&1) &\necho '{\"cniVersion\":\"1.0.0\"}'\n",
    );
    env.write_conf(
        "10-orphan.conflist",
        r#"{"cniVersion":"1.0.0","name":"orphan","plugins":[{"type":"bosun-orphan"}]}"#,
    );
    let cni = env.cni();
    cni.attach(&pod("sb-orphan")).await.expect("attach");
    let caller = env.dir.path().join("cache").display().to_string();
    let left = orphans::find(&caller);
    assert_eq!(
        left.len(),
        1,
        "the plugin's child carries the mark: {left:?}"
    );
    // The next daemon on the same state dir.
    env.cni().recover().await;
    assert!(
        orphans::find(&caller).is_empty(),
        "{:?}",
        orphans::find(&caller)
    );
}

/// A DEL that failed is counted in the record, so the retry knows it cannot trust the
/// plugins to find everything again (issue 16); a DEL that succeeds removes the record.
#[tokio::test]
async fn a_failed_del_is_counted_for_the_retry() {
    let env = Env::new(&["bosun-flaky"]);
    let flag = env.dir.path().join("failed-once");
    crate::testutil::script(
        &env.dir.path().join("bin/bosun-flaky"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = DEL ] && [ ! -e {0} ]; then touch {0}; echo '{{\"code\":11,\"msg\":\"busy\"}}'; exit 1; fi\necho '{{\"cniVersion\":\"1.0.0\"}}'\n",
            flag.display()
        ),
    );
    env.write_conf(
        "10-flaky.conflist",
        r#"{"cniVersion":"1.0.0","name":"flaky","plugins":[{"type":"bosun-flaky"}]}"#,
    );
    let cni = env.cni();
    let p = pod("sb-flaky");
    cni.attach(&p).await.expect("attach");
    let e = cni.detach(&p).await.expect_err("first DEL fails");
    assert!(e.to_string().contains("busy"), "{e}");
    let record = env.dir.path().join("cache/sb-flaky.json");
    let rec: Value =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("json");
    assert_eq!(rec["del_attempts"], 1, "{rec}");
    cni.detach(&p).await.expect("retried DEL");
    assert!(!record.exists(), "record left after a successful DEL");
}

/// Issue 28: the record says how far ADD got, plugin by plugin; DEL runs for the plugins ADD
/// was started for (the failing one included), never for one ADD never reached (its binary
/// may not even exist). A record from before says nothing: every plugin gets its DEL.
#[tokio::test]
async fn a_plugin_add_never_reached_gets_no_del() {
    let env = Env::new(&["bridge", "portmap"]);
    crate::testutil::script(
        &env.dir.path().join("bin/fail"),
        "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = ADD ]; then echo '{\"code\":11,\"msg\":\"no more addresses\"}'; exit 1; fi\n",
    );
    env.write_conf(
        "10-f.conflist",
        r#"{"cniVersion":"1.0.0","name":"f","plugins":[{"type":"bridge"},{"type":"fail"},{"type":"portmap"}]}"#,
    );
    let cni = env.cni();
    cni.attach(&pod("sb6")).await.expect_err("fails");
    let record = env.dir.path().join("cache/sb6.json");
    let rec: Value =
        serde_json::from_slice(&std::fs::read(&record).expect("record")).expect("json");
    assert_eq!(rec["steps"][0]["invoked"], 2, "{rec}");
    env.clear_calls();
    cni.detach(&pod("sb6")).await.expect("detach");
    let dels: Vec<String> = env.calls().into_iter().map(|c| c.0).collect();
    assert_eq!(dels, ["bridge"], "portmap's ADD never ran: no DEL for it");

    // The same record without `invoked` (an older daemon's): DEL for all three.
    let mut old = rec.clone();
    if let Some(step) = old["steps"][0].as_object_mut() {
        step.remove("invoked");
    }
    std::fs::write(&record, old.to_string()).expect("record");
    env.clear_calls();
    cni.detach(&pod("sb6")).await.expect("detach");
    let dels: Vec<String> = env.calls().into_iter().map(|c| c.0).collect();
    assert_eq!(dels, ["portmap", "bridge"]);
}

/// Issue 28: a DEL handed over (its sandbox went away) is kept on disk with the pod's CNI
/// identity, skipped by the ordinary DEL, listed again by the next daemon, and retried until
/// it succeeds; then its record is gone.
#[tokio::test]
async fn a_deferred_del_is_kept_until_a_retry_succeeds() {
    let env = Env::new(&["bosun-flaky"]);
    let ok = env.dir.path().join("del-ok");
    crate::testutil::script(
        &env.dir.path().join("bin/bosun-flaky"),
        &format!(
            "#!/bin/sh\ncat >/dev/null\nif [ \"$CNI_COMMAND\" = DEL ] && [ ! -e {0} ]; then echo '{{\"code\":11,\"msg\":\"busy\"}}'; exit 1; fi\necho '{{\"cniVersion\":\"1.0.0\"}}'\n",
            ok.display()
        ),
    );
    env.write_conf(
        "10-flaky.conflist",
        r#"{"cniVersion":"1.0.0","name":"flaky","plugins":[{"type":"bosun-flaky"}]}"#,
    );
    let cni = env.cni();
    let p = pod("sb-gone");
    cni.attach(&p).await.expect("attach");
    cni.detach(&p).await.expect_err("DEL fails");
    // /proc/self/ns/net is no pin of ours: the retries run without a netns.
    let kept = cni.defer_detach(&p).await.expect("handed over");
    assert_eq!(kept.netns, PathBuf::new());
    assert_eq!((kept.name.as_str(), kept.uid.as_str()), ("web", "uid-1"));
    cni.detach(&p).await.expect("the background retry owns it");
    // The next daemon finds it.
    let again = env.cni();
    assert_eq!(again.deferred(), std::slice::from_ref(&kept));
    again.retry_detach(&kept).await.expect_err("still busy");
    std::fs::write(&ok, "").expect("ok");
    again.retry_detach(&kept).await.expect("done");
    assert!(again.deferred().is_empty());
    assert!(!env.dir.path().join("cache/sb-gone.json").exists());
}
