//! Pulls that fail: bad references, unknown images, unreachable registries, a tampered blob
//! (nothing stored), and a kill -9 mid-pull (the next pull works).

use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use bosun::proto::bosun::v1 as api;
use bosun::proto::runtime::v1 as pb;

use crate::support::images::{leftovers, pull, status, ALL};
use crate::support::proxy::SlowProxy;
use crate::support::{block_on, image_field, images_manifest, trial, Daemon, Registry};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "images::bad_references_unknown_images_and_unreachable_registries",
            ALL,
            bad_references_unknown_images_and_unreachable_registries,
        ),
        trial(
            "images::tampered_blob_is_rejected_and_nothing_is_stored",
            ALL,
            tampered_blob_is_rejected_and_nothing_is_stored,
        ),
        trial(
            "images::kill9_mid_pull_then_pull_again",
            ALL,
            kill9_mid_pull_then_pull_again,
        ),
    ]
}

fn bad_references_unknown_images_and_unreachable_registries() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        for bad in ["Foo:Bar", "busybox@sha256:zz", "a b", "busybox:"] {
            let err = pull(&mut c, bad, None).await.expect_err("bad reference");
            ensure!(err.code() == tonic::Code::InvalidArgument, "{bad}: {err:?}");
            ensure!(
                err.message().contains(bad),
                "error must name {bad:?}: {}",
                err.message()
            );
        }
        let err = pull(&mut c, "", None).await.expect_err("empty");
        ensure!(err.code() == tonic::Code::InvalidArgument, "{err:?}");

        let missing = reg.image("does-not-exist");
        let err = pull(&mut c, &missing, None)
            .await
            .expect_err("unknown image");
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        ensure!(err.message().contains("does-not-exist"), "{err:?}");

        let t = Instant::now();
        let err = pull(&mut c, "127.0.0.1:1/x/y:z", None)
            .await
            .expect_err("unreachable");
        ensure!(err.code() == tonic::Code::Unavailable, "{err:?}");
        ensure!(
            err.message().contains("127.0.0.1:1"),
            "must name the host: {err:?}"
        );
        ensure!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
        Ok(())
    })
}

fn tampered_blob_is_rejected_and_nothing_is_stored() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["layered"])?;
    let layer = images_manifest()["layered"]["layers"][1]["digest"]
        .as_str()
        .context("layer")?
        .to_string();
    let path = reg.blob_path(&layer);
    let mut bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, bytes)?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        let err = pull(&mut c, &reg.image("layered"), None)
            .await
            .expect_err("tampered blob");
        ensure!(
            err.message().contains(&layer),
            "error must name the blob: {err:?}"
        );
        ensure!(
            status(&mut c, &reg.image("layered")).await?.is_none(),
            "no image from a tampered pull"
        );
        let hex = layer.trim_start_matches("sha256:");
        ensure!(
            !d.root().join("content/blobs/sha256").join(hex).exists(),
            "tampered blob stored"
        );
        // The other layers keep downloading after the failure (a retry reuses them); once they
        // settle, no partial file may remain and the good layers are stored verified.
        ensure!(
            crate::support::wait_until(20, || leftovers(&d).is_empty()),
            "{:?}",
            leftovers(&d)
        );
        let good = images_manifest()["layered"]["layers"][0]["digest"]
            .as_str()
            .context("layer 0")?;
        ensure!(d
            .root()
            .join("content/blobs/sha256")
            .join(good.trim_start_matches("sha256:"))
            .exists());
        Ok(())
    })
}

fn kill9_mid_pull_then_pull_again() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["big"])?;
    let proxy = SlowProxy::start(reg.host(), 4 << 20)?;
    let mut d = Daemon::start("")?;
    let slow_ref = format!("{}/bosun/big:latest", proxy.host());
    let socket = d.socket();
    let puller = std::thread::spawn(move || {
        let _ = block_on(async {
            let ch = bosun::cli::client::connect(&socket).await?;
            let mut c = pb::image_service_client::ImageServiceClient::new(ch);
            let _ = pull(&mut c, &slow_ref, None).await;
            Ok::<_, anyhow::Error>(())
        });
    });
    // Killed mid-pull once the small base layer is stored (verified): on a slow machine the
    // bytes the proxy sent can be ahead of what the daemon has written.
    let base_blob = images_manifest()["big"]["layers"][0]["digest"]
        .as_str()
        .map(|digest| {
            d.root()
                .join("content/blobs/sha256")
                .join(digest.trim_start_matches("sha256:"))
        })
        .context("base layer")?;
    ensure!(
        crate::support::wait_until(30, || proxy.sent.load(std::sync::atomic::Ordering::Relaxed)
            > 8 << 20
            && base_blob.exists()),
        "pull did not start, or the base layer was not stored"
    );
    d.kill9();
    let _ = puller.join();
    d.restart()?;
    ensure!(
        leftovers(&d).is_empty(),
        "restart must discard partial state: {:?}",
        leftovers(&d)
    );
    block_on(async {
        let mut c = d.images().await?;
        ensure!(
            c.list_images(pb::ListImagesRequest::default())
                .await?
                .into_inner()
                .images
                .is_empty(),
            "no half image"
        );
        // The small base layer finished before the kill: the next pull must reuse it.
        let base = images_manifest()["big"]["layers"][0]["digest"]
            .as_str()
            .context("base layer")?
            .to_string();
        let mut api = d.api().await?;
        let mut s = api
            .pull(api::PullRequest {
                image: reg.image("big"),
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut cached = Vec::new();
        let mut done = None;
        while let Some(p) = s.message().await? {
            if p.status == "cached" {
                cached.push(p.digest.clone());
            }
            if let Some(img) = p.image {
                done = Some(img.id);
            }
        }
        ensure!(
            done == Some(image_field("big", "image_id")),
            "second pull: {done:?}"
        );
        ensure!(
            cached.contains(&base),
            "verified blobs must be reused: cached {cached:?}"
        );
        ensure!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
        Ok(())
    })
}
