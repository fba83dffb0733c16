//! One sequential pass over an image archive (a file or a pipe): every blob straight into the content store, the small index files kept.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read};

use crate::error::{Error, Result, ResultExt};
use crate::image::content::{ContentStore, MAX_SMALL_BLOB};
use crate::image::digest::Digest;

/// What one pass over an archive stored and kept: enough to name its images without reading
/// it again (a stream from stdin can be read once).
#[derive(Debug, Default)]
pub(super) struct Scanned {
    /// `oci-layout` was present.
    pub oci_layout: bool,
    /// `index.json` (OCI image layout).
    pub index_json: Option<Vec<u8>>,
    /// `manifest.json` (docker-archive).
    pub manifest_json: Option<Vec<u8>>,
    /// Every other regular file, stored as a blob: entry name → (digest, size).
    pub blobs: HashMap<String, (Digest, u64)>,
    /// Symbolic links between entries (`docker save` links repeated layers): name → target.
    pub links: HashMap<String, String>,
}

impl Scanned {
    /// The blob stored for entry `name`, following links.
    pub fn blob(&self, name: &str) -> Option<&(Digest, u64)> {
        let mut name = clean(name);
        for _ in 0..16 {
            if let Some(b) = self.blobs.get(&name) {
                return Some(b);
            }
            name = self.links.get(&name)?.clone();
        }
        None
    }
}

/// Reads the archive `input` (tar, gzip allowed) to its end, storing each regular file in
/// `content`. Entries named `blobs/sha256/<hex>` are verified against their name as they are
/// stored; legacy docker metadata (`repositories`, `<layer>/json`, `<layer>/VERSION`) is skipped.
/// `what` names the archive in errors.
pub(super) fn scan(input: impl Read, content: &ContentStore, what: &str) -> Result<Scanned> {
    let mut input = BufReader::with_capacity(1 << 20, input);
    let head = input.fill_buf().ctx(|| format!("read {what}"))?;
    let gzip = head.starts_with(&[0x1f, 0x8b]);
    let plain: Box<dyn Read> = if gzip {
        Box::new(flate2::read::MultiGzDecoder::new(input))
    } else {
        Box::new(input)
    };
    let mut out = Scanned::default();
    let mut ar = tar::Archive::new(plain);
    for entry in ar.entries().ctx(|| format!("{what}: not a tar archive"))? {
        let mut entry = entry.ctx(|| format!("{what}: read tar entry"))?;
        let path = entry
            .path()
            .ctx(|| format!("{what}: entry name"))?
            .to_string_lossy()
            .into_owned();
        let name = clean(&path);
        let kind = entry.header().entry_type();
        if kind.is_symlink() || kind.is_hard_link() {
            if let Ok(Some(target)) = entry.link_name() {
                let target = target.to_string_lossy();
                let resolved = if kind.is_symlink() {
                    // Relative to the link's own directory, as the file system would.
                    let dir = name.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                    clean(&format!("{dir}/{target}"))
                } else {
                    clean(&target)
                };
                out.links.insert(name, resolved);
            }
            continue;
        }
        if !kind.is_file() {
            continue;
        }
        let size = entry.size();
        let entry_err = |e: Error| e.context(format!("{what}: entry {name}"));
        match name.as_str() {
            "oci-layout" => {
                small(&mut entry, size).map_err(entry_err)?;
                out.oci_layout = true;
            }
            "index.json" => out.index_json = Some(small(&mut entry, size).map_err(entry_err)?),
            "manifest.json" => {
                out.manifest_json = Some(small(&mut entry, size).map_err(entry_err)?)
            }
            n if is_legacy_metadata(n) => {}
            n => {
                let digest = match named_digest(n) {
                    Some(d) => store_named(&mut entry, &d, size, content),
                    None => content.put_reader(&mut entry, size),
                }
                .map_err(entry_err)?;
                out.blobs.insert(name, (digest, size));
            }
        }
    }
    Ok(out)
}

/// A path as it names an entry: no `./`, no empty or `.` components, `..` resolved.
fn clean(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    parts.join("/")
}

/// Docker's v1 metadata beside each layer and the repositories file: nothing an image needs.
fn is_legacy_metadata(name: &str) -> bool {
    name == "repositories" || name.ends_with("/json") || name.ends_with("/VERSION")
}

/// The digest an OCI layout's entry name promises (`blobs/sha256/<hex>`).
fn named_digest(name: &str) -> Option<Digest> {
    let hex = name.strip_prefix("blobs/sha256/")?;
    Digest::parse(&format!("sha256:{hex}")).ok()
}

/// Stores an entry that must hash to `expected` (skipped when the store has it already).
fn store_named(
    entry: &mut dyn Read,
    expected: &Digest,
    size: u64,
    content: &ContentStore,
) -> Result<Digest> {
    if content.contains(expected) {
        std::io::copy(entry, &mut std::io::sink())?;
        return Ok(expected.clone());
    }
    let mut w = content.ingest(expected, Some(size))?;
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = entry.read(&mut buf)?;
        if n == 0 {
            break;
        }
        w.write(&buf[..n])?;
    }
    w.commit()?;
    Ok(expected.clone())
}

/// A small file (index, manifest list, layout marker) read whole.
fn small(entry: &mut dyn Read, size: u64) -> Result<Vec<u8>> {
    if size > MAX_SMALL_BLOB {
        return Err(Error::invalid(format!(
            "{size} bytes, more than the {MAX_SMALL_BLOB} allowed"
        )));
    }
    let mut buf = Vec::with_capacity(size as usize);
    entry.take(MAX_SMALL_BLOB + 1).read_to_end(&mut buf)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tar of `(name, bytes)` files and `(name, target)` symlinks.
    pub(crate) fn tar_of(files: &[(&str, &[u8])], links: &[(&str, &str)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, *data).expect("append");
        }
        for (name, target) in links {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(tar::EntryType::Symlink);
            h.set_size(0);
            b.append_link(&mut h, name, target).expect("link");
        }
        b.into_inner().expect("tar")
    }

    #[test]
    fn one_pass_stores_every_blob_and_keeps_the_small_files() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let layer = b"layer".as_slice();
        let named = format!("blobs/sha256/{}", Digest::of(layer).hex());
        let ar = tar_of(
            &[
                ("./manifest.json", b"[]"),
                ("abc/layer.tar", layer),
                ("abc/json", b"{}"),
                ("abc/VERSION", b"1.0"),
                ("repositories", b"{}"),
                (&named, layer),
                ("cfg.json", b"{\"a\":1}"),
            ],
            &[("def/layer.tar", "../abc/layer.tar")],
        );
        let s = scan(&ar[..], &cs, "test.tar").expect("scan");
        assert_eq!(s.manifest_json.as_deref(), Some(&b"[]"[..]));
        assert!(!s.oci_layout && s.index_json.is_none());
        assert_eq!(s.blob("abc/layer.tar"), Some(&(Digest::of(layer), 5)));
        assert_eq!(s.blob("./def/layer.tar"), Some(&(Digest::of(layer), 5)));
        assert_eq!(s.blob(&named), Some(&(Digest::of(layer), 5)));
        assert!(s.blob("abc/json").is_none() && s.blob("repositories").is_none());
        let mut stored = cs.list().expect("list");
        stored.sort();
        let mut want = vec![Digest::of(layer), Digest::of(b"{\"a\":1}")];
        want.sort();
        assert_eq!(stored, want);
    }

    #[test]
    fn a_gzipped_archive_streams_too() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let ar = tar_of(&[("oci-layout", b"{}"), ("index.json", b"{}")], &[]);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&ar).expect("gzip");
        let s = scan(&gz.finish().expect("gzip")[..], &cs, "test.tar.gz").expect("scan");
        assert!(s.oci_layout && s.index_json.is_some());
    }

    #[test]
    fn a_blob_that_does_not_match_its_name_is_refused_naming_the_entry() {
        let dir = tempfile::tempdir().expect("tempdir");
        let cs = ContentStore::open(dir.path()).expect("open");
        let name = format!("blobs/sha256/{}", Digest::of(b"one").hex());
        let ar = tar_of(&[(&name, b"two")], &[]);
        let e = scan(&ar[..], &cs, "bad.tar").expect_err("mismatch");
        assert!(
            e.to_string().contains("bad.tar: entry blobs/sha256/")
                && e.to_string().contains("digest mismatch"),
            "{e}"
        );
        assert!(cs.list().expect("list").is_empty());
        let e = scan(&b"not a tar at all, not even close"[..], &cs, "junk").expect_err("junk");
        assert!(e.to_string().contains("junk"), "{e}");
    }

    #[test]
    fn entry_names_are_cleaned() {
        assert_eq!(clean("./a//b/./c"), "a/b/c");
        assert_eq!(clean("a/b/../c"), "a/c");
        assert_eq!(clean("../../x"), "x");
    }
}
