//! Entry-name normalisation: a tar member name becomes a list of plain components under the root.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use crate::error::{Error, ErrorKind, Result};

/// The longest single path component Linux accepts (`NAME_MAX`).
const NAME_MAX: usize = 255;

/// A normalised entry path: relative to the layer root, without empty, `.` or `..` components.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EntryPath {
    comps: Vec<OsString>,
}

impl EntryPath {
    /// Normalises a raw tar name.
    ///
    /// Leading `/` and `./` are dropped: absolute names are taken relative to the layer root,
    /// as docker and containerd do. `..` is resolved lexically and may never climb above the
    /// root; that is refused rather than clamped, because no honest archiver writes it.
    pub(crate) fn parse(raw: &[u8], max_len: usize) -> Result<Self> {
        if raw.is_empty() {
            return Err(Error::invalid("empty entry name"));
        }
        if raw.contains(&0) {
            return Err(Error::invalid("name contains a NUL byte"));
        }
        if raw.len() > max_len {
            return Err(Error::new(
                ErrorKind::ResourceExhausted,
                format!("name is {} bytes, over the {max_len} byte limit", raw.len()),
            ));
        }
        let mut comps = Vec::new();
        for comp in raw.split(|b| *b == b'/') {
            match comp {
                b"" | b"." => {}
                b".." => {
                    if comps.pop().is_none() {
                        return Err(Error::invalid("path escapes the layer root"));
                    }
                }
                c if c.len() > NAME_MAX => {
                    return Err(Error::invalid(format!(
                        "path component is {} bytes, over the {NAME_MAX} byte limit",
                        c.len()
                    )));
                }
                c => comps.push(OsString::from_vec(c.to_vec())),
            }
        }
        Ok(EntryPath { comps })
    }

    /// All components, outermost first.
    pub(crate) fn components(&self) -> &[OsString] {
        &self.comps
    }

    /// The components of the parent directory (empty for top-level entries and the root).
    pub(crate) fn parent(&self) -> &[OsString] {
        match self.comps.split_last() {
            Some((_, parent)) => parent,
            None => &[],
        }
    }

    /// The final component, `None` for the layer root itself (`./`, `/`).
    pub(crate) fn name(&self) -> Option<&OsStr> {
        self.comps.last().map(OsString::as_os_str)
    }
}

/// Joins components into a relative path for `openat2`; `.` for the root.
pub(crate) fn join(comps: &[OsString]) -> OsString {
    if comps.is_empty() {
        return OsString::from(".");
    }
    let mut out = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        if i > 0 {
            out.push(b'/');
        }
        out.extend_from_slice(c.as_bytes());
    }
    OsString::from_vec(out)
}

/// A printable form of a raw name for error messages and logs.
pub(crate) fn display(raw: &[u8]) -> String {
    String::from_utf8_lossy(raw).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn norm(raw: &str) -> Result<String> {
        EntryPath::parse(raw.as_bytes(), 4096)
            .map(|p| join(p.components()).into_string().expect("utf8"))
    }

    #[test]
    fn leading_slash_and_dot_are_relative_to_the_root() {
        assert_eq!(norm("/etc/escape").expect("abs"), "etc/escape");
        assert_eq!(norm("./usr/bin/").expect("dot"), "usr/bin");
        assert_eq!(norm("a//b/./c").expect("dups"), "a/b/c");
        assert_eq!(norm("a/../b").expect("inner dotdot"), "b");
        assert_eq!(norm("./").expect("root"), ".");
        assert_eq!(norm("/").expect("root"), ".");
    }

    #[test]
    fn climbing_above_the_root_is_refused() {
        for name in ["../escape", "a/../../escape", "/../x", "./.."] {
            let err = norm(name).expect_err(name);
            assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}");
            assert!(err.to_string().contains("escapes the layer root"), "{err}");
        }
    }

    #[test]
    fn empty_nul_and_long_names_are_refused() {
        assert_eq!(
            norm("").expect_err("empty").kind(),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            norm("a\0b").expect_err("nul").kind(),
            ErrorKind::InvalidArgument
        );
        let long = "a/".repeat(3000);
        assert_eq!(
            norm(&long).expect_err("long").kind(),
            ErrorKind::ResourceExhausted
        );
        let comp = "x".repeat(256);
        assert_eq!(
            norm(&comp).expect_err("component").kind(),
            ErrorKind::InvalidArgument
        );
    }

    #[test]
    fn parent_and_name_split_the_last_component() {
        let p = EntryPath::parse(b"a/b/c", 4096).expect("parse");
        assert_eq!(join(p.parent()), "a/b");
        assert_eq!(p.name(), Some(OsStr::new("c")));
        assert_eq!(EntryPath::parse(b"./", 4096).expect("root").name(), None);
    }
}
