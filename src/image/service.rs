//! The image service domain: pull/import → unpack → index, lookups, removal with GC, and usage.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use futures::{FutureExt, StreamExt, TryStreamExt};
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
use crate::image::registry::{Credentials, PullHosts, RegistryClient};
use crate::image::snapshot::{LayerSource, Snapshots, UnpackLimits};
use crate::image::tasks::TaskTable;
use crate::image::usage::{FsUsage, UsageTracker};

/// How long content outside any image survives GC (a retried pull reuses it meanwhile).
pub const ORPHAN_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Whether `path` was last changed longer than [`ORPHAN_GRACE`] ago (unreadable counts as stale).
fn is_stale(path: &Path) -> bool {
    std::fs::symlink_metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_none_or(|age| age > ORPHAN_GRACE)
}

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
    /// Pulls in flight by reference.
    pulls: TaskTable<String, Arc<ImageRecord>>,
    /// Pulls and imports hold it shared from their first blob to their index record; GC holds it
    /// exclusively, so it never takes content that is on its way to becoming an image.
    gc_guard: tokio::sync::RwLock<()>,
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
        registry.hosts().dirs().check_all();
        let puller = Puller::new(
            registry,
            content.clone(),
            config.image.max_concurrent_downloads,
        );
        let index = ImageIndex::load(&root.join("images"))?;
        let leases = Leases::open(&root.join("leases"))?;
        let usage = UsageTracker::new(&content, &snapshots)?;
        // Archives being imported are decompressed here; a crash may leave one behind.
        let _ = std::fs::remove_dir_all(root.join("tmp"));
        Ok(Arc::new(Images {
            content,
            snapshots,
            puller,
            index: Mutex::new(index),
            leases,
            usage,
            pulls: TaskTable::new(),
            gc_guard: tokio::sync::RwLock::new(()),
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

    /// Pulls `image` (any reference form). Concurrent pulls of the same reference share one pull
    /// task; it stops when every caller has gone away (a PullImage whose deadline passed), and
    /// what it downloaded so far stays for the next pull to resume.
    pub async fn pull(
        self: &Arc<Self>,
        image: &str,
        creds: Credentials,
        events: Option<UnboundedSender<PullEvent>>,
    ) -> Result<Arc<ImageRecord>> {
        let reference = Reference::parse(image)?;
        if events.is_some() {
            // A pull that reports progress runs on its own; blob downloads are still shared.
            return self.pull_now(&reference, &creds, events).await;
        }
        let key = reference.to_string();
        let this = self.clone();
        let pull = self
            .pulls
            .join(
                &key,
                || false,
                move || {
                    let task = async move { this.pull_now(&reference, &creds, None).await };
                    (task.boxed(), ())
                },
            )
            .await
            .ok_or_else(|| Error::internal(format!("image {key}: pull not started")))?;
        pull.done().await
    }

    /// [`Images::pull`] with one pull's registry settings on top of the daemon's (`ctr images
    /// pull --plain-http`, `--hosts-dir`, `--skip-verify`, …). Not shared with other pulls of
    /// the same reference, which may use other settings; blobs in the store are reused.
    pub async fn pull_with_hosts(
        &self,
        image: &str,
        creds: Credentials,
        events: Option<UnboundedSender<PullEvent>>,
        hosts: PullHosts,
    ) -> Result<Arc<ImageRecord>> {
        let reference = Reference::parse(image)?;
        let puller = self.puller.through(self.puller.registry().for_pull(hosts));
        self.pull_via(&puller, &reference, &creds, events).await
    }

    async fn pull_now(
        &self,
        reference: &Reference,
        creds: &Credentials,
        events: Option<UnboundedSender<PullEvent>>,
    ) -> Result<Arc<ImageRecord>> {
        self.pull_via(&self.puller, reference, creds, events).await
    }

    async fn pull_via(
        &self,
        puller: &Puller,
        reference: &Reference,
        creds: &Credentials,
        events: Option<UnboundedSender<PullEvent>>,
    ) -> Result<Arc<ImageRecord>> {
        let _busy = self.gc_guard.read().await;
        let pulled = puller.pull(reference, creds, events.clone()).await?;
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
            .register_now(new)
            .await
            .map_err(|e| e.context(format!("image {reference}")))?;
        if let Some(ev) = events {
            let _ = ev.send(PullEvent::Done {
                digest: rec.id.clone(),
            });
        }
        Ok(rec)
    }

    /// Holds off GC while content is stored outside any image record (an import in progress).
    pub async fn busy(&self) -> tokio::sync::RwLockReadGuard<'_, ()> {
        self.gc_guard.read().await
    }

    /// Unpacks the layers of content already in the store and records the image under its names.
    /// The caller holds [`Images::busy`] from storing the content until this returns.
    pub async fn register_now(&self, new: NewImage) -> Result<Arc<ImageRecord>> {
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

    /// Removes the image `key` names (every tag of it) at once; its snapshots and blobs are
    /// collected in the background. Absent images are fine (CRI RemoveImage is idempotent).
    pub async fn remove(self: &Arc<Self>, key: &str) -> Result<()> {
        let Some(rec) = self.lookup(key) else {
            return Ok(());
        };
        if let Some(removed) = lock(&self.index).remove(&rec.id)? {
            self.spawn_gc(Some(removed));
        }
        Ok(())
    }

    /// Gives the image `source` names (a name or an id, as [`Images::lookup`] finds it) the
    /// names `targets` (`ctr images tag`). A name another image holds is refused unless
    /// `force`, which moves it. The updated image and the names given, as shown.
    pub fn tag(
        &self,
        source: &str,
        targets: &[Reference],
        force: bool,
    ) -> Result<(Arc<ImageRecord>, Vec<String>)> {
        let mut idx = lock(&self.index);
        let mut rec = idx
            .lookup(source)
            .ok_or_else(|| Error::not_found(format!("image {source:?}: not found")))?;
        let mut given = Vec::new();
        for t in targets {
            if let Some(holder) = idx.named(t) {
                if holder.id != rec.id && !force {
                    return Err(Error::new(
                        crate::error::ErrorKind::AlreadyExists,
                        format!("image {:?}: already exists", t.to_string()),
                    ));
                }
            }
            rec = idx.add_name(&rec.id, t)?;
            given.push(t.to_string());
        }
        Ok((rec, given))
    }

    /// Removes the name `name` from its image (`ctr images rm`); an image left without names
    /// goes, and its content is collected in the background. `None`: no image has the name;
    /// else whether the image went.
    pub fn untag(self: &Arc<Self>, name: &Reference) -> Result<Option<bool>> {
        let removed = lock(&self.index).remove_name(name)?;
        Ok(removed.map(|(rec, gone)| {
            if gone {
                self.spawn_gc(Some(rec));
            }
            gone
        }))
    }

    /// What the names of `rec` point at, as containerd's image target: the index it came
    /// through, else its manifest; with its media type (read from the blob, the kind's OCI
    /// type when it cannot be).
    pub fn target(&self, rec: &ImageRecord) -> (Digest, String) {
        let (digest, fallback) = match &rec.index_digest {
            Some(i) => (i.clone(), crate::image::manifest::media::OCI_INDEX),
            None => (
                rec.manifest_digest.clone(),
                crate::image::manifest::media::OCI_MANIFEST,
            ),
        };
        let media_type = self
            .content
            .read(&digest)
            .map(|b| crate::image::manifest::media_type_of("", &b))
            .unwrap_or_else(|_| fallback.to_string());
        (digest, media_type)
    }

    /// Starts a GC pass in the background; failures are logged (the next pass retries).
    pub fn spawn_gc(self: &Arc<Self>, removed: Option<Arc<ImageRecord>>) {
        let this = self.clone();
        tokio::spawn(async move {
            if let Err(e) = this.gc(removed.as_deref()).await {
                tracing::warn!("image gc: {e}");
            }
        });
    }

    /// Deletes snapshots not used by any image or lease, and blobs not owned by any image.
    /// Content of `removed` goes at once; other orphans (an interrupted pull's verified layers)
    /// are kept for [`ORPHAN_GRACE`] so a retried pull reuses them, as containerd's pull leases do.
    /// Waits for pulls and imports in flight, whose content is not in the index yet.
    pub async fn gc(&self, removed: Option<&ImageRecord>) -> Result<()> {
        let _exclusive = self.gc_guard.write().await;
        let (dead_chains, dead_blobs) = {
            let idx = lock(&self.index);
            let leased = self.leases.chain_ids();
            let removed_chains: Vec<&Digest> =
                removed.map(|r| r.chain_ids().collect()).unwrap_or_default();
            let removed_blobs = removed.map(|r| r.blobs()).unwrap_or_default();
            let chains: Vec<Digest> = self
                .snapshots
                .list()?
                .into_iter()
                .filter(|c| !idx.uses_chain(c) && !leased.contains(c))
                // Age from the snapshot's own dir: `fs/` carries the layer's mtime from the tar.
                .filter(|c| {
                    let dir = self.snapshots.fs_path(c);
                    removed_chains.contains(&c) || dir.parent().is_none_or(is_stale)
                })
                .collect();
            let blobs: Vec<Digest> = self
                .content
                .list()?
                .into_iter()
                .filter(|b| !idx.uses_blob(b))
                .filter(|b| removed_blobs.contains(b) || is_stale(&self.content.blob_path(b)))
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
        // Interrupted downloads are kept as long as orphan blobs, for a retried pull to resume.
        self.content.remove_stale_partials(ORPHAN_GRACE);
        self.usage.refresh_content(&self.content);
        Ok(())
    }

    /// Disk used by images (blobs + snapshots) on the filesystem holding the root.
    pub fn image_fs_usage(&self) -> FsUsage {
        self.usage.snapshot(&self.root)
    }

    /// Disk used by container writable layers (`<root>/containers`), measured now.
    pub async fn container_fs_usage(&self) -> Result<FsUsage> {
        let dir = self.root.join("containers");
        let (used_bytes, inodes_used) = if dir.exists() {
            tokio::task::spawn_blocking(move || crate::image::unpack::disk_usage(&dir))
                .await
                .map_err(|e| Error::internal(format!("usage task: {e}")))??
        } else {
            (0, 0)
        };
        Ok(FsUsage {
            timestamp_ns: crate::image::index::now_ns(),
            mountpoint: self.root.clone(),
            used_bytes,
            inodes_used,
        })
    }

    /// The root directory (persistent data).
    pub fn root(&self) -> &Path {
        &self.root
    }
}
