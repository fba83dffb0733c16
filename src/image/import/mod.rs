//! Imports OCI image-layout tars and docker-archive tars (`docker save`) into the store, offline.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;

use crate::error::{Error, Result, ResultExt};
use crate::image::content::{ContentStore, MAX_SMALL_BLOB};
use crate::image::digest::{Digest, Hasher};
use crate::image::index::ImageRecord;
use crate::image::manifest::{media, Descriptor, Document, ImageConfig, Manifest, Platform};
use crate::image::reference::Reference;
use crate::image::service::{Images, NewImage};

/// Annotation holding a full image name (containerd's export).
const ANNOTATION_IMAGE_NAME: &str = "io.containerd.image.name";
/// Annotation holding a tag or a full name (OCI).
const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// What to import and how to name it.
#[derive(Debug, Clone, Default)]
pub struct ImportOptions {
    /// Repository to prefix bare OCI ref names (`latest`) with, e.g. `docker.io/library/busybox`.
    pub base_name: Option<String>,
    /// Extra full references to give every imported image.
    pub tags: Vec<String>,
}

/// A tar archive with a name → (offset, size) table, read with seeks.
struct Archive {
    file: File,
    entries: HashMap<String, (u64, u64)>,
    path: PathBuf,
}

impl Archive {
    fn open(path: &Path) -> Result<Archive> {
        let file = File::open(path).ctx(|| format!("open {}", path.display()))?;
        let mut entries = HashMap::new();
        let mut ar = tar::Archive::new(&file);
        for e in ar
            .entries()
            .ctx(|| format!("{}: not a tar archive", path.display()))?
        {
            let e = e.ctx(|| format!("{}: read tar entry", path.display()))?;
            if !e.header().entry_type().is_file() {
                continue;
            }
            let name = e.path().ctx(|| format!("{}: entry name", path.display()))?;
            let name = name.to_string_lossy().trim_start_matches("./").to_string();
            entries.insert(name, (e.raw_file_position(), e.size()));
        }
        Ok(Archive {
            file,
            entries,
            path: path.to_path_buf(),
        })
    }

    fn has(&self, name: &str) -> bool {
        self.entries.contains_key(name)
    }

    fn reader(&self, name: &str) -> Result<impl Read + '_> {
        let (off, size) = *self.entries.get(name).ok_or_else(|| {
            Error::invalid(format!(
                "{}: archive has no entry {name:?}",
                self.path.display()
            ))
        })?;
        let mut f = &self.file;
        f.seek(SeekFrom::Start(off))?;
        Ok(f.take(size))
    }

    fn read_small(&self, name: &str) -> Result<Vec<u8>> {
        let mut buf = Vec::new();
        self.reader(name)?
            .take(MAX_SMALL_BLOB + 1)
            .read_to_end(&mut buf)?;
        if buf.len() as u64 > MAX_SMALL_BLOB {
            return Err(Error::invalid(format!(
                "{}: {name} is too large",
                self.path.display()
            )));
        }
        Ok(buf)
    }

    fn size(&self, name: &str) -> Option<u64> {
        self.entries.get(name).map(|e| e.1)
    }

    /// Copies entry `name` into the content store as `digest`, verified.
    fn copy_blob(&self, name: &str, digest: &Digest, content: &ContentStore) -> Result<()> {
        if content.contains(digest) {
            return Ok(());
        }
        let mut w = content.ingest(digest, self.size(name))?;
        let mut r = self.reader(name)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                break;
            }
            w.write(&buf[..n])?;
        }
        w.commit()
            .map_err(|e| e.context(format!("archive entry {name}")))
    }

    /// The sha256 of entry `name`.
    fn digest_of(&self, name: &str) -> Result<Digest> {
        let mut h = Hasher::new();
        let mut r = self.reader(name)?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = r.read(&mut buf)?;
            if n == 0 {
                return Ok(h.finish());
            }
            h.update(&buf[..n]);
        }
    }

    fn magic(&self, name: &str) -> Result<[u8; 4]> {
        let mut m = [0u8; 4];
        let mut r = self.reader(name)?;
        let _ = r.read(&mut m)?;
        Ok(m)
    }
}

/// Decompresses a gzip archive to a temp file next to the store so it can be read with seeks.
fn plain_tar(path: &Path, tmp_dir: &Path) -> Result<Option<tempfile_guard::TempFile>> {
    let mut magic = [0u8; 2];
    File::open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .ctx(|| format!("read {}", path.display()))?;
    if magic != [0x1f, 0x8b] {
        return Ok(None);
    }
    let tmp = tempfile_guard::TempFile::new(tmp_dir)?;
    let mut out = File::create(tmp.path())?;
    let mut gz = flate2::read::MultiGzDecoder::new(File::open(path)?);
    io::copy(&mut gz, &mut out).ctx(|| format!("decompress {}", path.display()))?;
    Ok(Some(tmp))
}

mod tempfile_guard {
    //! A temp file removed on drop.
    use std::path::{Path, PathBuf};

    pub struct TempFile(PathBuf);
    impl TempFile {
        pub fn new(dir: &Path) -> crate::error::Result<Self> {
            std::fs::create_dir_all(dir)?;
            Ok(TempFile(dir.join(format!(
                "import-{:016x}.tar",
                rand::random::<u64>()
            ))))
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }
    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
}

/// Imports every image in the archive at `path`; returns the stored images.
pub async fn import(
    images: &Arc<Images>,
    path: &Path,
    opts: ImportOptions,
) -> Result<Vec<Arc<ImageRecord>>> {
    let _busy = images.busy().await;
    let content = images.content().clone();
    let path = path.to_path_buf();
    let tmp_dir = images.root().join("tmp");
    let news = tokio::task::spawn_blocking(move || -> Result<Vec<NewImage>> {
        let unpacked = plain_tar(&path, &tmp_dir)?;
        let ar = Archive::open(unpacked.as_ref().map(|t| t.path()).unwrap_or(&path))?;
        if ar.has("index.json") && ar.has("oci-layout") {
            oci_layout(&ar, &content, &opts)
        } else if ar.has("manifest.json") {
            docker_archive(&ar, &content, &opts)
        } else {
            Err(Error::invalid(format!(
                "{}: neither an OCI image layout (index.json, oci-layout) nor a docker archive (manifest.json)",
                path.display()
            )))
        }
    })
    .await
    .map_err(|e| Error::internal(format!("import task: {e}")))??;
    let mut out = Vec::new();
    for n in news {
        out.push(images.register_now(n).await?);
    }
    Ok(out)
}

fn names_for(
    annotations: &std::collections::BTreeMap<String, String>,
    opts: &ImportOptions,
) -> Result<Vec<Reference>> {
    let mut names = Vec::new();
    if let Some(full) = annotations.get(ANNOTATION_IMAGE_NAME) {
        names.push(Reference::parse(full)?);
    } else if let Some(r) = annotations.get(ANNOTATION_REF_NAME) {
        if r.contains('/') {
            names.push(Reference::parse(r)?);
        } else if let Some(base) = &opts.base_name {
            names.push(Reference::parse(&format!("{base}:{r}"))?);
        }
    }
    for t in &opts.tags {
        names.push(Reference::parse(t)?);
    }
    Ok(names)
}

fn blob_name(d: &Digest) -> String {
    format!("blobs/sha256/{}", d.hex())
}

fn oci_layout(ar: &Archive, content: &ContentStore, opts: &ImportOptions) -> Result<Vec<NewImage>> {
    let index_bytes = ar.read_small("index.json")?;
    let Document::Index(index) =
        Document::parse(media::OCI_INDEX, &index_bytes).map_err(|e| e.context("index.json"))?
    else {
        return Err(Error::invalid("index.json is not an image index"));
    };
    let mut out = Vec::new();
    for top in &index.manifests {
        let names = names_for(&top.annotations, opts)?;
        let (desc, index_digest) = select_manifest(ar, content, top)?;
        let bytes = ar.read_small(&blob_name(&desc.digest))?;
        if Digest::of(&bytes) != desc.digest {
            return Err(Error::invalid(format!(
                "manifest {}: digest mismatch",
                desc.digest
            )));
        }
        let Document::Manifest(manifest) = Document::parse(&desc.media_type, &bytes)? else {
            return Err(Error::invalid(format!(
                "{}: nested index not supported",
                desc.digest
            )));
        };
        for l in &manifest.layers {
            crate::image::manifest::layer_compression(&l.media_type)
                .map_err(|e| e.context(format!("layer {}", l.digest)))?;
            ar.copy_blob(&blob_name(&l.digest), &l.digest, content)?;
        }
        ar.copy_blob(
            &blob_name(&manifest.config.digest),
            &manifest.config.digest,
            content,
        )?;
        content.put(&desc.digest, &bytes)?;
        let config: ImageConfig =
            serde_json::from_slice(&content.read(&manifest.config.digest)?)
                .map_err(|e| Error::invalid(format!("config {}: {e}", manifest.config.digest)))?;
        out.push(new_image(
            names,
            desc.digest.clone(),
            manifest,
            index_digest,
            config,
        ));
    }
    Ok(out)
}

/// Follows an index entry to the manifest for this platform, storing the index on the way.
fn select_manifest(
    ar: &Archive,
    content: &ContentStore,
    top: &Descriptor,
) -> Result<(Descriptor, Option<Digest>)> {
    if top.media_type != media::OCI_INDEX && top.media_type != media::DOCKER_LIST {
        return Ok((top.clone(), None));
    }
    let bytes = ar.read_small(&blob_name(&top.digest))?;
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
    content.put(&top.digest, &bytes)?;
    Ok((pick, Some(top.digest.clone())))
}

fn new_image(
    names: Vec<Reference>,
    manifest_digest: Digest,
    manifest: Manifest,
    index_digest: Option<Digest>,
    config: ImageConfig,
) -> NewImage {
    let tags = names.iter().filter_map(Reference::tagged_string).collect();
    let by = index_digest.as_ref().unwrap_or(&manifest_digest);
    let mut digests: Vec<String> = names.iter().map(|n| n.digested_string(by)).collect();
    digests.dedup();
    NewImage {
        tags,
        digests,
        manifest_digest,
        manifest,
        index_digest,
        config,
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerEntry {
    config: String,
    #[serde(default)]
    repo_tags: Option<Vec<String>>,
    layers: Vec<String>,
}

fn docker_archive(
    ar: &Archive,
    content: &ContentStore,
    opts: &ImportOptions,
) -> Result<Vec<NewImage>> {
    let entries: Vec<DockerEntry> = serde_json::from_slice(&ar.read_small("manifest.json")?)
        .map_err(|e| Error::invalid(format!("manifest.json: {e}")))?;
    let mut out = Vec::new();
    for e in entries {
        let config_bytes = ar.read_small(&e.config)?;
        let config_digest = Digest::of(&config_bytes);
        let config: ImageConfig = serde_json::from_slice(&config_bytes)
            .map_err(|err| Error::invalid(format!("config {}: {err}", e.config)))?;
        let mut layers = Vec::new();
        for name in &e.layers {
            let digest = ar.digest_of(name)?;
            let media_type = match ar.magic(name)? {
                [0x1f, 0x8b, ..] => media::OCI_LAYER_GZIP,
                [0x28, 0xb5, 0x2f, 0xfd] => media::OCI_LAYER_ZSTD,
                _ => media::OCI_LAYER,
            };
            ar.copy_blob(name, &digest, content)?;
            layers.push(Descriptor {
                media_type: media_type.to_string(),
                size: ar.size(name).unwrap_or_default(),
                digest,
                platform: None,
                annotations: Default::default(),
            });
        }
        content.put(&config_digest, &config_bytes)?;
        let manifest = Manifest {
            schema_version: 2,
            media_type: Some(media::OCI_MANIFEST.to_string()),
            config: Descriptor {
                media_type: media::OCI_CONFIG.to_string(),
                digest: config_digest,
                size: config_bytes.len() as u64,
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
            names.push(Reference::parse(t)?);
        }
        for t in &opts.tags {
            names.push(Reference::parse(t)?);
        }
        out.push(new_image(names, manifest_digest, manifest, None, config));
    }
    Ok(out)
}
