//! OCI whiteouts (`.wh.NAME`, `.wh..wh..opq`) turned into their overlayfs form.

use std::ffi::{OsStr, OsString};
use std::os::fd::BorrowedFd;
use std::os::unix::ffi::OsStrExt;

use rustix::fs::XattrFlags;
use rustix::fs::{chownat, fsetxattr, makedev, mknodat, AtFlags, FileType, Gid, Mode, Uid};

use crate::error::{Error, Result, ResultExt};

/// Prefix of OCI whiteout names.
const PREFIX: &[u8] = b".wh.";
/// Prefix of whiteout metadata names (the opaque marker and the AUFS leftovers).
const META_PREFIX: &[u8] = b".wh..wh.";
/// The OCI opaque-directory marker.
const OPAQUE: &[u8] = b".wh..wh..opq";
/// The xattr overlayfs reads to hide everything below a directory in lower layers.
pub(crate) const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What a member's final name means.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Whiteout<'a> {
    /// An ordinary name.
    No,
    /// `.wh..wh..opq`: the parent directory hides the lower layers' content.
    Opaque,
    /// `.wh.NAME`: NAME is deleted from the lower layers.
    Remove(&'a OsStr),
    /// Some other `.wh..wh.*` (AUFS hard-link bookkeeping): ignored, as containerd does.
    Ignored,
}

/// Classifies a member's final path component.
pub(crate) fn classify(name: &OsStr) -> Result<Whiteout<'_>> {
    let bytes = name.as_bytes();
    if bytes == OPAQUE {
        return Ok(Whiteout::Opaque);
    }
    if bytes.starts_with(META_PREFIX) {
        return Ok(Whiteout::Ignored);
    }
    match bytes.strip_prefix(PREFIX) {
        None => Ok(Whiteout::No),
        Some(b"") | Some(b".") | Some(b"..") => {
            Err(Error::invalid(format!("whiteout {name:?} names no file")))
        }
        Some(target) => Ok(Whiteout::Remove(OsStr::from_bytes(target))),
    }
}

/// Refuses whiteout names used as directories (`.wh.x/file`): no layer tool writes them, and
/// creating them would put `.wh.` files into the snapshot.
pub(crate) fn check_parents(parents: &[OsString]) -> Result<()> {
    match parents.iter().find(|c| c.as_bytes().starts_with(PREFIX)) {
        Some(c) => Err(Error::invalid(format!(
            "whiteout name {c:?} used as a directory"
        ))),
        None => Ok(()),
    }
}

/// Creates the overlayfs whiteout for `name` in `parent`: a 0:0 character device, owned by
/// `uid:gid` as in the archive. Anything at `name` must have been removed already.
pub(crate) fn make(parent: BorrowedFd<'_>, name: &OsStr, uid: u32, gid: u32) -> Result<()> {
    mknodat(
        parent,
        name,
        FileType::CharacterDevice,
        Mode::empty(),
        makedev(0, 0),
    )
    .ctx(|| format!("create whiteout device {name:?}"))?;
    chownat(
        parent,
        name,
        Some(Uid::from_raw(uid)),
        Some(Gid::from_raw(gid)),
        AtFlags::SYMLINK_NOFOLLOW,
    )
    .ctx(|| format!("chown whiteout {name:?}"))
}

/// Marks the open directory `dir` opaque for overlayfs.
pub(crate) fn set_opaque(dir: BorrowedFd<'_>) -> Result<()> {
    fsetxattr(dir, OPAQUE_XATTR, b"y", XattrFlags::empty())
        .ctx(|| format!("set {OPAQUE_XATTR} (the filesystem must support trusted xattrs)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_classified_like_containerd_does() {
        fn c(s: &str) -> Whiteout<'_> {
            classify(OsStr::new(s)).expect(s)
        }
        assert_eq!(c("file"), Whiteout::No);
        assert_eq!(c(".whatever"), Whiteout::No);
        assert_eq!(c(".wh..wh..opq"), Whiteout::Opaque);
        assert_eq!(c(".wh..wh.plnk"), Whiteout::Ignored);
        assert_eq!(c(".wh.gone"), Whiteout::Remove(OsStr::new("gone")));
        assert!(classify(OsStr::new(".wh.")).is_err());
        assert!(classify(OsStr::new(".wh...")).is_err());
    }

    #[test]
    fn whiteout_dirs_are_refused_as_parents() {
        assert!(check_parents(&[OsString::from("a"), OsString::from(".wh.b")]).is_err());
        assert!(check_parents(&[OsString::from("a")]).is_ok());
    }
}
