//! The idle daemon gives memory back: what startup and a burst of calls touched is unmapped
//! once the calls stop, and the daemon keeps serving.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::{block_on, trial, wait_until, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "daemon::idle_daemon_gives_back_what_its_calls_touched",
        &[Need::Root],
        idle_daemon_gives_back_what_its_calls_touched,
    )]
}

/// `RssFile` of `pid` in KiB: the file pages (the binary's code and read-only data, shared
/// libraries) mapped into it.
fn rss_file_kib(pid: u32) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("RssFile:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no RssFile in /proc/<pid>/status")
}

/// A burst of different calls (each faults in the code that serves it).
async fn burst(d: &Daemon) -> Result<()> {
    let mut rt = d.runtime().await?;
    let mut images = d.images().await?;
    for _ in 0..20 {
        rt.version(pb::VersionRequest::default()).await?;
        rt.status(pb::StatusRequest { verbose: true }).await?;
        rt.list_pod_sandbox(pb::ListPodSandboxRequest::default())
            .await?;
        rt.list_containers(pb::ListContainersRequest::default())
            .await?;
        rt.list_container_stats(pb::ListContainerStatsRequest::default())
            .await?;
        images.list_images(pb::ListImagesRequest::default()).await?;
        images
            .image_fs_info(pb::ImageFsInfoRequest::default())
            .await?;
    }
    Ok(())
}

/// After the burst, a quiet spell (`bosun::daemon::idle::QUIET`, plus one tick) unmaps the
/// pages it touched: the file pages mapped fall back near what they were once the daemon was
/// serving, well below the burst's. Then the daemon still answers.
fn idle_daemon_gives_back_what_its_calls_touched() -> Result<()> {
    let d = Daemon::start("")?;
    let pid = d.pid().context("daemon pid")?;
    std::thread::sleep(std::time::Duration::from_secs(1));
    let serving = rss_file_kib(pid)?;
    block_on(burst(&d))?;
    let busy = rss_file_kib(pid)?;
    ensure!(
        busy > serving + 256,
        "the calls mapped no code: RssFile {serving} KiB serving, {busy} KiB after the calls"
    );
    let quiet = 3 * bosun::daemon::idle::QUIET.as_secs();
    let mut last = busy;
    let given_back = wait_until(quiet, || {
        last = rss_file_kib(pid).unwrap_or(u64::MAX);
        last <= serving + (busy - serving) / 4
    });
    ensure!(
        given_back,
        "RssFile {serving} KiB serving, {busy} KiB after the calls, still {last} KiB {quiet} s later"
    );
    block_on(async {
        let mut rt = d.runtime().await?;
        rt.version(pb::VersionRequest::default()).await?;
        Ok(())
    })
}
