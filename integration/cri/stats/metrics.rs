//! `/metrics` counting the layer bytes a pull fetched from a real registry.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::stats::{sample, scrape};
use crate::support::{block_on, images_manifest, trial, Daemon, Need, Registry};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::stats::metrics_count_pulled_layer_bytes",
        &[Need::Root, Need::Registry, Need::Images],
        pulled_bytes,
    )]
}

/// A pull from a registry counts exactly its layers' bytes in `bosun_image_pull_bytes_total`;
/// a second pull of the same image downloads (and counts) nothing.
fn pulled_bytes() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let d = Daemon::start("metrics_address = \"127.0.0.1:0\"\n")?;
    let layers: u64 = images_manifest()["busybox"]["layers"]
        .as_array()
        .context("no busybox layers in the test image manifest")?
        .iter()
        .filter_map(|l| l["size"].as_u64())
        .sum();
    ensure!(layers > 0, "busybox has no layer bytes");
    block_on(async {
        let mut c = d.images().await?;
        for _ in 0..2 {
            c.pull_image(pb::PullImageRequest {
                image: Some(pb::ImageSpec {
                    image: reg.image("busybox"),
                    ..Default::default()
                }),
                auth: None,
                sandbox_config: None,
            })
            .await
            .context("PullImage")?;
        }
        Ok::<_, anyhow::Error>(())
    })?;
    // A call is counted once its response has been sent: the client may see the answer of the
    // second pull an instant before the server's layer counts it, so wait briefly for it.
    let pulls = "bosun_cri_requests_total{service=\"runtime.v1.ImageService\",method=\"PullImage\",code=\"OK\"}";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let mut text = scrape(&d)?;
    while sample(&text, pulls) != Some(2.0) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
        text = scrape(&d)?;
    }
    let got = sample(&text, "bosun_image_pull_bytes_total");
    ensure!(
        got == Some(layers as f64),
        "bosun_image_pull_bytes_total {got:?}, want {layers}:\n{text}"
    );
    ensure!(
        sample(&text, pulls) == Some(2.0),
        "{pulls} is not 2 in\n{text}"
    );
    Ok(())
}
