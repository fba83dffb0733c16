//! bosun vs containerd on this machine: image pull/import time, daemon memory, CRI list latency.

mod archives;
mod daemons;
mod measure;
mod report;
mod rounds;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{ensure, Context};

use daemons::{Registry, KINDS, REGISTRY_BIN};
use report::Report;
use rounds::{import_round, many_images, pull_round, warm_up};

/// The test images pulled and imported, in this order.
const IMAGES: [&str; 3] = ["busybox", "layered", "big"];
/// How many tiny images ListImages and ImageStatus see.
const TINY_IMAGES: usize = 100;
/// Calls per latency series.
const QUERIES: usize = 1000;
/// The tiny image ImageStatus asks for.
const STATUS_REF: &str = "bench.test/img-50:1";

fn main() {
    // The client's connection tasks run on a worker thread, so they keep answering (e.g. a
    // server's GOAWAY at shutdown) while the main thread blocks in a guard's drop.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("images bench: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    // Ctrl-C drops `run`'s future, so every guard in it cleans up.
    let outcome = rt.block_on(async {
        tokio::select! {
            r = run() => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    if let Err(e) = outcome {
        eprintln!("images bench failed: {e:#}");
        std::process::exit(1);
    }
}

/// The whole bench; `BENCH_ROUNDS` (default 3) sets the rounds of cold pulls and imports.
async fn run() -> anyhow::Result<()> {
    if let Some(reason) = unmet_needs() {
        println!("SKIP images bench: {reason}");
        return Ok(());
    }
    let rounds: usize = match std::env::var("BENCH_ROUNDS") {
        Ok(v) => v.parse().with_context(|| format!("BENCH_ROUNDS={v:?}"))?,
        Err(_) => 3,
    };
    ensure!(rounds > 0, "BENCH_ROUNDS must be at least 1");
    let started = Instant::now();
    let registry = Registry::start()?;
    registry.push(&IMAGES)?;
    let mut report = Report::new(rounds);
    warm_up(&registry).await?;
    for round in 0..rounds {
        eprintln!("images bench: round {}/{rounds}", round + 1);
        // Alternate who goes first so neither runtime always meets the colder page cache.
        let order = if round % 2 == 0 {
            KINDS
        } else {
            [KINDS[1], KINDS[0]]
        };
        for kind in order {
            pull_round(kind, &registry, &mut report).await?;
            import_round(kind, &registry, &mut report).await?;
        }
    }
    eprintln!("images bench: {TINY_IMAGES} images, {QUERIES} ListImages + ImageStatus each");
    many_images(&registry, &mut report).await?;
    let text = report.render(started.elapsed())?;
    println!("{text}");
    let out = target_dir().join("bench-images.md");
    std::fs::write(&out, &text).with_context(|| format!("write {}", out.display()))?;
    eprintln!("images bench: table written to {}", out.display());
    Ok(())
}

/// Why the bench cannot run here, if it cannot.
fn unmet_needs() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (overlay mounts, chown)".into());
    }
    for bin in ["containerd", "ctr", "python3"] {
        if which(bin).is_none() {
            return Some(format!("needs {bin} in PATH (hack/setup.sh installs it)"));
        }
    }
    if !Path::new(REGISTRY_BIN).exists() {
        return Some(format!(
            "needs {REGISTRY_BIN} (apt-get install docker-registry)"
        ));
    }
    if !images_dir().join("manifest.json").exists() {
        return Some(format!(
            "needs test images in {} (run hack/setup.sh)",
            images_dir().display()
        ));
    }
    None
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn images_dir() -> PathBuf {
    std::env::var_os("BOSUN_TEST_IMAGES")
        .map_or_else(|| repo_root().join("test-images"), PathBuf::from)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from)
}

/// The image id (config digest) test-images/manifest.json records for `name`.
fn expected_id(name: &str) -> anyhow::Result<String> {
    let path = images_dir().join("manifest.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("parse manifest.json")?;
    v["images"][name]["image_id"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("no image_id for {name} in manifest.json"))
}
