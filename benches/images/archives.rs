//! The tiny OCI layout archives the many-images phase imports.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// A tar of `(name, bytes)` files.
fn tar_of(files: &[(String, &[u8])]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append_data(&mut h, name, *data)?;
    }
    Ok(b.into_inner()?)
}

/// An OCI layout tar, `img-N.oci.tar`, holding `bench.test/img-N:1`: one uncompressed layer with
/// one file of its own.
pub fn tiny_archive(dir: &Path, n: usize) -> anyhow::Result<PathBuf> {
    let content = format!("bench image {n}\n");
    let layer = tar_of(&[(format!("img-{n}.txt"), content.as_bytes())])?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::json!({
        "architecture": arch, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]},
    })
    .to_string();
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(config.as_bytes()), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": sha256(&layer), "size": layer.len()}],
    })
    .to_string();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest.as_bytes()), "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": format!("bench.test/img-{n}:1")}}],
    })
    .to_string();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha256(b).trim_start_matches("sha256:"));
    let outer = tar_of(&[
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.as_slice(),
        ),
        ("index.json".to_string(), index.as_bytes()),
        (blob(manifest.as_bytes()), manifest.as_bytes()),
        (blob(config.as_bytes()), config.as_bytes()),
        (blob(&layer), &layer),
    ])?;
    let path = dir.join(format!("img-{n}.oci.tar"));
    std::fs::write(&path, outer)?;
    Ok(path)
}
