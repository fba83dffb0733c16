//! Pulls through a fault-injecting proxy (issue 28 item 3): resets, short bodies, 429/503, corrupt bytes, bad ranges, deadlines and a killed daemon; each case checks the answer and the store.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, ensure, Context};
use bosun::proto::runtime::v1 as pb;
use sha2::{Digest as _, Sha256};

use crate::support::fault_proxy::{Fault, FaultProxy, Seen};
use crate::support::{block_on, images_manifest, trial, wait_until, Daemon, Need, Registry};

const ALL: &[Need] = &[Need::Root, Need::Registry, Need::Images];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    let t = |name, f| trial(name, ALL, f);
    vec![
        t(
            "images::flaky::a_reset_mid_layer_resumes_with_range",
            reset_mid_layer,
        ),
        t("images::flaky::a_short_body_resumes_with_range", short_body),
        t(
            "images::flaky::a_rate_limited_manifest_waits_for_retry_after",
            rate_limited_seconds,
        ),
        t(
            "images::flaky::a_retry_after_http_date_is_honoured",
            rate_limited_http_date,
        ),
        t(
            "images::flaky::a_retry_after_beyond_the_cap_gives_up_at_once",
            rate_limited_too_long,
        ),
        t(
            "images::flaky::server_errors_are_retried_with_growing_pauses",
            server_errors_then_success,
        ),
        t(
            "images::flaky::a_registry_failing_every_time_is_given_up_on",
            server_errors_forever,
        ),
        t(
            "images::flaky::a_corrupt_layer_is_fetched_once_more_from_byte_0",
            corrupt_once,
        ),
        t(
            "images::flaky::a_layer_corrupt_every_time_is_never_stored",
            corrupt_always,
        ),
        t(
            "images::flaky::a_blob_the_registry_lacks_is_not_found_naming_it",
            missing_blob,
        ),
        t(
            "images::flaky::a_registry_ignoring_range_is_read_from_byte_0",
            range_ignored,
        ),
        t(
            "images::flaky::a_wrong_or_lying_content_range_never_corrupts_the_blob",
            range_wrong_or_lying,
        ),
        t(
            "images::flaky::a_pull_past_its_deadline_stops_and_the_next_resumes",
            deadline_stops_and_resumes,
        ),
        t(
            "images::flaky::a_killed_daemon_resumes_its_partial_layer",
            killed_daemon_resumes,
        ),
    ]
}

/// A registry holding busybox, a fault proxy in front of it and a daemon.
struct Setup {
    _reg: Registry,
    proxy: FaultProxy,
    d: Daemon,
}

fn setup() -> anyhow::Result<Setup> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let proxy = FaultProxy::start(reg.host())?;
    let d = Daemon::start("")?;
    Ok(Setup {
        _reg: reg,
        proxy,
        d,
    })
}

impl Setup {
    fn image(&self) -> String {
        format!("{}/bosun/busybox:latest", self.proxy.host())
    }

    /// PullImage over CRI, with a client deadline when `timeout` is set.
    fn pull(&self, timeout: Option<Duration>) -> Result<String, tonic::Status> {
        let image = self.image();
        block_on(async {
            let mut c = self
                .d
                .images()
                .await
                .map_err(|e| tonic::Status::unknown(format!("connect: {e:#}")))?;
            let mut req = tonic::Request::new(pb::PullImageRequest {
                image: Some(pb::ImageSpec {
                    image,
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            });
            if let Some(t) = timeout {
                req.set_timeout(t);
            }
            c.pull_image(req).await.map(|r| r.into_inner().image_ref)
        })
    }

    /// The verified blob file of `digest`.
    fn blob_file(&self, digest: &str) -> PathBuf {
        self.d
            .root()
            .join("content/blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    }

    /// `Some(true)` when blob `digest` is stored and hashes to its name, `Some(false)` when it
    /// is stored with other bytes, `None` when it is not stored.
    fn stored(&self, digest: &str) -> Option<bool> {
        let bytes = std::fs::read(self.blob_file(digest)).ok()?;
        Some(format!("sha256:{}", hex::encode(Sha256::digest(&bytes))) == digest)
    }

    /// Files in the content store that are not verified blobs (scratch writes, partial
    /// downloads: the store's other directories are flat), relative to the store, with sizes.
    fn unverified(&self) -> Vec<(String, u64)> {
        let root = self.d.root().join("content");
        let dirs = std::fs::read_dir(&root).into_iter().flatten().flatten();
        dirs.filter(|d| d.file_name() != "blobs")
            .flat_map(|d| std::fs::read_dir(d.path()).into_iter().flatten().flatten())
            .map(|e| {
                let p = e.path();
                let rel = p.strip_prefix(&root).unwrap_or(&p).display().to_string();
                (rel, e.metadata().map(|m| m.len()).unwrap_or(0))
            })
            .collect()
    }

    /// Requests for `digest`'s blob.
    fn blob_requests(&self, digest: &str) -> Vec<Seen> {
        self.proxy.seen_for(&format!("/blobs/{digest}"))
    }

    /// After a successful pull: the layer is stored with the right bytes and nothing else is
    /// left in the store.
    fn clean_success(&self, layer: &str) -> anyhow::Result<()> {
        ensure!(
            self.stored(layer) == Some(true),
            "layer stored: {:?}",
            self.stored(layer)
        );
        ensure!(
            self.unverified().is_empty(),
            "left in the store: {:?}",
            self.unverified()
        );
        Ok(())
    }

    /// After a failed pull: the layer is not stored and nothing else is left in the store.
    fn clean_failure(&self, layer: &str) -> anyhow::Result<()> {
        ensure!(
            self.stored(layer).is_none(),
            "layer stored after a failed pull: {:?}",
            self.stored(layer)
        );
        ensure!(
            wait_until(10, || self.unverified().is_empty()),
            "left in the store: {:?}",
            self.unverified()
        );
        Ok(())
    }
}

/// busybox's only layer: digest and size.
fn layer() -> anyhow::Result<(String, u64)> {
    let l = &images_manifest()["busybox"]["layers"][0];
    Ok((
        l["digest"].as_str().context("layer digest")?.to_string(),
        l["size"].as_u64().context("layer size")?,
    ))
}

fn ranges(seen: &[Seen]) -> Vec<Option<String>> {
    seen.iter().map(|s| s.range.clone()).collect()
}

fn expect_ok(res: Result<String, tonic::Status>) -> anyhow::Result<String> {
    res.map_err(|s| anyhow::anyhow!("pull failed: {:?}: {}", s.code(), s.message()))
}

fn expect_err(res: Result<String, tonic::Status>) -> anyhow::Result<tonic::Status> {
    match res {
        Ok(id) => bail!("the pull succeeded ({id}), it must fail"),
        Err(s) => {
            eprintln!("pull answered {:?}: {}", s.code(), s.message());
            Ok(s)
        }
    }
}

fn reset_mid_layer() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, size) = layer()?;
    let cut = size * 4 / 10;
    s.proxy.fault(&layer, Fault::ResetAfter(cut), 1);
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    ensure!(seen.len() == 2, "layer requests: {:?}", ranges(&seen));
    ensure!(
        seen[0].range.is_none(),
        "first request: {:?}",
        seen[0].range
    );
    // An RST may discard bytes still in the receive buffer: the resume point is at most the cut.
    let from = seen[1]
        .range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse::<u64>().ok())
        .with_context(|| format!("second request must resume: {:?}", seen[1].range))?;
    ensure!(from > 0 && from <= cut, "resumed from {from}, cut at {cut}");
    ensure!(seen[1].status == 206, "answer {}", seen[1].status);
    s.clean_success(&layer)
}

fn short_body() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, size) = layer()?;
    s.proxy.fault(&layer, Fault::ShortBy(4096), 1);
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    let want = format!("bytes={}-", size - 4096);
    ensure!(
        ranges(&seen) == vec![None, Some(want.clone())],
        "layer requests {:?}, want a resume with {want}",
        ranges(&seen)
    );
    s.clean_success(&layer)
}

/// The pause between the first two requests whose path contains `path`.
fn gap(s: &Setup, path: &str) -> anyhow::Result<Duration> {
    let seen = s.proxy.seen_for(path);
    ensure!(seen.len() >= 2, "{path}: {} requests", seen.len());
    Ok(seen[1].at - seen[0].ended.unwrap_or(seen[0].at))
}

fn rate_limited_seconds() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, _) = layer()?;
    let headers = vec![("Retry-After".to_string(), "1".to_string())];
    s.proxy.fault("/manifests/", Fault::Answer(429, headers), 1);
    expect_ok(s.pull(None))?;
    let waited = gap(&s, "/manifests/")?;
    ensure!(
        waited >= Duration::from_millis(950),
        "asked again after {waited:?}, the registry said 1 s"
    );
    s.clean_success(&layer)
}

fn rate_limited_http_date() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, _) = layer()?;
    // Whole seconds: 3 s ahead is at least 2 s ahead.
    let date = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(3));
    s.proxy.fault(
        &layer,
        Fault::Answer(429, vec![("Retry-After".into(), date)]),
        1,
    );
    expect_ok(s.pull(None))?;
    let waited = gap(&s, &layer)?;
    ensure!(
        waited >= Duration::from_millis(1500),
        "asked again after {waited:?}, the registry said 2-3 s"
    );
    s.clean_success(&layer)
}

/// Pulls with `fault` on every request for busybox's layer: the pull fails with `code`, naming
/// the layer and `why`, after `requests` requests for it and in less than `within`; nothing of
/// the layer is left in the store.
fn fails_cleanly(
    fault: Fault,
    code: tonic::Code,
    why: &str,
    requests: usize,
    within: Duration,
) -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, _) = layer()?;
    s.proxy.fault(&layer, fault, usize::MAX);
    let t = Instant::now();
    let err = expect_err(s.pull(None))?;
    let took = t.elapsed();
    ensure!(err.code() == code, "{err:?}, want {code:?}");
    ensure!(
        err.message().contains(&layer) && err.message().contains(why),
        "must name the layer and {why:?}: {}",
        err.message()
    );
    let n = s.blob_requests(&layer).len();
    eprintln!("{n} layer requests in {took:?}");
    ensure!(n == requests, "{n} layer requests, want {requests}");
    ensure!(took < within, "took {took:?}");
    s.clean_failure(&layer)
}

fn rate_limited_too_long() -> anyhow::Result<()> {
    let wait = vec![("Retry-After".into(), "3600".into())];
    let (code, secs) = (tonic::Code::Unavailable, Duration::from_secs(5));
    fails_cleanly(Fault::Answer(429, wait), code, "after 3600 s", 1, secs)
}

fn server_errors_then_success() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, _) = layer()?;
    s.proxy.fault(&layer, Fault::Answer(503, Vec::new()), 3);
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    ensure!(seen.len() == 4, "{} layer requests", seen.len());
    let gaps: Vec<Duration> = seen
        .windows(2)
        .map(|w| w[1].at - w[0].ended.unwrap_or(w[0].at))
        .collect();
    eprintln!("pauses between attempts: {gaps:?}");
    ensure!(
        gaps[0] >= Duration::from_millis(150) && gaps[2] > gaps[0],
        "pauses must grow: {gaps:?}"
    );
    s.clean_success(&layer)
}

fn server_errors_forever() -> anyhow::Result<()> {
    let (code, secs) = (tonic::Code::Unavailable, Duration::from_secs(15));
    let fault = Fault::Answer(503, Vec::new());
    fails_cleanly(fault, code, "gave up after 5 attempts", 5, secs)
}

fn corrupt_once() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, size) = layer()?;
    s.proxy.fault(&layer, Fault::Corrupt(size / 2), 1);
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    ensure!(
        ranges(&seen) == vec![None, None],
        "a mismatch is fetched again whole: {:?}",
        ranges(&seen)
    );
    s.clean_success(&layer)
}

fn corrupt_always() -> anyhow::Result<()> {
    let (_, size) = layer()?;
    let (code, secs) = (tonic::Code::InvalidArgument, Duration::from_secs(15));
    // A mismatch is fetched once more, from byte 0.
    fails_cleanly(Fault::Corrupt(size / 2), code, "digest mismatch", 2, secs)
}

fn missing_blob() -> anyhow::Result<()> {
    let (code, secs) = (tonic::Code::NotFound, Duration::from_secs(15));
    // Not asked again: a registry that lacks a blob will lack it next time.
    fails_cleanly(Fault::Answer(404, Vec::new()), code, "not found", 1, secs)
}

fn range_ignored() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, size) = layer()?;
    s.proxy.fault(&layer, Fault::ResetAfter(size * 4 / 10), 1);
    s.proxy.fault(&layer, Fault::IgnoreRange, usize::MAX);
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    ensure!(seen.len() == 2, "layer requests: {:?}", ranges(&seen));
    ensure!(
        seen[1].range.is_some() && seen[1].status == 200,
        "a resume answered 200 with everything: {:?} {}",
        seen[1].range,
        seen[1].status
    );
    s.clean_success(&layer)
}

fn range_wrong_or_lying() -> anyhow::Result<()> {
    let (layer, size) = layer()?;
    for (name, fault) in [("wrong", Fault::WrongRange), ("lying", Fault::LyingRange)] {
        let s = setup()?;
        s.proxy.fault(&layer, Fault::ResetAfter(size * 4 / 10), 1);
        s.proxy.fault(&layer, fault, 1);
        expect_ok(s.pull(None)).with_context(|| format!("{name} Content-Range"))?;
        let seen = s.blob_requests(&layer);
        eprintln!("{name} Content-Range: requests {:?}", ranges(&seen));
        // Either way the last request starts over from byte 0: a range that does not start
        // where asked is not used, and a lie is caught by the digest.
        ensure!(
            seen.len() == 3 && seen[1].range.is_some() && seen[2].range.is_none(),
            "{name}: {:?}",
            ranges(&seen)
        );
        s.clean_success(&layer)
            .with_context(|| format!("{name} Content-Range"))?;
    }
    Ok(())
}

/// The unverified file holding part of `layer`, and its size.
fn partial(s: &Setup, layer: &str) -> Option<(String, u64)> {
    let hex = layer.trim_start_matches("sha256:");
    s.unverified().into_iter().find(|(p, _)| p.contains(hex))
}

fn deadline_stops_and_resumes() -> anyhow::Result<()> {
    let s = setup()?;
    let (layer, size) = layer()?;
    // 100 KB/s: the 1.4 MB layer would take 14 s.
    s.proxy.fault(&layer, Fault::Slow(100_000), usize::MAX);
    let t = Instant::now();
    let deadline = Duration::from_secs(3);
    let err = expect_err(s.pull(Some(deadline)))?;
    ensure!(
        matches!(
            err.code(),
            tonic::Code::DeadlineExceeded | tonic::Code::Cancelled
        ),
        "{err:?}"
    );
    ensure!(
        t.elapsed() < Duration::from_secs(5),
        "answered after {:?}",
        t.elapsed()
    );
    // The daemon stops downloading: it closes the layer's connection soon after the deadline.
    let gone = wait_until(3, || {
        s.blob_requests(&layer).iter().all(|q| q.ended.is_some())
    });
    let seen = s.blob_requests(&layer);
    let sent = s.proxy.sent_for(&layer);
    ensure!(
        gone && seen.iter().all(|q| q.client_left),
        "the layer is still downloading {:?} after a {deadline:?} deadline ({sent} of {size} bytes sent)",
        t.elapsed()
    );
    let stopped_at = seen.iter().filter_map(|q| q.ended).max().unwrap_or(t);
    ensure!(
        stopped_at - t < deadline + Duration::from_secs(2),
        "stopped {:?} after the start",
        stopped_at - t
    );
    ensure!(
        s.stored(&layer).is_none(),
        "a partial layer must not be stored"
    );
    let kept = partial(&s, &layer).map(|(_, n)| n).unwrap_or(0);
    ensure!(
        s.unverified().len() <= 1 && kept <= sent,
        "only the partial layer may stay: {:?}",
        s.unverified()
    );
    // The next pull (no deadline, no slowness) resumes where the cancelled one stopped.
    s.proxy.clear();
    let before = s.blob_requests(&layer).len();
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    ensure!(seen.len() == before + 1, "{:?}", ranges(&seen));
    let want = (kept > 0).then(|| format!("bytes={kept}-"));
    ensure!(
        seen[before].range == want,
        "resume from the {kept} bytes kept: {:?}",
        seen[before].range
    );
    s.clean_success(&layer)
}

fn killed_daemon_resumes() -> anyhow::Result<()> {
    let mut s = setup()?;
    let (layer, size) = layer()?;
    s.proxy.fault(&layer, Fault::Slow(100_000), usize::MAX);
    let socket = s.d.socket();
    let image = s.image();
    let puller = std::thread::spawn(move || {
        let _ = block_on(async {
            let ch = bosun::cli::client::connect(&socket).await?;
            let mut c = pb::image_service_client::ImageServiceClient::new(ch);
            let _ = c
                .pull_image(pb::PullImageRequest {
                    image: Some(pb::ImageSpec {
                        image,
                        ..Default::default()
                    }),
                    ..Default::default()
                })
                .await;
            Ok::<_, anyhow::Error>(())
        });
    });
    // Killed once 40 % of the layer went out and some of it is on disk.
    ensure!(
        wait_until(30, || s.proxy.sent_for(&layer) > size * 4 / 10
            && partial(&s, &layer).is_some_and(|(_, n)| n > 100_000)),
        "the layer did not start downloading: sent {}, store {:?}",
        s.proxy.sent_for(&layer),
        s.unverified()
    );
    s.d.kill9();
    let _ = puller.join();
    let (file, kept) = partial(&s, &layer).context("the partial layer is gone after kill -9")?;
    eprintln!("{kept} of {size} bytes kept in {file}");
    s.d.restart()?;
    s.proxy.clear();
    let before = s.blob_requests(&layer).len();
    expect_ok(s.pull(None))?;
    let seen = s.blob_requests(&layer);
    let want = format!("bytes={kept}-");
    ensure!(
        seen.len() == before + 1 && seen[before].range.as_deref() == Some(want.as_str()),
        "the next pull must resume with {want}: {:?}",
        ranges(&seen[before..])
    );
    s.clean_success(&layer)
}
