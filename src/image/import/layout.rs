//! The images of a scanned archive: an OCI image layout's index entries, or a docker-archive's `manifest.json` (whose manifests are made here).

use serde::Deserialize;

use super::archive::Scanned;
use super::naming::ArchiveName;
use crate::error::{Error, Result};
use crate::image::content::ContentStore;
use crate::image::digest::Digest;
use crate::image::manifest::{
    layer_compression, media, Descriptor, Document, ImageConfig, Manifest, Platform,
};

/// One image of an archive, its content in the store, not named yet.
#[derive(Debug, Clone)]
pub(super) struct Found {
    /// The names the archive gives it (one per OCI index entry or docker `RepoTags` entry;
    /// one empty name when it has none).
    pub names: Vec<ArchiveName>,
    /// What the archive's index points at: the manifest, or the platform index above it
    /// (`<name>@<digest>` names this).
    pub entry_digest: Digest,
    /// The platform manifest's digest.
    pub manifest_digest: Digest,
    /// The platform manifest.
    pub manifest: Manifest,
    /// The platform index, when the entry is one.
    pub index_digest: Option<Digest>,
    /// The image config.
    pub config: ImageConfig,
}

/// The images of `s`: an OCI layout when it has `oci-layout` and `index.json` (docker 25+
/// writes both layouts: the OCI one is read), else a docker-archive. `what` names the archive.
pub(super) fn images(s: &Scanned, content: &ContentStore, what: &str) -> Result<Vec<Found>> {
    match (&s.index_json, &s.manifest_json) {
        (Some(index), _) if s.oci_layout => oci_layout(index, content),
        (_, Some(manifest)) => docker_archive(manifest, s, content),
        _ => Err(Error::invalid(format!(
            "{what}: neither an OCI image layout (index.json, oci-layout) nor a docker archive \
             (manifest.json)"
        ))),
    }
}

fn oci_layout(index_bytes: &[u8], content: &ContentStore) -> Result<Vec<Found>> {
    let Document::Index(index) =
        Document::parse(media::OCI_INDEX, index_bytes).map_err(|e| e.context("index.json"))?
    else {
        return Err(Error::invalid("index.json is not an image index"));
    };
    let mut out = Vec::new();
    for top in &index.manifests {
        let (desc, index_digest) = select_manifest(content, top)?;
        let bytes = read_blob(content, &desc.digest, "manifest")?;
        let Document::Manifest(manifest) = Document::parse(&desc.media_type, &bytes)? else {
            return Err(Error::invalid(format!(
                "{}: nested index not supported",
                desc.digest
            )));
        };
        for l in &manifest.layers {
            layer_compression(&l.media_type)
                .map_err(|e| e.context(format!("layer {}", l.digest)))?;
            present(content, &l.digest, "layer")?;
        }
        let config = config_of(content, &manifest.config.digest)?;
        out.push(Found {
            names: vec![ArchiveName::from_annotations(&top.annotations)],
            entry_digest: top.digest.clone(),
            manifest_digest: desc.digest.clone(),
            manifest,
            index_digest,
            config,
        });
    }
    Ok(out)
}

/// Follows an index entry to the manifest for this platform.
fn select_manifest(
    content: &ContentStore,
    top: &Descriptor,
) -> Result<(Descriptor, Option<Digest>)> {
    if top.media_type != media::OCI_INDEX && top.media_type != media::DOCKER_LIST {
        return Ok((top.clone(), None));
    }
    let bytes = read_blob(content, &top.digest, "index")?;
    let Document::Index(child) = Document::parse(&top.media_type, &bytes)? else {
        return Err(Error::invalid(format!("{}: expected an index", top.digest)));
    };
    let host = Platform::host();
    let pick = child.select(&host).cloned().ok_or_else(|| {
        Error::not_found(format!(
            "index {}: no manifest for {}/{}",
            top.digest, host.os, host.architecture
        ))
    })?;
    Ok((pick, Some(top.digest.clone())))
}

/// Blob `d` of the archive, which the scan stored (or the store had already).
fn present(content: &ContentStore, d: &Digest, what: &str) -> Result<()> {
    if content.contains(d) {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "{what} {d}: not in the archive (blobs/sha256/{})",
            d.hex()
        )))
    }
}

/// A small blob (manifest, index, config) of the archive, read whole.
fn read_blob(content: &ContentStore, d: &Digest, what: &str) -> Result<Vec<u8>> {
    present(content, d, what)?;
    content.read(d)
}

fn config_of(content: &ContentStore, d: &Digest) -> Result<ImageConfig> {
    serde_json::from_slice(&read_blob(content, d, "config")?)
        .map_err(|e| Error::invalid(format!("config {d}: {e}")))
}

/// One image of a docker-archive's `manifest.json`.
#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

fn docker_archive(manifest_json: &[u8], s: &Scanned, content: &ContentStore) -> Result<Vec<Found>> {
    let entries: Vec<DockerEntry> = serde_json::from_slice(manifest_json)
        .map_err(|e| Error::invalid(format!("manifest.json: {e}")))?;
    let entry = |name: &str, what: &str| {
        s.blob(name).cloned().ok_or_else(|| {
            Error::invalid(format!(
                "manifest.json: {what} {name:?} is not in the archive"
            ))
        })
    };
    let mut out = Vec::new();
    for e in entries {
        let (config_digest, config_size) = entry(&e.config, "config")?;
        let config = config_of(content, &config_digest)?;
        let mut layers = Vec::new();
        for name in &e.layers {
            let (digest, size) = entry(name, "layer")?;
            let media_type = match magic(content, &digest)? {
                [0x1f, 0x8b, ..] => media::OCI_LAYER_GZIP,
                [0x28, 0xb5, 0x2f, 0xfd] => media::OCI_LAYER_ZSTD,
                _ => media::OCI_LAYER,
            };
            layers.push(Descriptor {
                media_type: media_type.to_string(),
                size,
                digest,
                platform: None,
                annotations: Default::default(),
            });
        }
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(media::OCI_MANIFEST.to_string()),
            config: Descriptor {
                media_type: media::OCI_CONFIG.to_string(),
                digest: config_digest,
                size: config_size,
                platform: None,
                annotations: Default::default(),
            },
            layers,
            annotations: Default::default(),
        };
        let manifest_bytes = serde_json::to_vec(&manifest)?;
        let manifest_digest = Digest::of(&manifest_bytes);
        content.put(&manifest_digest, &manifest_bytes)?;
        let mut names = Vec::new();
        for t in e.repo_tags.iter().flatten() {
            names.push(ArchiveName::from_repo_tag(t)?);
        }
        if names.is_empty() {
            names.push(ArchiveName::default());
        }
        out.push(Found {
            names,
            entry_digest: manifest_digest.clone(),
            manifest_digest,
            manifest,
            index_digest: None,
            config,
        });
    }
    Ok(out)
}

/// The first bytes of blob `d` (compression magic).
fn magic(content: &ContentStore, d: &Digest) -> Result<[u8; 4]> {
    use std::io::Read;
    let mut m = [0u8; 4];
    let _ = content.open_blob(d)?.read(&mut m)?;
    Ok(m)
}
