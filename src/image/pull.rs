//! Pulls images from registries into the content store: manifest, config and layers, verified.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

use futures::StreamExt;
use prometheus_client::metrics::counter::Counter;
use tokio::sync::mpsc;

use crate::error::{Error, Result, ResultExt};
use crate::image::content::{ContentStore, MAX_SMALL_BLOB};
use crate::image::digest::Digest;
use crate::image::manifest::{
    layer_compression, media, Descriptor, Document, ImageConfig, Manifest, Platform,
};
use crate::image::reference::Reference;
use crate::image::registry::downloads::{BlobEvent, Downloads, Source};
use crate::image::registry::{Credentials, RegistryClient, Resolved};

/// Bytes of image layers pulls received from registries (a layer one pull joins another's
/// download of counts for both pulls); the daemon's metrics serve it as `image_pull_bytes`.
pub static PULLED_BYTES: LazyLock<Counter> = LazyLock::new(Counter::default);

/// Layers downloaded at once per pull unless configured otherwise (containerd's default is 3).
pub const DEFAULT_MAX_CONCURRENT_LAYERS: usize = 3;

/// What a pull reports as it goes (for logs and `bosun image pull` progress).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PullEvent {
    /// The platform manifest is known: its digest and its layers (digest, size).
    Resolved {
        /// Digest of the platform manifest.
        digest: Digest,
        /// Layers, base first.
        layers: Vec<(Digest, u64)>,
    },
    /// Bytes of a layer received so far.
    Progress {
        /// The layer.
        digest: Digest,
        /// Bytes so far.
        done: u64,
        /// The layer's size.
        total: u64,
    },
    /// The layer was in the content store already.
    Cached {
        /// The layer.
        digest: Digest,
    },
    /// The layer is downloaded, verified and committed.
    Done {
        /// The layer.
        digest: Digest,
    },
}

/// An image whose manifest, config and layers are all in the content store.
#[derive(Debug, Clone)]
pub struct PulledImage {
    /// The reference pulled, as given (normalised).
    pub reference: Reference,
    /// Digest of the platform manifest below.
    pub manifest_digest: Digest,
    /// The platform manifest.
    pub manifest: Manifest,
    /// Digest of the config blob (the image id).
    pub config_digest: Digest,
    /// The parsed config.
    pub config: ImageConfig,
    /// The index the reference resolved to, when it named a multi-platform image.
    pub index_digest: Option<Digest>,
}

impl PulledImage {
    /// What the reference resolved to in the registry (index if any, else manifest): the digest
    /// of `name@digest` repo digests.
    pub fn repo_digest(&self) -> &Digest {
        self.index_digest.as_ref().unwrap_or(&self.manifest_digest)
    }
}

/// Pulls images; clones share the table of downloads in flight, so concurrent pulls of the same
/// blob download it once.
#[derive(Clone)]
pub struct Puller {
    downloads: Downloads,
    max_layers: usize,
}

impl Puller {
    /// A puller downloading at most `max_concurrent_layers` layers at once per pull (0 means
    /// [`DEFAULT_MAX_CONCURRENT_LAYERS`]).
    pub fn new(
        registry: RegistryClient,
        content: ContentStore,
        max_concurrent_layers: usize,
    ) -> Self {
        let max_layers = match max_concurrent_layers {
            0 => DEFAULT_MAX_CONCURRENT_LAYERS,
            n => n,
        };
        Puller {
            downloads: Downloads::new(registry, content),
            max_layers,
        }
    }

    /// This puller fetching through `registry` instead (one pull's own registry settings),
    /// with its own table of downloads in flight; the content store is the same.
    pub fn through(&self, registry: RegistryClient) -> Puller {
        Puller {
            downloads: Downloads::new(registry, self.downloads.content().clone()),
            max_layers: self.max_layers,
        }
    }

    /// The registry client it fetches through.
    pub fn registry(&self) -> &RegistryClient {
        self.downloads.registry()
    }

    /// Pulls `r` for this host's platform. Blobs already in the store are not fetched again; each
    /// blob download runs in its own task, shared with concurrent pulls. Dropping this future
    /// (a cancelled caller) stops the downloads no other pull waits for; their bytes stay for
    /// the next pull to resume. When one layer fails, no more layers start, the ones under way
    /// finish (stored for the retry that follows), then the first failure is returned.
    pub async fn pull(
        &self,
        r: &Reference,
        creds: &Credentials,
        events: Option<mpsc::UnboundedSender<PullEvent>>,
    ) -> Result<PulledImage> {
        let name = format!("image {:?}", r.to_string());
        let content = &self.downloads.content();
        let resolved = self.downloads.registry().resolve(r, creds).await?;
        let src = Source {
            endpoint: resolved.endpoint.clone(),
            reference: r.clone(),
            creds: creds.clone(),
        };
        let (manifest_digest, manifest, index_digest) =
            self.platform_manifest(&src, resolved, &name).await?;
        for l in &manifest.layers {
            layer_compression(&l.media_type).ctx(|| format!("{name}: layer {}", l.digest))?;
        }
        if !matches!(
            manifest.config.media_type.as_str(),
            media::OCI_CONFIG | media::DOCKER_CONFIG | ""
        ) {
            return Err(Error::invalid(format!(
                "{name}: not a container image (config media type {:?})",
                manifest.config.media_type
            )));
        }
        send(
            &events,
            PullEvent::Resolved {
                digest: manifest_digest.clone(),
                layers: manifest
                    .layers
                    .iter()
                    .map(|l| (l.digest.clone(), l.size))
                    .collect(),
            },
        );

        let config_desc = &manifest.config;
        if config_desc.size > MAX_SMALL_BLOB {
            return Err(Error::invalid(format!(
                "{name}: config of {} bytes is too large",
                config_desc.size
            )));
        }
        self.downloads
            .fetch(&src, config_desc, |_| {})
            .await
            .ctx(|| format!("{name}: config"))?;
        let config: ImageConfig = serde_json::from_slice(&content.read(&config_desc.digest)?)
            .map_err(|e| Error::invalid(format!("{name}: config {}: {e}", config_desc.digest)))?;
        if config.rootfs.diff_ids.len() != manifest.layers.len() {
            return Err(Error::invalid(format!(
                "{name}: config lists {} diff_ids for {} layers",
                config.rootfs.diff_ids.len(),
                manifest.layers.len()
            )));
        }

        let failed = AtomicBool::new(false);
        // Collected first: rustc cannot prove a stream mapping `&Descriptor`s `Send` for every
        // lifetime ("implementation of FnOnce is not general enough").
        let layers: Vec<_> = manifest
            .layers
            .iter()
            .map(|desc| self.fetch_layer(&src, desc, &events, &name, &failed))
            .collect();
        let results: Vec<Result<()>> = futures::stream::iter(layers)
            .buffer_unordered(self.max_layers)
            .collect()
            .await;
        if let Some(e) = results.into_iter().find_map(Result::err) {
            return Err(e);
        }

        Ok(PulledImage {
            reference: r.clone(),
            manifest_digest,
            config_digest: config_desc.digest.clone(),
            manifest,
            config,
            index_digest,
        })
    }

    /// Fetches layer `desc` of image `name` unless another layer failed already (`failed`,
    /// set here when this one fails).
    async fn fetch_layer(
        &self,
        src: &Source,
        desc: &Descriptor,
        events: &Option<mpsc::UnboundedSender<PullEvent>>,
        name: &str,
        failed: &AtomicBool,
    ) -> Result<()> {
        if failed.load(Ordering::SeqCst) {
            return Ok(());
        }
        let digest = &desc.digest;
        let event = |e| match e {
            BlobEvent::Cached => PullEvent::Cached {
                digest: digest.clone(),
            },
            BlobEvent::Done => {
                PULLED_BYTES.inc_by(desc.size);
                PullEvent::Done {
                    digest: digest.clone(),
                }
            }
            BlobEvent::Progress(done) => PullEvent::Progress {
                digest: digest.clone(),
                done,
                total: desc.size,
            },
        };
        let res = self
            .downloads
            .fetch(src, desc, |e| send(events, event(e)))
            .await;
        if res.is_err() {
            failed.store(true, Ordering::SeqCst);
        }
        res.ctx(|| format!("{name}: layer {}", desc.digest))
    }

    /// The manifest to run here: `resolved` itself, or the host's entry of the index it is
    /// (fetched by digest). Index and manifest end up in the content store.
    async fn platform_manifest(
        &self,
        src: &Source,
        resolved: Resolved,
        name: &str,
    ) -> Result<(Digest, Manifest, Option<Digest>)> {
        let content = &self.downloads.content();
        let index = match Document::parse(&resolved.media_type, &resolved.bytes).ctx(|| name)? {
            Document::Manifest(m) => {
                content
                    .put(&resolved.digest, &resolved.bytes)
                    .ctx(|| format!("{name}: store manifest"))?;
                return Ok((resolved.digest, m, None));
            }
            Document::Index(index) => index,
        };
        content
            .put(&resolved.digest, &resolved.bytes)
            .ctx(|| format!("{name}: store index"))?;
        let host = Platform::host();
        let Some(desc) = index.select(&host) else {
            let have: Vec<String> = index
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref())
                .map(platform_string)
                .collect();
            return Err(Error::not_found(format!(
                "{name}: no manifest for platform {} (available: {})",
                platform_string(&host),
                if have.is_empty() {
                    "none".to_string()
                } else {
                    have.join(", ")
                }
            )));
        };
        let bytes = if content.contains(&desc.digest) {
            content.read(&desc.digest)?
        } else {
            let b = self
                .downloads
                .registry()
                .fetch_manifest(&src.endpoint, &src.reference, &src.creds, desc)
                .await?;
            content
                .put(&desc.digest, &b)
                .ctx(|| format!("{name}: store manifest"))?;
            b
        };
        match Document::parse(&desc.media_type, &bytes)
            .ctx(|| format!("{name}: manifest {}", desc.digest))?
        {
            Document::Manifest(m) => Ok((desc.digest.clone(), m, Some(resolved.digest))),
            Document::Index(_) => Err(Error::invalid(format!(
                "{name}: index entry {} is another index (nested indexes are not supported)",
                desc.digest
            ))),
        }
    }
}

fn send(events: &Option<mpsc::UnboundedSender<PullEvent>>, e: PullEvent) {
    if let Some(tx) = events {
        // A caller that stopped listening does not stop the pull.
        let _ = tx.send(e);
    }
}

fn platform_string(p: &Platform) -> String {
    match &p.variant {
        Some(v) => format!("{}/{}/{v}", p.os, p.architecture),
        None => format!("{}/{}", p.os, p.architecture),
    }
}

// The tests live next to the fake registry they use (src/image/ holds other owners' files).
#[cfg(test)]
#[path = "pull_tests.rs"]
mod tests;
