//! A checkpoint OCI image made from a checkpoint archive and pushed to a test registry: one uncompressed layer holding the archive's files (the archive itself), CRI-O's checkpoint annotation on the manifest (what `buildah config --annotation` writes, what CRI-O, containerd and bosun look for).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use sha2::{Digest, Sha256};

/// The manifest annotation that marks a checkpoint image (its value: the container's name).
pub const CHECKPOINT_ANNOTATION: &str = "io.kubernetes.cri-o.annotations.checkpoint.name";

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// Pushes checkpoint image `registry/repo:tag` (registry: `127.0.0.1:PORT`, plain HTTP, as
/// [`super::registry::Registry::start`] serves) made of `archive` with the annotation
/// valued `container`; returns the image reference to pull.
pub async fn push_checkpoint_image(
    registry: &str,
    repo: &str,
    tag: &str,
    archive: &Path,
    container: &str,
) -> Result<String> {
    let layer = std::fs::read(archive).with_context(|| format!("read {}", archive.display()))?;
    let layer_digest = sha256(&layer);
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    }))?;
    let config_digest = sha256(&config);
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {
            "mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": layer_digest,
            "size": layer.len(),
        }],
        "annotations": {CHECKPOINT_ANNOTATION: container},
    }))?;
    let client = reqwest::Client::builder().no_proxy().build()?;
    let base = format!("http://{registry}/v2/{repo}");
    for (digest, blob) in [(&layer_digest, layer), (&config_digest, config)] {
        let start = client.post(format!("{base}/blobs/uploads/")).send().await?;
        ensure!(
            start.status().is_success(),
            "start upload: {}",
            start.status()
        );
        let location = start
            .headers()
            .get("location")
            .and_then(|l| l.to_str().ok())
            .context("upload without a location")?
            .to_string();
        let url = if location.starts_with("http") {
            location
        } else {
            format!("http://{registry}{location}")
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let put = client
            .put(format!("{url}{sep}digest={digest}"))
            .header("content-type", "application/octet-stream")
            .body(blob)
            .send()
            .await?;
        ensure!(
            put.status().is_success(),
            "upload {digest}: {}",
            put.status()
        );
    }
    let put = client
        .put(format!("{base}/manifests/{tag}"))
        .header("content-type", "application/vnd.oci.image.manifest.v1+json")
        .body(manifest)
        .send()
        .await?;
    ensure!(put.status().is_success(), "push manifest: {}", put.status());
    Ok(format!("{registry}/{repo}:{tag}"))
}
