//! The image index: one JSON record per image (by config digest), tag and digest lookups in memory.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, ResultExt};
use crate::image::digest::Digest;
use crate::image::manifest::ImageConfig;
use crate::image::reference::Reference;
use crate::store::atomic;

/// One layer of a stored image.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LayerRecord {
    /// Blob digest (compressed).
    pub digest: Digest,
    /// Blob media type.
    pub media_type: String,
    /// Blob size.
    pub size: u64,
    /// Uncompressed digest.
    pub diff_id: Digest,
    /// Chain id naming the layer's snapshot.
    pub chain_id: Digest,
}

/// A stored image: what ImageStatus and container creation need, without re-reading blobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageRecord {
    /// The image id: its config digest.
    pub id: Digest,
    /// `name:tag` references pointing here.
    pub repo_tags: Vec<String>,
    /// `name@sha256:…` references pointing here.
    pub repo_digests: Vec<String>,
    /// The platform manifest's digest.
    pub manifest_digest: Digest,
    /// The index digest, when the image was pulled through one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index_digest: Option<Digest>,
    /// Layers, base first.
    pub layers: Vec<LayerRecord>,
    /// Parsed config.
    pub config: ImageConfig,
    /// Content size: manifest + config + compressed layers (what containerd reports).
    pub size: u64,
    /// When the record was last changed (unix ns); the newer record wins a tag after a crash.
    pub updated_ns: i64,
}

impl ImageRecord {
    /// Chain ids, base first.
    pub fn chain_ids(&self) -> impl Iterator<Item = &Digest> {
        self.layers.iter().map(|l| &l.chain_id)
    }

    /// Every blob the image owns in the content store.
    pub fn blobs(&self) -> Vec<Digest> {
        let mut v = vec![self.manifest_digest.clone(), self.id.clone()];
        v.extend(self.index_digest.iter().cloned());
        v.extend(self.layers.iter().map(|l| l.digest.clone()));
        v
    }
}

/// Records under `<dir>/<id hex>.json`; the in-memory maps are rebuilt from them at start.
#[derive(Debug)]
pub struct ImageIndex {
    dir: PathBuf,
    images: HashMap<Digest, Arc<ImageRecord>>,
    refs: HashMap<String, Digest>,
}

/// Current time as unix nanoseconds.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or_default()
}

impl ImageIndex {
    /// Loads every record in `dir`; unreadable records are skipped with a warning (never a panic).
    pub fn load(dir: &Path) -> Result<Self> {
        fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
        let mut records: Vec<ImageRecord> = Vec::new();
        for e in fs::read_dir(dir)
            .ctx(|| format!("list {}", dir.display()))?
            .flatten()
        {
            let path = e.path();
            if path.extension().and_then(|x| x.to_str()) != Some("json") {
                if e.file_name().to_string_lossy().starts_with(".tmp-") {
                    let _ = fs::remove_file(&path);
                }
                continue;
            }
            match fs::read(&path)
                .map_err(Error::from)
                .and_then(|b| serde_json::from_slice::<ImageRecord>(&b).map_err(Error::from))
            {
                Ok(r) => records.push(r),
                Err(e) => {
                    tracing::warn!(path = %path.display(), "skipping unreadable image record: {e}")
                }
            }
        }
        // Oldest first, so a tag held twice after a crash ends on the newest record.
        records.sort_by_key(|r| r.updated_ns);
        let mut idx = ImageIndex {
            dir: dir.to_path_buf(),
            images: HashMap::new(),
            refs: HashMap::new(),
        };
        for mut r in records {
            for name in r.repo_tags.iter().chain(&r.repo_digests) {
                if let Some(old) = idx.refs.insert(name.clone(), r.id.clone()) {
                    if let Some(o) = idx.images.get_mut(&old) {
                        let o = Arc::make_mut(o);
                        o.repo_tags.retain(|t| t != name);
                        o.repo_digests.retain(|t| t != name);
                    }
                }
            }
            r.repo_tags.sort();
            idx.images.insert(r.id.clone(), Arc::new(r));
        }
        Ok(idx)
    }

    fn path(&self, id: &Digest) -> PathBuf {
        self.dir.join(format!("{}.json", id.hex()))
    }

    /// Every image.
    pub fn list(&self) -> Vec<Arc<ImageRecord>> {
        let mut v: Vec<_> = self.images.values().cloned().collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.images.len()
    }

    /// Whether there are no images.
    pub fn is_empty(&self) -> bool {
        self.images.is_empty()
    }

    /// Finds an image by id (`sha256:…`, bare hex, or a unique hex prefix of at least 3 chars) or
    /// by reference (normalised: `busybox` finds `docker.io/library/busybox:latest`).
    pub fn lookup(&self, key: &str) -> Option<Arc<ImageRecord>> {
        if let Ok(d) = Digest::parse(key) {
            if let Some(r) = self.images.get(&d) {
                return Some(r.clone());
            }
        }
        if let Some(id) = self.refs.get(key) {
            return self.images.get(id).cloned();
        }
        if let Ok(r) = Reference::parse(key) {
            if let Some(id) = self.refs.get(&r.to_string()) {
                return self.images.get(id).cloned();
            }
            // `name:tag@digest` and `name@digest` both find the image by its repo digest.
            if let Some(d) = r.digest() {
                if let Some(id) = self.refs.get(&format!("{}@{}", r.name(), d)) {
                    return self.images.get(id).cloned();
                }
            }
        }
        let hex = key.strip_prefix("sha256:").unwrap_or(key);
        if hex.len() >= 3 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let mut hits = self.images.values().filter(|r| r.id.hex().starts_with(hex));
            if let (Some(one), None) = (hits.next(), hits.next()) {
                return Some(one.clone());
            }
        }
        None
    }

    /// Stores `record` (merging names with an existing record of the same id) and moves each of
    /// its names away from any other image, persisting every changed record.
    pub fn upsert(&mut self, mut record: ImageRecord) -> Result<Arc<ImageRecord>> {
        record.updated_ns = now_ns();
        if let Some(old) = self.images.get(&record.id) {
            for t in &old.repo_tags {
                if !record.repo_tags.contains(t) {
                    record.repo_tags.push(t.clone());
                }
            }
            for t in &old.repo_digests {
                if !record.repo_digests.contains(t) {
                    record.repo_digests.push(t.clone());
                }
            }
        }
        record.repo_tags.sort();
        record.repo_digests.sort();
        let mut changed: Vec<Digest> = Vec::new();
        for name in record.repo_tags.iter().chain(&record.repo_digests) {
            if let Some(prev) = self.refs.get(name) {
                if *prev != record.id {
                    changed.push(prev.clone());
                }
            }
        }
        atomic::write_json(&self.path(&record.id), &record)
            .map_err(|e| e.context(format!("image {}: save record", record.id.short())))?;
        for id in changed {
            if let Some(o) = self.images.get_mut(&id) {
                let o = Arc::make_mut(o);
                o.repo_tags.retain(|t| !record.repo_tags.contains(t));
                o.repo_digests.retain(|t| !record.repo_digests.contains(t));
                o.updated_ns = now_ns();
                let o = o.clone();
                atomic::write_json(&self.path(&o.id), &o)
                    .map_err(|e| e.context(format!("image {}: save record", o.id.short())))?;
            }
        }
        for name in record.repo_tags.iter().chain(&record.repo_digests) {
            self.refs.insert(name.clone(), record.id.clone());
        }
        let rec = Arc::new(record);
        self.images.insert(rec.id.clone(), rec.clone());
        Ok(rec)
    }

    /// Removes image `id` with all its names; returns the removed record (None when absent).
    pub fn remove(&mut self, id: &Digest) -> Result<Option<Arc<ImageRecord>>> {
        let Some(rec) = self.images.get(id).cloned() else {
            return Ok(None);
        };
        match fs::remove_file(self.path(id)) {
            Ok(()) => atomic::sync_dir(&self.dir)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::from(e).context(format!("image {}: remove record", id.short())))
            }
        }
        self.images.remove(id);
        self.refs.retain(|_, v| v != id);
        Ok(Some(rec))
    }

    /// The image named exactly `name` (`name:tag` or `name@digest`, normalised): no id or
    /// prefix matching, as containerd's image store looks names up.
    pub fn named(&self, name: &Reference) -> Option<Arc<ImageRecord>> {
        let id = self.refs.get(&name_key(name))?;
        self.images.get(id).cloned()
    }

    /// Gives image `id` the name `name` (a tag, or `name@digest` with the digest of the
    /// image's index or manifest), taking it from any other image. The updated record.
    pub fn add_name(&mut self, id: &Digest, name: &Reference) -> Result<Arc<ImageRecord>> {
        let Some(rec) = self.images.get(id) else {
            return Err(Error::not_found(format!("image {}: not found", id.short())));
        };
        let mut rec = (**rec).clone();
        match name.digest() {
            Some(d) => {
                let own = rec.index_digest.as_ref().unwrap_or(&rec.manifest_digest);
                if d != own && *d != rec.manifest_digest {
                    return Err(Error::invalid(format!(
                        "name {name}: image {} is {own}, not {d}",
                        id.short()
                    )));
                }
                rec.repo_digests.push(name.digested_string(d));
            }
            None => rec.repo_tags.extend(name.tagged_string()),
        }
        self.upsert(rec)
    }

    /// Removes the name `name` from its image; an image left without names is removed too.
    /// `None` when no image has the name; else the image, and whether it was removed.
    pub fn remove_name(&mut self, name: &Reference) -> Result<Option<(Arc<ImageRecord>, bool)>> {
        let key = name_key(name);
        let Some(id) = self.refs.get(&key).cloned() else {
            return Ok(None);
        };
        let Some(rec) = self.images.get(&id) else {
            return Ok(None);
        };
        let mut rec = (**rec).clone();
        rec.repo_tags.retain(|t| *t != key);
        rec.repo_digests.retain(|t| *t != key);
        if rec.repo_tags.is_empty() && rec.repo_digests.is_empty() {
            return Ok(self.remove(&id)?.map(|r| (r, true)));
        }
        rec.updated_ns = now_ns();
        atomic::write_json(&self.path(&id), &rec)
            .map_err(|e| e.context(format!("image {}: save record", id.short())))?;
        self.refs.remove(&key);
        let rec = Arc::new(rec);
        self.images.insert(id, rec.clone());
        Ok(Some((rec, false)))
    }

    /// Whether any remaining image uses snapshot `chain_id`.
    pub fn uses_chain(&self, chain_id: &Digest) -> bool {
        self.images
            .values()
            .any(|r| r.chain_ids().any(|c| c == chain_id))
    }

    /// Whether any remaining image owns blob `d`.
    pub fn uses_blob(&self, d: &Digest) -> bool {
        self.images.values().any(|r| r.blobs().contains(d))
    }
}

/// How the index keys name `r`: `name@digest` when it pins a digest, else `name:tag`.
fn name_key(r: &Reference) -> String {
    match r.digest() {
        Some(d) => r.digested_string(d),
        None => r.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(n: u8, tags: &[&str]) -> ImageRecord {
        ImageRecord {
            id: Digest::of(&[n]),
            repo_tags: tags.iter().map(|s| s.to_string()).collect(),
            repo_digests: vec![],
            manifest_digest: Digest::of(&[n, 1]),
            index_digest: None,
            layers: vec![],
            config: ImageConfig::default(),
            size: 10,
            updated_ns: 0,
        }
    }

    #[test]
    fn lookup_by_id_prefix_and_normalised_reference() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut idx = ImageIndex::load(dir.path()).expect("load");
        let r = idx
            .upsert(rec(1, &["docker.io/library/busybox:latest"]))
            .expect("upsert");
        assert_eq!(
            idx.lookup("busybox").map(|x| x.id.clone()),
            Some(r.id.clone())
        );
        assert_eq!(
            idx.lookup(r.id.as_str()).map(|x| x.id.clone()),
            Some(r.id.clone())
        );
        assert_eq!(
            idx.lookup(&r.id.hex()[..12]).map(|x| x.id.clone()),
            Some(r.id.clone())
        );
        assert!(idx.lookup("alpine").is_none());
    }

    #[test]
    fn tag_moves_to_the_new_image_and_survives_reload() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut idx = ImageIndex::load(dir.path()).expect("load");
        idx.upsert(rec(1, &["docker.io/library/app:v1"]))
            .expect("first");
        idx.upsert(rec(2, &["docker.io/library/app:v1"]))
            .expect("second");
        assert_eq!(
            idx.lookup("app:v1").map(|x| x.id.clone()),
            Some(Digest::of(&[2]))
        );
        let old = idx
            .lookup(Digest::of(&[1]).as_str())
            .expect("old image stays, untagged");
        assert!(old.repo_tags.is_empty());
        let idx = ImageIndex::load(dir.path()).expect("reload");
        assert_eq!(
            idx.lookup("app:v1").map(|x| x.id.clone()),
            Some(Digest::of(&[2]))
        );
        assert_eq!(idx.len(), 2);
    }

    #[test]
    fn remove_drops_every_name_and_is_idempotent() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut idx = ImageIndex::load(dir.path()).expect("load");
        let r = idx
            .upsert(rec(1, &["docker.io/library/a:1", "docker.io/library/b:2"]))
            .expect("up");
        assert!(idx.remove(&r.id).expect("remove").is_some());
        assert!(idx.lookup("a:1").is_none() && idx.lookup("b:2").is_none());
        assert!(idx.remove(&r.id).expect("second remove").is_none());
        assert!(ImageIndex::load(dir.path()).expect("reload").is_empty());
    }

    #[test]
    fn names_are_added_and_removed_one_at_a_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut idx = ImageIndex::load(dir.path()).expect("load");
        let a = idx.upsert(rec(1, &["docker.io/library/a:1"])).expect("a");
        let b = idx.upsert(rec(2, &["docker.io/library/b:1"])).expect("b");
        let r = |s: &str| Reference::parse(s).expect("ref");
        idx.add_name(&a.id, &r("example.test/a:2")).expect("tag");
        let by_digest = r(&format!("example.test/a@{}", a.manifest_digest));
        idx.add_name(&a.id, &by_digest).expect("digest name");
        let wrong = r(&format!("example.test/a@{}", Digest::of(b"other")));
        let e = idx.add_name(&a.id, &wrong).expect_err("foreign digest");
        assert!(e.to_string().contains("not sha256:"), "{e}");
        // A name another image holds moves (the caller checks --force first).
        idx.add_name(&a.id, &r("b:1")).expect("take b:1");
        assert!(idx.named(&r("b:1")).is_some_and(|x| x.id == a.id));
        assert!(idx
            .lookup(b.id.as_str())
            .expect("b stays")
            .repo_tags
            .is_empty());
        assert!(idx.named(&r("a")).is_none(), "exact names only: a:latest");
        let (img, gone) = idx.remove_name(&r("a:1")).expect("rm").expect("found");
        assert!(!gone && !img.repo_tags.contains(&"docker.io/library/a:1".to_string()));
        assert!(idx.remove_name(&r("a:1")).expect("again").is_none());
        let reloaded = ImageIndex::load(dir.path()).expect("reload");
        assert!(reloaded.named(&r("a:1")).is_none() && reloaded.named(&by_digest).is_some());
        for n in ["example.test/a:2", "b:1"] {
            assert!(!idx.remove_name(&r(n)).expect("rm").expect("found").1);
        }
        let (_, gone) = idx.remove_name(&by_digest).expect("rm").expect("found");
        assert!(gone, "the last name takes the image");
        assert!(idx.lookup(a.id.as_str()).is_none());
    }

    #[test]
    fn unreadable_record_is_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::write(dir.path().join("bad.json"), b"{not json").expect("write");
        assert!(ImageIndex::load(dir.path()).expect("load").is_empty());
    }
}
