//! OCI and Docker schema 2 manifests, indexes and image configs: the JSON the store and puller share.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::image::digest::Digest;

/// Media types bosun understands.
pub mod media {
    /// OCI image manifest.
    pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
    /// OCI image index.
    pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
    /// OCI image config.
    pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
    /// OCI uncompressed layer.
    pub const OCI_LAYER: &str = "application/vnd.oci.image.layer.v1.tar";
    /// OCI gzip layer.
    pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
    /// OCI zstd layer.
    pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
    /// OCI non-distributable gzip layer (still unpacked the same way).
    pub const OCI_LAYER_NONDIST_GZIP: &str =
        "application/vnd.oci.image.layer.nondistributable.v1.tar+gzip";
    /// Docker schema 2 manifest.
    pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
    /// Docker manifest list.
    pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
    /// Docker image config.
    pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
    /// Docker gzip layer.
    pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";
    /// Docker foreign gzip layer.
    pub const DOCKER_LAYER_FOREIGN: &str =
        "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip";
    /// Docker schema 1 (refused: deprecated and unsigned-by-content).
    pub const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1+prettyjws";
}

/// How a layer blob is compressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// Plain tar.
    None,
    /// gzip.
    Gzip,
    /// zstd.
    Zstd,
}

/// Maps a layer media type to its compression; unknown types are an error naming the type.
pub fn layer_compression(media_type: &str) -> Result<Compression> {
    match media_type {
        media::OCI_LAYER | "application/vnd.oci.image.layer.nondistributable.v1.tar" => {
            Ok(Compression::None)
        }
        media::OCI_LAYER_GZIP
        | media::OCI_LAYER_NONDIST_GZIP
        | media::DOCKER_LAYER_GZIP
        | media::DOCKER_LAYER_FOREIGN => Ok(Compression::Gzip),
        media::OCI_LAYER_ZSTD | "application/vnd.oci.image.layer.nondistributable.v1.tar+zstd" => {
            Ok(Compression::Zstd)
        }
        other => Err(Error::invalid(format!(
            "unsupported layer media type {other:?}"
        ))),
    }
}

/// A content descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// Media type of the referenced content.
    #[serde(default)]
    pub media_type: String,
    /// Digest of the referenced content.
    pub digest: Digest,
    /// Size in bytes.
    pub size: u64,
    /// Platform, for index entries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A platform of an index entry or image config.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Platform {
    /// GOARCH-style architecture.
    pub architecture: String,
    /// GOOS-style operating system.
    pub os: String,
    /// CPU variant (arm v7, arm64 v8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    /// This machine's platform in OCI (GOARCH) terms.
    pub fn host() -> Platform {
        let (architecture, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "x86" => ("386", None),
            "powerpc64" => ("ppc64le", None),
            "s390x" => ("s390x", None),
            "riscv64" => ("riscv64", None),
            other => (other, None),
        };
        Platform {
            architecture: architecture.to_string(),
            os: "linux".to_string(),
            variant: variant.map(str::to_string),
        }
    }

    /// Whether an index entry for `other` can run here (variant compared only when both name one).
    pub fn matches(&self, other: &Platform) -> bool {
        self.os == other.os
            && self.architecture == other.architecture
            && match (&self.variant, &other.variant) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// An image manifest (OCI or Docker schema 2: same shape).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    /// Always 2.
    pub schema_version: u32,
    /// Media type, when the manifest states it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The image config blob.
    pub config: Descriptor,
    /// Layer blobs, base first.
    pub layers: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An image index or Docker manifest list.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    /// Always 2.
    pub schema_version: u32,
    /// Media type, when stated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// Entries.
    pub manifests: Vec<Descriptor>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Index {
    /// The entry that runs on `platform`, if any (first match, as containerd picks).
    pub fn select(&self, platform: &Platform) -> Option<&Descriptor> {
        self.manifests
            .iter()
            .find(|d| d.platform.as_ref().is_some_and(|p| platform.matches(p)))
    }
}

/// The runtime part of an image config (`config` in the JSON).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RunConfig {
    /// USER: `name`, `uid`, `uid:gid`, `name:group`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// Environment `K=V`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub env: Option<Vec<String>>,
    /// ENTRYPOINT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<Vec<String>>,
    /// CMD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cmd: Option<Vec<String>>,
    /// WORKDIR.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub working_dir: Option<String>,
    /// STOPSIGNAL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_signal: Option<String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<BTreeMap<String, String>>,
    /// Declared volumes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<BTreeMap<String, serde_json::Value>>,
    /// Declared ports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
}

/// The root filesystem section of an image config.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RootFs {
    /// Always `layers`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Uncompressed layer digests, base first.
    pub diff_ids: Vec<Digest>,
}

/// An image config blob (the fields bosun uses; the raw blob stays in the content store).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    /// GOARCH.
    #[serde(default)]
    pub architecture: String,
    /// GOOS.
    #[serde(default)]
    pub os: String,
    /// Creation time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
    /// Runtime defaults.
    #[serde(default)]
    pub config: RunConfig,
    /// Layer diff ids.
    pub rootfs: RootFs,
}

/// Any manifest-ish document, told apart by media type or shape.
#[derive(Debug, Clone)]
pub enum Document {
    /// A single-platform manifest.
    Manifest(Manifest),
    /// An index or manifest list.
    Index(Index),
}

/// The fields that tell manifest kinds apart.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Probe {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Option<serde_json::Value>,
    #[serde(default)]
    schema_version: Option<u32>,
}

/// The media type of manifest `bytes`: `declared` (a Content-Type or descriptor media type,
/// parameters ignored) when it names a manifest type, else the document's own `mediaType`, else
/// its shape (`manifests` means an index), else `declared` as given (or OCI manifest if empty).
pub fn media_type_of(declared: &str, bytes: &[u8]) -> String {
    let declared = declared.split(';').next().unwrap_or_default().trim();
    if [
        media::OCI_MANIFEST,
        media::OCI_INDEX,
        media::DOCKER_MANIFEST,
        media::DOCKER_LIST,
    ]
    .contains(&declared)
    {
        return declared.to_string();
    }
    match serde_json::from_slice::<Probe>(bytes) {
        Ok(Probe {
            media_type: Some(m),
            ..
        }) => m,
        Ok(Probe {
            manifests: Some(_), ..
        }) => media::OCI_INDEX.to_string(),
        _ if !declared.is_empty() && declared != "application/json" => declared.to_string(),
        _ => media::OCI_MANIFEST.to_string(),
    }
}

impl Document {
    /// Parses `bytes` whose declared media type is `media_type` (registry header or parent
    /// descriptor); see [`media_type_of`] for how the type is settled.
    pub fn parse(media_type: &str, bytes: &[u8]) -> Result<Document> {
        let probe: Probe = serde_json::from_slice(bytes)
            .map_err(|e| Error::invalid(format!("manifest is not valid JSON: {e}")))?;
        let mt = media_type_of(media_type, bytes);
        if mt == media::DOCKER_SCHEMA1 || probe.schema_version == Some(1) {
            return Err(Error::invalid(
                "Docker schema 1 manifests are not supported (deprecated); push the image with schema 2 or OCI",
            ));
        }
        match mt.as_str() {
            media::OCI_INDEX | media::DOCKER_LIST => serde_json::from_slice(bytes)
                .map(Document::Index)
                .map_err(|e| Error::invalid(format!("bad image index: {e}"))),
            media::OCI_MANIFEST | media::DOCKER_MANIFEST => serde_json::from_slice(bytes)
                .map(Document::Manifest)
                .map_err(|e| Error::invalid(format!("bad image manifest: {e}"))),
            other => Err(Error::invalid(format!(
                "unsupported manifest media type {other:?}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_selects_host_platform() {
        let d = |arch: &str, variant: Option<&str>, n: u8| Descriptor {
            media_type: media::OCI_MANIFEST.into(),
            digest: Digest::of(&[n]),
            size: 1,
            platform: Some(Platform {
                architecture: arch.into(),
                os: "linux".into(),
                variant: variant.map(Into::into),
            }),
            annotations: BTreeMap::new(),
        };
        let idx = Index {
            schema_version: 2,
            media_type: None,
            manifests: vec![
                d("arm", Some("v6"), 1),
                d("arm64", Some("v8"), 2),
                d("amd64", None, 3),
            ],
            annotations: BTreeMap::new(),
        };
        let amd = Platform {
            architecture: "amd64".into(),
            os: "linux".into(),
            variant: None,
        };
        assert_eq!(
            idx.select(&amd).map(|d| d.digest.clone()),
            Some(Digest::of(&[3]))
        );
        let arm7 = Platform {
            architecture: "arm".into(),
            os: "linux".into(),
            variant: Some("v7".into()),
        };
        assert!(idx.select(&arm7).is_none());
    }

    #[test]
    fn document_parse_tells_index_from_manifest_and_refuses_schema1() {
        let idx = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(Document::parse("", idx), Ok(Document::Index(_))));
        let s1 = br#"{"schemaVersion":1,"name":"x"}"#;
        assert!(Document::parse("application/json", s1).is_err());
        assert_eq!(
            layer_compression(media::DOCKER_LAYER_GZIP).ok(),
            Some(Compression::Gzip)
        );
        assert!(layer_compression("application/x-foo").is_err());
    }

    #[test]
    fn media_type_comes_from_declared_type_then_document_then_shape() {
        let oci_index = "application/vnd.oci.image.index.v1+json; charset=utf-8";
        assert_eq!(media_type_of(oci_index, b"{}"), media::OCI_INDEX);
        assert_eq!(
            media_type_of("application/json", br#"{"manifests":[]}"#),
            media::OCI_INDEX
        );
        let docker = format!(r#"{{"mediaType":"{}"}}"#, media::DOCKER_MANIFEST);
        assert_eq!(media_type_of("", docker.as_bytes()), media::DOCKER_MANIFEST);
        assert_eq!(media_type_of("", br#"{"layers":[]}"#), media::OCI_MANIFEST);
    }
}
