//! The image service domain: pull/import → unpack → index, lookups, removal with GC, and usage.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared};
use futures::{StreamExt, TryStreamExt};
use tokio::sync::mpsc::UnboundedSender;

use crate::config::Config;
use crate::error::{Error, Result, ResultExt};
use crate::image::content::ContentStore;
use crate::image::digest::Digest;
use crate::image::index::{ImageIndex, ImageRecord, LayerRecord};
use crate::image::leases::Leases;
use crate::image::manifest::{ImageConfig, Manifest};
use crate::image::pull::{PullEvent, Puller};
use crate::image::reference::Reference;
use crate::image::registry::{Credentials, RegistryClient};
use crate::image::snapshot::{LayerSource, Snapshots, UnpackLimits};
use crate::image::usage::{FsUsage, UsageTracker};

type SharedPull = Shared<BoxFuture<'static, Result<Arc<ImageRecord>>>>;

/// Content that is already in the store and should become a named image.
#[derive(Debug, Clone)]
pub struct NewImage {
    /// Names to give it: `name:tag` and/or `name@digest`.
    pub tags: Vec<String>,
    /// Repo digests (`name@sha256:…`).
    pub digests: Vec<String>,
    /// The platform manifest's digest and content.
    pub manifest_digest: Digest,
    /// Parsed manifest.
    pub manifest: Manifest,
    /// Index digest, if it came through one.
    pub index_digest: Option<Digest>,
    /// Parsed config.
    pub config: ImageConfig,
}

/// Images on this node. Cheap lookups from memory; slow work (pull, unpack, GC) off the lock.
pub struct Images {
    content: ContentStore,
    snapshots: Arc<Snapshots>,
    puller: Puller,
    index: Mutex<ImageIndex>,
    leases: Leases,
    usage: UsageTracker,
    pulls: Mutex<HashMap<String, SharedPull>>,
    root: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Images {
    /// Opens the stores under `config.root`: content, snapshots, image index, leases.
    pub fn open(config: &Config) -> Result<Arc<Images>> {
        let root = config.root.clone();
        let content = ContentStore::open(&root.join("content"))?;
        let limits = UnpackLimits {
            max_layer_bytes: config.image.max_layer_bytes,
            max_entries: config.image.max_layer_entries,
            ..UnpackLimits::default()
        };
        let snapshots = Arc::new(Snapshots::open(&root.join("snapshots"), limits)?);
        let registry = RegistryClient::new(&config.registry)?;
        let puller = Puller::new(
            registry,
            content.clone(),
            config.image.max_concurrent_downloads,
        );
        let index = ImageIndex::load(&root.join("images"))?;
        let leases = Leases::open(&root.join("leases"))?;
        let usage = UsageTracker::new(&content, &snapshots)?;
        Ok(Arc::new(Images {
            content,
            snapshots,
            puller,
            index: Mutex::new(index),
            leases,
            usage,
            pulls: Mutex::new(HashMap::new()),
            root,
        }))
    }

    /// The content store.
    pub fn content(&self) -> &ContentStore {
        &self.content
    }

    /// The snapshot store (container creation stacks these as overlay lowerdirs).
    pub fn snapshots(&self) -> &Snapshots {
        &self.snapshots
    }

    /// Leases that keep snapshots alive for containers.
    pub fn leases(&self) -> &Leases {
        &self.leases
    }

    /// Every image.
    pub fn list(&self) -> Vec<Arc<ImageRecord>> {
        lock(&self.index).list()
    }

    /// Finds an image by id, id prefix or reference.
    pub fn lookup(&self, key: &str) -> Option<Arc<ImageRecord>> {
        lock(&self.index).lookup(key)
    }

    /// Pulls `image` (any reference form). Concurrent pulls of the same reference share one pull;
    /// the pull runs to completion in its own task even if every caller goes away.
    pub async fn pull(
        self: &Arc<Self>,
        image: &str,
        creds: Credentials,
        events: Option<UnboundedSender<PullEvent>>,
    ) -> Result<Arc<ImageRecord>> {
        let reference = Reference::parse(image)?;
        let key = reference.to_string();
        let shared = {
            let mut pulls = lock(&self.pulls);
            match pulls.get(&key) {
                Some(s) if events.is_none() => s.clone(),
                _ => {
                    let this = self.clone();
                    let k = key.clone();
                    let task = tokio::spawn(async move {
                        let res = this.pull_now(&reference, &creds, events).await;
                        lock(&this.pulls).remove(&k);
                        res
                    });
                    let fut = async move {
                        task.await
                            .map_err(|e| Error::internal(format!("pull task: {e}")))?
                    }
                    .boxed()
                    .shared();
                    pulls.insert(key.clone(), fut.clone());
                    fut
                }
            }
        };
        shared.await
    }

    async fn pull_now(
        &self,
        reference: &Reference,
        creds: &Credentials,
        events: Option<UnboundedSender<PullEvent>>,
    ) -> Result<Arc<ImageRecord>> {
        let pulled = self.puller.pull(reference, creds, events.clone()).await?;
        let mut tags = Vec::new();
        if let Some(t) = reference.tagged_string() {
            tags.push(t);
        }
        let new = NewImage {
            tags,
            // The repo digest is what a user pulls by: the index digest when there was one.
            digests: vec![reference.digested_string(
                pulled
                    .index_digest
                    .as_ref()
                    .unwrap_or(&pulled.manifest_digest),
            )],
            manifest_digest: pulled.manifest_digest.clone(),
            manifest: pulled.manifest,
            index_digest: pulled.index_digest,
            config: pulled.config,
        };
        let rec = self
            .register(new)
            .await
            .map_err(|e| e.context(format!("image {reference}")))?;
        if let Some(ev) = events {
            let _ = ev.send(PullEvent::Done {
                digest: rec.id.clone(),
            });
        }
        Ok(rec)
    }

    /// Unpacks the layers of content already in the store and records the image under its names.
    pub async fn register(&self, new: NewImage) -> Result<Arc<ImageRecord>> {
        let config_digest = new.manifest.config.digest.clone();
        let diff_ids = &new.config.rootfs.diff_ids;
        if diff_ids.len() != new.manifest.layers.len() {
            return Err(Error::invalid(format!(
                "manifest {} has {} layers but its config lists {} diff ids",
                new.manifest_digest.short(),
                new.manifest.layers.len(),
                diff_ids.len()
            )));
        }
        let chain_ids = Snapshots::chain_ids(diff_ids);
        let layers: Vec<LayerRecord> = new
            .manifest
            .layers
            .iter()
            .zip(diff_ids)
            .zip(&chain_ids)
            .map(|((l, diff), chain)| LayerRecord {
                digest: l.digest.clone(),
                media_type: l.media_type.clone(),
                size: l.size,
                diff_id: diff.clone(),
                chain_id: chain.clone(),
            })
            .collect();
        // Layers unpack into independent directories, so they can unpack side by side.
        futures::stream::iter(layers.clone())
            .map(|layer| self.unpack_layer(layer))
            .buffer_unordered(2)
            .try_collect::<Vec<()>>()
            .await?;
        let manifest_size = self.content.size(&new.manifest_digest).unwrap_or_default();
        let size = manifest_size
            + new.manifest.config.size
            + new.manifest.layers.iter().map(|l| l.size).sum::<u64>();
        let record = ImageRecord {
            id: config_digest,
            repo_tags: new.tags,
            repo_digests: new.digests,
            manifest_digest: new.manifest_digest,
            index_digest: new.index_digest,
            layers,
            config: new.config,
            size,
            updated_ns: 0,
        };
        let rec = lock(&self.index).upsert(record)?;
        self.usage.refresh_content(&self.content);
        Ok(rec)
    }

    async fn unpack_layer(&self, layer: LayerRecord) -> Result<()> {
        if self.snapshots.exists(&layer.chain_id) {
            return Ok(());
        }
        let snapshots = self.snapshots.clone();
        let blob = self.content.blob_path(&layer.digest);
        let usage = tokio::task::spawn_blocking(move || {
            snapshots.unpack(
                &layer.chain_id,
                LayerSource {
                    blob: &blob,
                    media_type: &layer.media_type,
                    digest: &layer.digest,
                    diff_id: &layer.diff_id,
                },
            )
        })
        .await
        .map_err(|e| Error::internal(format!("unpack task: {e}")))??;
        self.usage.add_snapshot(usage.bytes, usage.inodes);
        Ok(())
    }

    /// Removes the image `key` names (every tag of it), then garbage-collects snapshots and blobs
    /// nothing uses any more. Absent images are fine (CRI RemoveImage is idempotent).
    pub async fn remove(&self, key: &str) -> Result<()> {
        let Some(rec) = self.lookup(key) else {
            return Ok(());
        };
        let removed = lock(&self.index).remove(&rec.id)?;
        if removed.is_some() {
            self.gc().await?;
        }
        Ok(())
    }

    /// Deletes snapshots not used by any image or lease, and blobs not owned by any image.
    pub async fn gc(&self) -> Result<()> {
        let (dead_chains, dead_blobs) = {
            let idx = lock(&self.index);
            let leased = self.leases.chain_ids();
            let chains: Vec<Digest> = self
                .snapshots
                .list()?
                .into_iter()
                .filter(|c| !idx.uses_chain(c) && !leased.contains(c))
                .collect();
            let blobs: Vec<Digest> = self
                .content
                .list()?
                .into_iter()
                .filter(|b| !idx.uses_blob(b))
                .collect();
            (chains, blobs)
        };
        for c in dead_chains {
            let usage = self.snapshots.usage(&c);
            let snapshots = self.snapshots.clone();
            let chain = c.clone();
            tokio::task::spawn_blocking(move || snapshots.remove(&chain))
                .await
                .map_err(|e| Error::internal(format!("gc task: {e}")))?
                .ctx(|| format!("gc snapshot {}", c.short()))?;
            if let Some(u) = usage {
                self.usage.remove_snapshot(u.bytes, u.inodes);
            }
        }
        for b in dead_blobs {
            self.content.delete(&b)?;
        }
        self.usage.refresh_content(&self.content);
        Ok(())
    }

    /// Disk used by images (blobs + snapshots) on the filesystem holding the root.
    pub fn image_fs_usage(&self) -> FsUsage {
        self.usage.snapshot(&self.root)
    }

    /// The directory whose filesystem holds container writable layers.
    pub fn root(&self) -> &Path {
        &self.root
    }
}
