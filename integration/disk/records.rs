//! A full disk, continued (issue 28 item 4): a container whose log disk is full runs on unblocked and its log resumes with a marker; records stay whole on a full root, through kill -9 too, and every object is usable or removable once space is freed.

use std::io::{BufRead, BufReader};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt};
use crate::support::disk::{
    journal_leases, small_root_daemon, torn_files, SmallDisk, LEASES_ON_ROOT, NEEDS, ROOT_MIB,
};
use crate::support::{block_on, scratch, trial, wait_until, Daemon};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "disk::a_full_log_disk_drops_lines_without_blocking_and_marks_the_gap",
            NEEDS,
            full_log_disk,
        ),
        trial(
            "disk::records_stay_whole_and_objects_removable_through_kill9_on_a_full_root",
            NEEDS,
            records_through_kill9,
        ),
    ]
}

/// Bytes of padding in each line the log test's container writes (with `line N `).
const PAD: usize = 900;

/// A child process killed (and reaped) on drop.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `bosun attach ID`, its output lines collected by a thread.
fn attach(d: &Daemon, id: &str) -> Result<(KillOnDrop, Arc<Mutex<Vec<String>>>)> {
    let mut child = KillOnDrop(d.cli_spawn(&["attach", id])?);
    let out = child.0.stdout.take().context("attach stdout")?;
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in BufReader::new(out)
            .lines()
            .map_while(std::result::Result::ok)
        {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(line);
        }
    });
    Ok((child, lines))
}

/// The number in a `line N <pad>` line.
fn number(line: &str) -> Option<u64> {
    line.strip_prefix("line ")?.split(' ').next()?.parse().ok()
}

/// The counter the container keeps in /tmp/n (how far it got, whatever its log says); read
/// again when caught between the shell's truncation and its write.
async fn counter(rt: &mut Rt, id: &str) -> Result<u64> {
    for _ in 0..20 {
        let r = cri::exec(rt, id, &["cat", "/tmp/n"], 10).await?;
        if let Ok(n) = String::from_utf8_lossy(&r.stdout).trim().parse() {
            return Ok(n);
        }
    }
    anyhow::bail!("/tmp/n never held a number")
}

/// `[bosun: N log lines dropped: …]`'s N.
fn dropped(msg: &str) -> Option<u64> {
    msg.strip_prefix("[bosun: ")?
        .split_once(" log lines dropped: ")?
        .0
        .parse()
        .ok()
}

/// Checks a whole log: every record well-formed, every stdout line `line N <pad>` with N
/// one more than the previous, except right after a marker, where the gap is exactly the
/// marker's count. Returns the markers' counts.
fn check_gaps(text: &str) -> Result<Vec<u64>> {
    let pad = "0".repeat(PAD);
    let mut markers = Vec::new();
    let (mut last, mut gap) = (None::<u64>, 0);
    for r in cri::parse_log(text)? {
        if r.stream == "stderr" {
            let n = dropped(&r.msg).with_context(|| format!("stderr record {:?}", r.msg))?;
            ensure!(r.tag == "F", "marker not a full line: {r:?}");
            markers.push(n);
            gap += n;
            continue;
        }
        let n = number(&r.msg).with_context(|| format!("record {:?}", r.msg))?;
        ensure!(
            r.tag == "F" && r.msg == format!("line {n} {pad}"),
            "line {n}: a torn record: {:?} {} bytes",
            r.tag,
            r.msg.len()
        );
        if let Some(last) = last {
            ensure!(
                n == last + 1 + gap,
                "line {n} follows line {last} with {gap} lines marked dropped"
            );
        }
        (last, gap) = (Some(n), 0);
    }
    Ok(markers)
}

/// A container writing ~1 KiB lines non-stop, its log on a small disk: once the disk is full
/// it goes on at its pace (its counter moves, an attach client keeps reading), its log keeps
/// only whole records, and when space returns the log goes on after one marker line per gap
/// (`<ts> stderr F [bosun: N log lines dropped: no space left on device]`) counting the lines
/// lost exactly.
fn full_log_disk() -> Result<()> {
    // The log disk first: dropped after the daemon (and its container).
    let dir = scratch()?;
    let logs = SmallDisk::new(dir.path(), "logs", 8)?;
    let d = cri::daemon()?;
    let image = cri::import(&d, "busybox")?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let mut config = cri::pod_config(&d, "log");
        config.log_directory = logs.mount.join("pod").display().to_string();
        let pod = cri::run_pod(&mut rt, config).await?;
        let script = format!(
            "pad=$(printf '%0{PAD}d' 0); i=0; while :; do i=$((i+1)); echo \"line $i $pad\"; \
             echo $i > /tmp/n; usleep 5000; done"
        );
        let c = cri::sh_config(&pod, "chatty", &image, &script);
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let log = pod.log_of(&c);
        cri::wait_log(&log, 20, |l| l.len() > 20).await?;
        let (_attached, seen) = attach(&d, &id)?;
        logs.fill(0)?;
        let full_from = counter(&mut rt, &id).await?;
        tokio::time::sleep(Duration::from_secs(3)).await;
        let full_to = counter(&mut rt, &id).await?;
        // Blocked, it would stop after a pipe's worth (64 KiB: 70 lines).
        ensure!(
            full_to > full_from + 150,
            "the container went from line {full_from} to {full_to} in 3 s on a full log disk"
        );
        let attached: Vec<u64> = seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter_map(|l| number(l))
            .filter(|n| (full_from..full_to).contains(n))
            .collect();
        ensure!(
            attached.len() as u64 > (full_to - full_from) / 2,
            "the attach client got {} of lines {full_from}..{full_to}",
            attached.len()
        );
        let text = std::fs::read_to_string(&log)?;
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        ensure!(
            whole.len() == text.len(),
            "the full log ends in a torn record"
        );
        let kept = text.lines().count();
        logs.free()?;
        let marked = wait_until(10, || {
            std::fs::read_to_string(&log).is_ok_and(|t| {
                let t = &t[..t.rfind('\n').map_or(0, |i| i + 1)];
                check_gaps(t).is_ok_and(|m| m.iter().any(|n| *n > 0))
                    && t.lines().count() > kept + 20
            })
        });
        let text = std::fs::read_to_string(&log)?;
        let whole = &text[..text.rfind('\n').map_or(0, |i| i + 1)];
        let markers = check_gaps(whole)?;
        ensure!(
            marked && markers.len() == 1,
            "want one marker and lines after it once freed: markers {markers:?}"
        );
        println!("markers once the log disk was freed: {markers:?}");
        let marker = cri::parse_log(whole)?
            .into_iter()
            .find(|r| r.stream == "stderr")
            .context("marker")?;
        ensure!(
            marker
                .msg
                .ends_with(" log lines dropped: no space left on device]"),
            "marker {:?}",
            marker.msg
        );
        cri::remove_pod(&mut rt, &pod.id).await
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}

/// A call that must answer within `secs` (a hang is a failure).
async fn within<T>(
    secs: u64,
    what: &str,
    f: impl std::future::Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .with_context(|| format!("{what}: no answer in {secs} s"))?
}

/// A pod with a running, a created and an exited container on the small root, then the root
/// filled: creations are refused, the running container stops (EXITED in ContainerStatus, its
/// exit written once space returns) and is removed, a second pod is stopped and removed,
/// and nothing on the root is torn or left as a temp. Then the daemon is killed while a start
/// and a pod stop are in flight; space is freed; the next daemon finds every record whole,
/// leaves no temp, and every object is usable or removable.
fn records_through_kill9() -> Result<()> {
    let (disk, mut d) = small_root_daemon(ROOT_MIB, LEASES_ON_ROOT)?;
    let image = cri::import(&d, "busybox")?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "kept")).await?;
        let other = cri::run_pod(&mut rt, cri::pod_config(&d, "other")).await?;
        let sleeper = |name| cri::sh_config(&pod, name, &image, "sleep 1000");
        let running = cri::create_start(&mut rt, &pod, &sleeper("running")).await?;
        let created = cri::create(&mut rt, &pod, &sleeper("created")).await?;
        let exited =
            cri::create_start(&mut rt, &pod, &cri::sh_config(&pod, "x", &image, "true")).await?;
        cri::wait_exited(&mut rt, &exited, 20).await?;
        let other_c = cri::sh_config(&other, "o", &image, "sleep 1000");
        cri::create_start(&mut rt, &other, &other_c).await?;
        disk.fill(0)?;

        // Refused (with what code: the creation tests' business).
        let late = cri::run_pod(&mut rt, cri::pod_config(&d, "late")).await;
        ensure!(late.is_err(), "RunPodSandbox on a full root: {late:?}");
        let late = cri::try_create(&mut rt, &pod, &sleeper("late")).await;
        ensure!(late.is_err(), "CreateContainer on a full root: {late:?}");
        within(20, "StopContainer", cri::stop(&mut rt, &running, 0)).await?;
        let s = within(
            20,
            "ContainerStatus",
            cri::wait_exited(&mut rt, &running, 10),
        )
        .await?;
        cri::check_exit(&s, 137, "Error")?;
        within(20, "RemoveContainer", cri::remove(&mut rt, &running)).await?;
        within(30, "RemovePodSandbox", cri::remove_pod(&mut rt, &other.id)).await?;
        let torn = torn_files(&d.root());
        ensure!(
            torn.is_empty(),
            "on the full root:\n  {}",
            torn.join("\n  ")
        );

        // Killed with a start and a pod stop in flight.
        let socket = d.socket();
        let (pod_id, created_id) = (pod.id.clone(), created.clone());
        let calls = std::thread::spawn(move || {
            block_on(async {
                let ch = bosun::cli::client::connect(&socket).await?;
                let mut rt = pb::runtime_service_client::RuntimeServiceClient::new(ch);
                let started = cri::start(&mut rt, &created_id).await;
                let stopped = rt
                    .stop_pod_sandbox(pb::StopPodSandboxRequest {
                        pod_sandbox_id: pod_id,
                    })
                    .await;
                println!("on the full root: start {started:?}, pod stop {stopped:?}");
                Ok::<_, anyhow::Error>(())
            })
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        d.kill9();
        let _ = calls.join();
        let torn = torn_files(&d.root());
        let torn: Vec<&String> = torn.iter().filter(|t| !t.starts_with("temp ")).collect();
        ensure!(torn.is_empty(), "after kill -9: {torn:?}");
        disk.free()?;
        d.restart()?;
        let mut rt = cri::client(&d).await?;
        let torn = torn_files(&d.root());
        ensure!(torn.is_empty(), "after recovery:\n  {}", torn.join("\n  "));
        let listed = cri::list_containers(&mut rt, None).await?;
        ensure!(
            listed.iter().all(|c| c.id != running)
                && [&created, &exited]
                    .iter()
                    .all(|id| listed.iter().any(|c| &c.id == *id)),
            "containers after recovery: {listed:?}"
        );
        let pods = cri::list_pods(&mut rt, None).await?;
        ensure!(
            pods.len() == 1 && pods[0].id == pod.id,
            "pods after recovery: {pods:?}"
        );
        // Usable: a new pod runs a container; removable: everything goes.
        let fresh = cri::run_pod(&mut rt, cri::pod_config(&d, "fresh")).await?;
        let c = cri::sh_config(&fresh, "hello", &image, "echo hello; sleep 1000");
        cri::create_start(&mut rt, &fresh, &c).await?;
        cri::wait_log(&fresh.log_of(&c), 20, |l| l.iter().any(|x| x == "hello")).await?;
        for p in [&pod.id, &fresh.id] {
            within(30, "RemovePodSandbox", cri::remove_pod(&mut rt, p)).await?;
        }
        let held = journal_leases(&d)?;
        ensure!(
            held.is_empty(),
            "leases held after every pod went: {held:?}"
        );
        Ok(())
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}
