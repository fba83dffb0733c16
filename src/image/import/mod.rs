//! Imports OCI image-layout tars and docker-archive tars (`docker save`, `podman save`, skopeo) into the store, offline, in one streaming pass.

mod archive;
mod layout;
pub mod naming;

use std::io::Read;
use std::path::Path;
use std::sync::Arc;

use crate::error::{Error, Result, ResultExt};
use crate::image::digest::Digest;
use crate::image::index::ImageRecord;
use crate::image::reference::Reference;
use crate::image::service::{Images, NewImage};

pub use naming::{CtrNaming, Naming};

/// An image an import stored.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The stored image (with every name it has, older ones too).
    pub record: Arc<ImageRecord>,
    /// The names this import gave it, in the order the archive lists them.
    pub names: Vec<String>,
}

/// Imports every image of the archive file at `path`.
pub async fn import_file(
    images: &Arc<Images>,
    path: &Path,
    naming: Naming,
) -> Result<Vec<Imported>> {
    let file = std::fs::File::open(path).ctx(|| format!("open {}", path.display()))?;
    import(images, file, path.display().to_string(), naming).await
}

/// Imports every image of the archive `input` reads (a file, or a stream from a client: read
/// once, start to end, each blob going straight into the content store); `what` names it in
/// errors.
pub async fn import(
    images: &Arc<Images>,
    input: impl Read + Send + 'static,
    what: String,
    naming: Naming,
) -> Result<Vec<Imported>> {
    let _busy = images.busy().await;
    let content = images.content().clone();
    let news = tokio::task::spawn_blocking(move || -> Result<Vec<(NewImage, Vec<String>)>> {
        let scanned = archive::scan(input, &content, &what)?;
        let found = layout::images(&scanned, &content, &what)?;
        name_all(found, &naming)
    })
    .await
    .map_err(|e| Error::internal(format!("import task: {e}")))??;
    let mut out = Vec::new();
    for (new, names) in news {
        let record = images.register_now(new).await?;
        out.push(Imported { record, names });
    }
    Ok(out)
}

/// Names the images found; drops those left without a name where `naming` says so.
fn name_all(found: Vec<layout::Found>, naming: &Naming) -> Result<Vec<(NewImage, Vec<String>)>> {
    let extra = naming.extra()?;
    let mut out = Vec::new();
    for f in found {
        let mut names: Vec<Reference> = Vec::new();
        for archive_name in &f.names {
            for n in naming.names(archive_name, &f.entry_digest)? {
                if !names.contains(&n) {
                    names.push(n);
                }
            }
        }
        names.extend(extra.iter().cloned());
        if names.is_empty() && !naming.keeps_unnamed() {
            continue;
        }
        out.push(new_image(names, f));
    }
    if let Naming::Ctr(c) = naming {
        if out.is_empty() {
            return Err(naming::no_name_found());
        }
        if let Some(index_name) = &c.index_name {
            if out.len() != 1 {
                return Err(Error::invalid(format!(
                    "--index-name {index_name:?}: the archive holds {} images; bosun names \
                     images, not archive indexes (import it without --index-name)",
                    out.len()
                )));
            }
            let r = Reference::parse(index_name).map_err(|e| e.context("--index-name"))?;
            let (new, names) = &mut out[0];
            let by = new
                .index_digest
                .clone()
                .unwrap_or(new.manifest_digest.clone());
            add_name(new, names, &r, &by);
        }
    }
    Ok(out)
}

/// Adds `r` to an image whose repo digests are by `by`.
fn add_name(new: &mut NewImage, names: &mut Vec<String>, r: &Reference, by: &Digest) {
    if let Some(t) = r.tagged_string() {
        if !new.tags.contains(&t) {
            new.tags.push(t);
        }
    }
    let d = r.digested_string(by);
    if !new.digests.contains(&d) {
        new.digests.push(d);
    }
    let shown = shown_name(r, by);
    if !names.contains(&shown) {
        names.push(shown);
    }
}

/// The name as `ctr images ls` shows it: `name:tag`, or `name@digest` for a digest name.
fn shown_name(r: &Reference, by: &Digest) -> String {
    r.tagged_string().unwrap_or_else(|| r.digested_string(by))
}

fn new_image(refs: Vec<Reference>, f: layout::Found) -> (NewImage, Vec<String>) {
    // The repo digest is what a user pulls by: the index when there was one.
    let by = f.index_digest.clone().unwrap_or(f.manifest_digest.clone());
    let mut new = NewImage {
        tags: Vec::new(),
        digests: Vec::new(),
        manifest_digest: f.manifest_digest,
        manifest: f.manifest,
        index_digest: f.index_digest,
        config: f.config,
    };
    let mut names = Vec::new();
    for r in &refs {
        add_name(&mut new, &mut names, r, &by);
    }
    (new, names)
}
