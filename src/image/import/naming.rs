//! What an imported image is called: bosun's rules, or containerd's `ctr images import` rules (`--base-name`, `--digests`, `import-<date>`).

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::image::digest::Digest;
use crate::image::reference::Reference;

/// Annotation holding a full image name (containerd's export, and every docker-archive tag).
pub const ANNOTATION_IMAGE_NAME: &str = "io.containerd.image.name";
/// Annotation holding a tag or a full name (OCI).
pub const ANNOTATION_REF_NAME: &str = "org.opencontainers.image.ref.name";

/// How the images of an archive are named.
#[derive(Debug, Clone)]
pub enum Naming {
    /// `bosun image import`: full names as they are, bare OCI ref names (`latest`) under
    /// `base_name`, `tags` on every image; an image left without a name is kept by its id.
    Bosun {
        /// Repository for bare ref names, e.g. `docker.io/library/busybox`.
        base_name: Option<String>,
        /// Extra full references for every image.
        tags: Vec<String>,
    },
    /// containerd's `ctr images import` (see [`CtrNaming`]).
    Ctr(CtrNaming),
}

impl Default for Naming {
    fn default() -> Self {
        Naming::Bosun {
            base_name: None,
            tags: Vec::new(),
        }
    }
}

/// containerd's `ctr images import` naming, as its flags set it:
/// - `prefix`: `--base-name`, or `import-<yyyy-mm-dd>` without it (the client's date);
/// - bare OCI ref names become `<prefix>:<ref>`; full names stay, except that with
///   `--base-name` (`filter`) names outside it are dropped;
/// - `--digests`: every image is also `<prefix>@<digest of its archive entry>`, only the
///   images that got no name with `--skip-digest-for-named`;
/// - an image without any name is not imported, and an archive where no image gets a name is
///   refused, as containerd refuses it (`no image name found`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CtrNaming {
    /// `--base-name`, or `import-<date>`.
    pub prefix: String,
    /// `--base-name` was given: only names under it are kept.
    pub filter: bool,
    /// `--digests`.
    pub digests: bool,
    /// `--skip-digest-for-named`.
    pub skip_digest_for_named: bool,
    /// `--index-name`: a name for the archive's one image.
    pub index_name: Option<String>,
}

/// One name an archive gives an image: an OCI index entry's annotations, or one docker-archive
/// `RepoTags` entry (both annotations set, as containerd reads them), or nothing at all.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArchiveName {
    /// `io.containerd.image.name`: a full name.
    pub image_name: Option<String>,
    /// `org.opencontainers.image.ref.name`: a tag, or a full name.
    pub ref_name: Option<String>,
}

impl ArchiveName {
    /// The name an index entry's annotations give.
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> ArchiveName {
        let get = |k: &str| annotations.get(k).filter(|v| !v.is_empty()).cloned();
        ArchiveName {
            image_name: get(ANNOTATION_IMAGE_NAME),
            ref_name: get(ANNOTATION_REF_NAME),
        }
    }

    /// A docker-archive `RepoTags` entry (`busybox:1.36`): normalised, as containerd does.
    pub fn from_repo_tag(tag: &str) -> Result<ArchiveName> {
        let full = Reference::parse(tag)?.to_string();
        let ref_name = full
            .rsplit_once(':')
            .map(|(_, t)| t.to_string())
            .filter(|t| !t.contains('/'));
        Ok(ArchiveName {
            image_name: Some(full),
            ref_name,
        })
    }
}

impl Naming {
    /// The names of an image whose archive entry is `digest`, named by `archive` (an entry
    /// with several names is asked once per name).
    pub fn names(&self, archive: &ArchiveName, digest: &Digest) -> Result<Vec<Reference>> {
        match self {
            Naming::Bosun { base_name, tags: _ } => {
                let name = match (&archive.image_name, &archive.ref_name) {
                    (Some(full), _) => Some(full.clone()),
                    (None, Some(r)) if r.contains('/') => Some(r.clone()),
                    (None, Some(r)) => base_name.as_ref().map(|b| format!("{b}:{r}")),
                    (None, None) => None,
                };
                name.map(|n| Reference::parse(&n)).into_iter().collect()
            }
            Naming::Ctr(c) => c.names(archive, digest),
        }
    }

    /// Names every image gets besides its archive names (`bosun image import --tag`).
    pub fn extra(&self) -> Result<Vec<Reference>> {
        match self {
            Naming::Bosun { tags, .. } => tags.iter().map(|t| Reference::parse(t)).collect(),
            Naming::Ctr(_) => Ok(Vec::new()),
        }
    }

    /// Whether an image without any name is kept (by its id).
    pub fn keeps_unnamed(&self) -> bool {
        matches!(self, Naming::Bosun { .. })
    }
}

impl CtrNaming {
    fn names(&self, archive: &ArchiveName, digest: &Digest) -> Result<Vec<Reference>> {
        let name = match (&archive.image_name, &archive.ref_name) {
            (Some(full), _) => self.keep(full)?.then(|| full.clone()),
            (None, Some(r)) if r.contains(['/', ':', '@']) => self.keep(r)?.then(|| r.clone()),
            (None, Some(r)) => Some(format!("{}:{r}", self.prefix)),
            (None, None) => None,
        };
        let mut out = Vec::new();
        if let Some(n) = &name {
            out.push(Reference::parse(n)?);
        }
        if self.digests && (name.is_none() || !self.skip_digest_for_named) {
            out.push(Reference::parse(&format!("{}@{digest}", self.prefix))?);
        }
        Ok(out)
    }

    /// Whether full name `name` survives `--base-name`: it must be the base name's repository
    /// or below it (`<base>:tag`, `<base>@digest`, `<base>/sub`), both normalised.
    fn keep(&self, name: &str) -> Result<bool> {
        if !self.filter {
            return Ok(true);
        }
        let base = Reference::parse(&self.prefix)
            .map_err(|e| e.context("--base-name"))?
            .name();
        let full = Reference::parse(name)?;
        let full = full.name();
        Ok(full == base || full.starts_with(&format!("{base}/")))
    }
}

/// `import-<yyyy-mm-dd>` for the day `unix_secs` falls on (UTC), containerd's default prefix.
pub fn dated_prefix(unix_secs: i64) -> String {
    let days = unix_secs.div_euclid(86_400);
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("import-{year:04}-{month:02}-{day:02}")
}

/// An archive whose images got no name under ctr's rules is refused, as containerd does.
pub fn no_name_found() -> Error {
    Error::not_found(
        "no image name found in the archive: name its images with --base-name (OCI ref names) \
         or keep them by digest with --digests",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: Vec<Reference>) -> Vec<String> {
        v.into_iter().map(|r| r.to_string()).collect()
    }

    fn ctr(prefix: &str, filter: bool, digests: bool, skip: bool) -> Naming {
        Naming::Ctr(CtrNaming {
            prefix: prefix.into(),
            filter,
            digests,
            skip_digest_for_named: skip,
            index_name: None,
        })
    }

    fn oci(ref_name: &str) -> ArchiveName {
        ArchiveName {
            image_name: None,
            ref_name: Some(ref_name.into()),
        }
    }

    #[test]
    fn ctr_names_bare_refs_under_the_dated_prefix_and_keeps_full_names() {
        let d = Digest::of(b"m");
        let n = ctr("import-2024-05-06", false, false, false);
        assert_eq!(
            strings(n.names(&oci("latest"), &d).expect("names")),
            ["docker.io/library/import-2024-05-06:latest"]
        );
        assert_eq!(
            strings(n.names(&oci("quay.io/a/b:1"), &d).expect("names")),
            ["quay.io/a/b:1"]
        );
        let tagged = ArchiveName::from_repo_tag("busybox:1.36").expect("tag");
        assert_eq!(
            tagged.image_name.as_deref(),
            Some("docker.io/library/busybox:1.36")
        );
        assert_eq!(tagged.ref_name.as_deref(), Some("1.36"));
        assert_eq!(
            strings(n.names(&tagged, &d).expect("names")),
            ["docker.io/library/busybox:1.36"]
        );
        assert!(n
            .names(&ArchiveName::default(), &d)
            .expect("unnamed")
            .is_empty());
        assert!(!n.keeps_unnamed());
    }

    #[test]
    fn ctr_digests_name_every_image_or_only_the_unnamed_ones() {
        let d = Digest::of(b"m");
        let digest_name = format!("docker.io/library/import-2024-05-06@{d}");
        let all = ctr("import-2024-05-06", false, true, false);
        assert_eq!(
            strings(all.names(&ArchiveName::default(), &d).expect("names")),
            std::slice::from_ref(&digest_name)
        );
        assert_eq!(
            strings(all.names(&oci("v1"), &d).expect("names")),
            [
                "docker.io/library/import-2024-05-06:v1".to_string(),
                digest_name.clone()
            ]
        );
        let unnamed_only = ctr("import-2024-05-06", false, true, true);
        assert_eq!(
            strings(unnamed_only.names(&oci("v1"), &d).expect("names")),
            ["docker.io/library/import-2024-05-06:v1"]
        );
        assert_eq!(
            strings(
                unnamed_only
                    .names(&ArchiveName::default(), &d)
                    .expect("names")
            ),
            [digest_name]
        );
    }

    #[test]
    fn ctr_base_name_drops_names_outside_it() {
        let d = Digest::of(b"m");
        let n = ctr("example.test/app", true, true, false);
        assert_eq!(
            strings(n.names(&oci("v2"), &d).expect("names")),
            [
                "example.test/app:v2".to_string(),
                format!("example.test/app@{d}")
            ]
        );
        let other = ArchiveName::from_repo_tag("busybox:latest").expect("tag");
        assert_eq!(
            strings(n.names(&other, &d).expect("names")),
            [format!("example.test/app@{d}")],
            "a name outside --base-name is dropped, the digest name stays"
        );
        let below = ArchiveName::from_repo_tag("example.test/app/sub:1").expect("tag");
        assert_eq!(n.names(&below, &d).expect("names").len(), 2);
        let sibling = ArchiveName::from_repo_tag("example.test/application:1").expect("tag");
        assert_eq!(n.names(&sibling, &d).expect("names").len(), 1);
        // Normalised on both sides: `busybox` is docker.io/library/busybox.
        let n = ctr("busybox", true, false, false);
        assert_eq!(n.names(&other, &d).expect("names").len(), 1);
    }

    #[test]
    fn bosun_names_bare_refs_under_its_base_name_and_keeps_unnamed_images() {
        let d = Digest::of(b"m");
        let n = Naming::Bosun {
            base_name: Some("docker.io/library/busybox".into()),
            tags: vec!["example.test/x:1".into()],
        };
        assert_eq!(
            strings(n.names(&oci("latest"), &d).expect("names")),
            ["docker.io/library/busybox:latest"]
        );
        assert!(n
            .names(&ArchiveName::default(), &d)
            .expect("none")
            .is_empty());
        assert!(n.keeps_unnamed());
        assert_eq!(strings(n.extra().expect("extra")), ["example.test/x:1"]);
        let bare = Naming::default();
        assert!(bare.names(&oci("latest"), &d).expect("no base").is_empty());
    }

    #[test]
    fn bad_names_are_refused_naming_them() {
        let n = ctr("import-2024-05-06", false, false, false);
        let e = n
            .names(&oci("Not/A:Valid:Ref"), &Digest::of(b"m"))
            .expect_err("bad");
        assert!(e.to_string().contains("Not/A:Valid:Ref"), "{e}");
    }

    #[test]
    fn the_dated_prefix_is_the_utc_day() {
        assert_eq!(dated_prefix(0), "import-1970-01-01");
        assert_eq!(dated_prefix(1_714_953_600), "import-2024-05-06");
        assert_eq!(dated_prefix(951_782_400), "import-2000-02-29");
        assert_eq!(dated_prefix(1_735_689_599), "import-2024-12-31");
    }
}
