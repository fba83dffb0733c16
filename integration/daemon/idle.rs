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
    bosun::sys::trim::parse_rss_file_kib(&status).context("no RssFile in /proc/<pid>/status")
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

/// `(before, after)` RssFile in KiB of every shed the daemon logged, oldest first.
fn sheds(log: &str) -> Vec<(u64, u64)> {
    let field = |line: &str, name: &str| -> Option<u64> {
        let rest = &line[line.find(name)? + name.len()..];
        rest.split(|c: char| !c.is_ascii_digit())
            .next()?
            .parse()
            .ok()
    };
    log.lines()
        .filter(|l| l.contains("idle: freed heap and clean file pages given back"))
        .filter_map(|l| {
            Some((
                field(l, "rss_file_kib_before=")?,
                field(l, "rss_file_kib_after=")?,
            ))
        })
        .collect()
}

/// After the burst, a quiet spell (`bosun::daemon::idle::QUIET`, plus one tick) unmaps the
/// pages it touched. The shed's own before/after (logged by the daemon, read in the same
/// instant) falls back near what was mapped once the daemon was serving; from outside, RssFile
/// falls well below the burst's: a page faulted back right after can bring a whole large folio
/// of the page cache with it, so that view is noisier. Then the daemon still answers.
fn idle_daemon_gives_back_what_its_calls_touched() -> Result<()> {
    let d = Daemon::start("")?;
    let pid = d.pid().context("daemon pid")?;
    ensure!(
        wait_until(10, || !sheds(&d.log()).is_empty()),
        "no shed once serving:\n{}",
        d.log()
    );
    std::thread::sleep(std::time::Duration::from_secs(1));
    let serving = rss_file_kib(pid)?;
    let startup = sheds(&d.log()).len();
    block_on(burst(&d))?;
    let busy = rss_file_kib(pid)?;
    ensure!(
        busy > serving + 256,
        "the calls mapped no code: RssFile {serving} KiB serving, {busy} KiB after the calls"
    );
    let quiet = 3 * bosun::daemon::idle::QUIET.as_secs();
    let mut lowest = busy;
    let mut shed = None;
    wait_until(quiet, || {
        lowest = lowest.min(rss_file_kib(pid).unwrap_or(u64::MAX));
        shed = sheds(&d.log()).get(startup).copied();
        shed.is_some()
    });
    let Some((before, after)) = shed else {
        anyhow::bail!(
            "no shed {quiet} s after the calls: RssFile {serving} KiB serving, {busy} KiB after \
             the calls, {lowest} KiB at the lowest"
        );
    };
    eprintln!(
        "RssFile {serving} KiB serving, {busy} KiB after the calls; the shed {before} -> {after} KiB"
    );
    ensure!(
        before + 1024 >= busy && after <= serving + (busy - serving) / 4,
        "the shed unmapped too little: {before} -> {after} KiB (serving {serving}, calls {busy})"
    );
    // From outside, within a second of the shed: at least a third of what the calls added.
    wait_until(1, || {
        lowest = lowest.min(rss_file_kib(pid).unwrap_or(u64::MAX));
        lowest <= busy - (busy - serving) / 3
    });
    ensure!(
        lowest <= busy - (busy - serving) / 3,
        "RssFile {serving} KiB serving, {busy} KiB after the calls, {lowest} KiB at the lowest \
         after the shed ({before} -> {after} KiB)"
    );
    block_on(async {
        let mut rt = d.runtime().await?;
        rt.version(pb::VersionRequest::default()).await?;
        Ok(())
    })
}
