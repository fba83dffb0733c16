//! The measured phases: warm-up, cold pull and import rounds, and the many-images phase.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::ensure;
use bosun::proto::runtime::v1 as pb;

use crate::archives::tiny_archive;
use crate::daemons::{spec, Daemon, Kind, Registry, Scratch, Via};
use crate::measure::{ms, percentile, settle};
use crate::report::{Report, Unit};
use crate::{expected_id, images_dir, IMAGES, QUERIES, STATUS_REF, TINY_IMAGES};

/// The memory rows of a daemon at rest.
const IDLE: &str = "idle, 2 s after start";

/// One bosun pull of every image, discarded: warms the registry and the page cache for both.
pub async fn warm_up(registry: &Registry) -> anyhow::Result<()> {
    let d = Daemon::start(Kind::Bosun, &registry.host()).await?;
    for name in IMAGES {
        d.pull(&registry.image(name)).await?;
    }
    Ok(())
}

/// Cold CRI pulls: each image into a fresh daemon; idle memory from the first one.
pub async fn pull_round(
    kind: Kind,
    registry: &Registry,
    report: &mut Report,
) -> anyhow::Result<()> {
    for (i, name) in IMAGES.into_iter().enumerate() {
        let d = Daemon::start(kind, &registry.host()).await?;
        if i == 0 {
            let idle = d.idle_mem().await?;
            report.memory(IDLE, kind, idle, false);
        }
        settle().await;
        let image = registry.image(name);
        let took = d.pull(&image).await?;
        report.record(&format!("cold PullImage {name}"), Unit::Ms, kind, ms(took));
        let id = d.image_id(&image).await?;
        ensure!(id == expected_id(name)?, "{kind:?} pulled {name} as {id}");
        if name == "big" {
            report.memory("after pulling big", kind, d.mem()?, true);
        }
    }
    Ok(())
}

/// Imports of each OCI archive, each into a fresh daemon: bosun by RPC and by CLI, containerd by
/// ctr.
pub async fn import_round(
    kind: Kind,
    registry: &Registry,
    report: &mut Report,
) -> anyhow::Result<()> {
    for name in IMAGES {
        let archive = images_dir().join(format!("{name}.oci.tar"));
        let base = format!("bench.test/{name}");
        for &via in Via::of(kind) {
            let d = Daemon::start(kind, &registry.host()).await?;
            settle().await;
            let took = d.import(&archive, &base, via).await?;
            for row in kind.import_rows(via) {
                report.record(&row.row(name), Unit::Ms, kind, ms(took));
            }
            let id = d.image_id(&format!("{base}:latest")).await?;
            ensure!(id == expected_id(name)?, "{kind:?} imported {name} as {id}");
        }
    }
    Ok(())
}

/// 100 tiny images in both daemons, then ListImages and ImageStatus latency and memory after.
pub async fn many_images(registry: &Registry, report: &mut Report) -> anyhow::Result<()> {
    let dir = Scratch::new("tiny")?;
    let archives = (0..TINY_IMAGES)
        .map(|n| tiny_archive(dir.path(), n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let daemons = [
        Daemon::start(Kind::Bosun, &registry.host()).await?,
        Daemon::start(Kind::Containerd, &registry.host()).await?,
    ];
    for d in &daemons {
        let idle = d.idle_mem().await?;
        report.memory(IDLE, d.kind, idle, false);
    }
    let what = format!("{TINY_IMAGES} tiny images, total");
    for d in &daemons {
        for (i, &via) in Via::of(d.kind).iter().enumerate() {
            // bosun's second method needs a fresh daemon: the first one holds the images now.
            let fresh = match i {
                0 => None,
                _ => Some(Daemon::start(d.kind, &registry.host()).await?),
            };
            let into = fresh.as_ref().unwrap_or(d);
            let took = import_all(into, &archives, via).await?;
            for row in d.kind.import_rows(via) {
                report.record(&row.row(&what), Unit::S, d.kind, took.as_secs_f64());
            }
        }
    }
    for d in &daemons {
        settle().await;
        latency(d, report).await?;
        let when = format!("after {TINY_IMAGES} imports and {} queries", 2 * QUERIES);
        report.memory(&when, d.kind, d.mem()?, false);
    }
    Ok(())
}

/// Imports every archive into `d` `via` the RPC or the CLI; returns the time taken (then checks
/// that CRI lists the last image).
async fn import_all(d: &Daemon, archives: &[PathBuf], via: Via) -> anyhow::Result<Duration> {
    settle().await;
    let t = Instant::now();
    for archive in archives {
        d.import(archive, "", via).await?;
    }
    let took = t.elapsed();
    d.image_id(&format!("bench.test/img-{}:1", archives.len() - 1))
        .await?;
    Ok(took)
}

/// `QUERIES` sequential ListImages, then ImageStatus, over one connected channel.
async fn latency(d: &Daemon, report: &mut Report) -> anyhow::Result<()> {
    let mut cri = d.cri();
    let listed = cri
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images;
    ensure!(
        listed.len() >= TINY_IMAGES,
        "{:?} lists {} images",
        d.kind,
        listed.len()
    );
    let mut list = Vec::with_capacity(QUERIES);
    let mut status = Vec::with_capacity(QUERIES);
    for i in 0..QUERIES + QUERIES / 10 {
        let t = Instant::now();
        cri.list_images(pb::ListImagesRequest::default()).await?;
        // The first tenth warms connection and caches and is not counted.
        if i >= QUERIES / 10 {
            list.push(t.elapsed());
        }
    }
    for i in 0..QUERIES + QUERIES / 10 {
        let req = pb::ImageStatusRequest {
            image: Some(spec(STATUS_REF)),
            verbose: false,
        };
        let t = Instant::now();
        let r = cri.image_status(req).await?.into_inner();
        if i >= QUERIES / 10 {
            status.push(t.elapsed());
        }
        ensure!(
            r.image.is_some(),
            "{:?} ImageStatus({STATUS_REF}) is empty",
            d.kind
        );
    }
    for (rpc, samples) in [("ListImages", list), ("ImageStatus", status)] {
        let us: Vec<f64> = samples.iter().map(|t| t.as_secs_f64() * 1e6).collect();
        for (p, label) in [(0.50, "p50"), (0.95, "p95"), (0.99, "p99")] {
            let row = format!("{rpc} {label}, {TINY_IMAGES} images");
            report.record(&row, Unit::Us, d.kind, percentile(&us, p));
        }
    }
    Ok(())
}
