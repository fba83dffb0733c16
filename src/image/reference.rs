//! Image references: the docker/distribution grammar plus docker/kubelet normalisation.

use std::fmt;
use std::net::Ipv6Addr;

use crate::error::{Error, Result};
use crate::image::digest::Digest;

/// The registry an unqualified name belongs to.
pub const DEFAULT_DOMAIN: &str = "docker.io";
/// Old spelling of [`DEFAULT_DOMAIN`], normalised away (docker/distribution `legacyDefaultDomain`).
const LEGACY_DEFAULT_DOMAIN: &str = "index.docker.io";
/// Prefix of single-component Docker Hub names (`busybox` → `library/busybox`).
const OFFICIAL_REPO_PREFIX: &str = "library/";
/// The tag added when neither tag nor digest is given.
pub const DEFAULT_TAG: &str = "latest";
/// docker/distribution `NameTotalLengthMax`.
const NAME_MAX: usize = 255;
/// docker/distribution tag grammar allows 128 characters.
const TAG_MAX: usize = 128;

/// A fully normalised image reference: `domain/path[:tag][@digest]`.
///
/// When both tag and digest are present the digest decides what is fetched; the tag is kept
/// for display and for recording, as docker and containerd do.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    domain: String,
    path: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses `s` and normalises it (`busybox` → `docker.io/library/busybox:latest`).
    pub fn parse(s: &str) -> Result<Reference> {
        parse(s).map_err(|why| {
            Error::invalid(format!(
                "image reference {:?}: {why}",
                crate::error::echo(s)
            ))
        })
    }

    /// The registry host, with port if any (`docker.io`, `127.0.0.1:5000`, `[::1]:5000`).
    pub fn domain(&self) -> &str {
        &self.domain
    }

    /// The repository path inside the registry (`library/busybox`).
    pub fn repository(&self) -> &str {
        &self.path
    }

    /// `domain/path` without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.domain, self.path)
    }

    /// The tag, if any (`latest` when the input named neither tag nor digest).
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest, if the reference pins one.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same reference pinned to `digest` (the tag is kept).
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            digest: Some(digest),
            ..self.clone()
        }
    }

    /// `name:tag`, when the reference has a tag.
    pub fn tagged_string(&self) -> Option<String> {
        self.tag.as_ref().map(|t| format!("{}:{t}", self.name()))
    }

    /// `name@digest`.
    pub fn digested_string(&self, digest: &Digest) -> String {
        format!("{}@{digest}", self.name())
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.domain, self.path)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Reference {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Reference::parse(s)
    }
}

/// The grammar; errors are the bare reason, [`Reference::parse`] names the input.
fn parse(s: &str) -> std::result::Result<Reference, String> {
    if s.is_empty() {
        return Err("empty reference".into());
    }
    // docker/distribution ParseNormalizedNamed: a bare 64-hex string is an image id, not a name.
    if s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return Err("cannot use a 64-character hexadecimal string as a repository name".into());
    }
    let (rest, digest) = match s.split_once('@') {
        Some((rest, d)) => (rest, Some(Digest::parse(d).map_err(|e| e.to_string())?)),
        None => (s, None),
    };
    // A tag is a ':' after the last '/', so `localhost:5000/x` has none.
    let (name, tag) = match rest.rfind(':') {
        Some(i) if !rest[i..].contains('/') => (&rest[..i], Some(&rest[i + 1..])),
        _ => (rest, None),
    };
    if let Some(t) = tag {
        check_tag(t)?;
    }
    let (domain, path) = split_domain(name);
    check_domain(&domain)?;
    check_path(&path)?;
    if name.len() > NAME_MAX {
        return Err(format!("repository name longer than {NAME_MAX} characters"));
    }
    let tag = match (tag, &digest) {
        (Some(t), _) => Some(t.to_string()),
        (None, Some(_)) => None,
        (None, None) => Some(DEFAULT_TAG.to_string()),
    };
    Ok(Reference {
        domain,
        path,
        tag,
        digest,
    })
}

/// docker/distribution `splitDockerDomain`: the first component is a registry only when it
/// looks like one (has `.` or `:`, is `localhost`, or has uppercase letters).
fn split_domain(name: &str) -> (String, String) {
    let (mut domain, mut path) = match name.split_once('/') {
        Some((first, rest))
            if first.contains(['.', ':'])
                || first == "localhost"
                || first.bytes().any(|b| b.is_ascii_uppercase()) =>
        {
            (first.to_string(), rest.to_string())
        }
        _ => (DEFAULT_DOMAIN.to_string(), name.to_string()),
    };
    if domain == LEGACY_DEFAULT_DOMAIN {
        domain = DEFAULT_DOMAIN.to_string();
    }
    if domain == DEFAULT_DOMAIN && !path.contains('/') {
        path = format!("{OFFICIAL_REPO_PREFIX}{path}");
    }
    (domain, path)
}

/// `host[:port]` where host is a DNS name, an IPv4 address or a bracketed IPv6 address.
fn check_domain(domain: &str) -> std::result::Result<(), String> {
    let bad = || format!("invalid registry host {domain:?}");
    let (host, port) = if let Some(v6) = domain.strip_prefix('[') {
        let (addr, after) = v6.split_once(']').ok_or_else(bad)?;
        addr.parse::<Ipv6Addr>().map_err(|_| bad())?;
        match after {
            "" => ("", None),
            p => (addr, Some(p.strip_prefix(':').ok_or_else(bad)?)),
        }
    } else {
        match domain.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (domain, None),
        }
    };
    if let Some(p) = port {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
    }
    if domain.starts_with('[') {
        return Ok(());
    }
    // domain-component := [a-zA-Z0-9] | [a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]
    let component_ok = |c: &str| {
        !c.is_empty()
            && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            && !c.starts_with('-')
            && !c.ends_with('-')
    };
    if host.split('.').all(component_ok) {
        Ok(())
    } else {
        Err(bad())
    }
}

/// path-component := [a-z0-9]+ (separator [a-z0-9]+)*, separator := `.` | `_` | `__` | `-`+
fn check_path(path: &str) -> std::result::Result<(), String> {
    if path.bytes().any(|b| b.is_ascii_uppercase()) {
        return Err("repository name must be lowercase".into());
    }
    for c in path.split('/') {
        if !path_component_ok(c) {
            return Err(format!("invalid repository path component {c:?}"));
        }
    }
    Ok(())
}

fn path_component_ok(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// tag := [\w][\w.-]{0,127}
fn check_tag(t: &str) -> std::result::Result<(), String> {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let ok = !t.is_empty()
        && t.len() <= TAG_MAX
        && t.bytes().next().is_some_and(word)
        && t.bytes().all(|b| word(b) || b == b'.' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!("invalid tag {t:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parse_normalises_like_docker() {
        let at = |n: &str| format!("{n}@{D}");
        let tag_at = |n: &str| format!("{n}:v1@{D}");
        // (input, display, domain, repository, tag)
        #[rustfmt::skip]
        let cases: Vec<(String, String, &str, &str, Option<&str>)> = vec![
            ("busybox".into(), "docker.io/library/busybox:latest".into(), "docker.io", "library/busybox", Some("latest")),
            ("busybox:1.36".into(), "docker.io/library/busybox:1.36".into(), "docker.io", "library/busybox", Some("1.36")),
            ("user/app".into(), "docker.io/user/app:latest".into(), "docker.io", "user/app", Some("latest")),
            ("user/app:v_1.2-rc".into(), "docker.io/user/app:v_1.2-rc".into(), "docker.io", "user/app", Some("v_1.2-rc")),
            ("docker.io/busybox".into(), "docker.io/library/busybox:latest".into(), "docker.io", "library/busybox", Some("latest")),
            ("index.docker.io/busybox".into(), "docker.io/library/busybox:latest".into(), "docker.io", "library/busybox", Some("latest")),
            ("index.docker.io/user/app:x".into(), "docker.io/user/app:x".into(), "docker.io", "user/app", Some("x")),
            ("docker.io/library/busybox:latest".into(), "docker.io/library/busybox:latest".into(), "docker.io", "library/busybox", Some("latest")),
            ("localhost/x".into(), "localhost/x:latest".into(), "localhost", "x", Some("latest")),
            ("localhost:5000/x".into(), "localhost:5000/x:latest".into(), "localhost:5000", "x", Some("latest")),
            ("127.0.0.1:5000/a/b:tag".into(), "127.0.0.1:5000/a/b:tag".into(), "127.0.0.1:5000", "a/b", Some("tag")),
            ("[::1]:5000/x".into(), "[::1]:5000/x:latest".into(), "[::1]:5000", "x", Some("latest")),
            ("[::1]/x:y".into(), "[::1]/x:y".into(), "[::1]", "x", Some("y")),
            ("quay.io/a/b/c".into(), "quay.io/a/b/c:latest".into(), "quay.io", "a/b/c", Some("latest")),
            ("Registry.Example/app".into(), "Registry.Example/app:latest".into(), "Registry.Example", "app", Some("latest")),
            ("my-reg.example:443/a.b/c__d/e---f:1".into(), "my-reg.example:443/a.b/c__d/e---f:1".into(), "my-reg.example:443", "a.b/c__d/e---f", Some("1")),
            (at("busybox"), format!("docker.io/library/busybox@{D}"), "docker.io", "library/busybox", None),
            (at("127.0.0.1:5000/x"), format!("127.0.0.1:5000/x@{D}"), "127.0.0.1:5000", "x", None),
            (tag_at("busybox"), format!("docker.io/library/busybox:v1@{D}"), "docker.io", "library/busybox", Some("v1")),
            (tag_at("localhost:5000/a/b"), format!("localhost:5000/a/b:v1@{D}"), "localhost:5000", "a/b", Some("v1")),
        ];
        for (input, display, domain, repo, tag) in cases {
            let r = Reference::parse(&input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(r.to_string(), display, "{input}");
            assert_eq!(r.domain(), domain, "{input}");
            assert_eq!(r.repository(), repo, "{input}");
            assert_eq!(r.tag(), tag, "{input}");
            assert_eq!(r.name(), format!("{domain}/{repo}"), "{input}");
            assert_eq!(r.digest().is_some(), input.contains('@'), "{input}");
            // Normalisation is idempotent.
            assert_eq!(Reference::parse(&display).ok(), Some(r), "{input}");
        }
    }

    #[test]
    fn parse_rejects_malformed_references_naming_them() {
        let long_tag = format!("x:{}", "a".repeat(129));
        let long_name = format!("x/{}", "a".repeat(260));
        let hex64 = "a".repeat(64);
        #[rustfmt::skip]
        let cases: Vec<(&str, &str)> = vec![
            ("", "empty"),
            ("Foo:bar", "lowercase"),
            ("docker.io/User/app", "lowercase"),
            ("busybox:", "invalid tag"),
            ("busybox:-x", "invalid tag"),
            ("busybox:a+b", "invalid tag"),
            (&long_tag, "invalid tag"),
            ("busybox@sha256:abc", "64 lowercase hex"),
            ("busybox@md5:abc", "unsupported algorithm"),
            ("busybox@", "missing algorithm"),
            ("a//b", "path component"),
            ("-a/b", "path component"),
            ("a/b-", "path component"),
            ("a/b...c", "path component"),
            ("a/b_-c", "path component"),
            ("localhost:x/y", "registry host"),
            ("[::1/x", "registry host"),
            ("[zz]:5000/x", "registry host"),
            ("-bad.example/x", "registry host"),
            (&long_name, "longer than"),
            (&hex64, "hexadecimal"),
        ];
        for (input, why) in cases {
            let e = Reference::parse(input).expect_err(input);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{input}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&format!(
                    "image reference {:?}: ",
                    crate::error::echo(input)
                )),
                "{msg}"
            );
            assert!(msg.contains(why), "{input}: {msg}");
        }
    }

    #[test]
    fn accessors_build_the_strings_callers_record() {
        let r = Reference::parse("busybox:1.36").expect("parse");
        let d = Digest::parse(D).expect("digest");
        assert_eq!(
            r.tagged_string().as_deref(),
            Some("docker.io/library/busybox:1.36")
        );
        assert_eq!(
            r.digested_string(&d),
            format!("docker.io/library/busybox@{D}")
        );
        let pinned = r.with_digest(d.clone());
        assert_eq!(pinned.digest(), Some(&d));
        assert_eq!(
            pinned.to_string(),
            format!("docker.io/library/busybox:1.36@{D}")
        );
        let by_digest = Reference::parse(&format!("busybox@{D}")).expect("parse");
        assert_eq!(by_digest.tagged_string(), None);
    }
}
