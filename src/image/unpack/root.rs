//! The layer root as a directory fd: every lookup below it is resolved by the kernel inside it.

use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::path::Path;

use rustix::fs::{fchmod, mkdirat, openat2, Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use super::path::join;
use crate::error::{Error, Result, ResultExt};

/// Flags for opening a directory we will write into: never a symlink at the last component.
pub(crate) const DIR_FLAGS: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::NOFOLLOW)
    .union(OFlags::CLOEXEC);

/// The same for `openat2`, where `RESOLVE_NO_SYMLINKS` covers the final component too (and
/// reports ELOOP, where `O_NOFOLLOW | O_DIRECTORY` would say ENOTDIR).
const DIR_FLAGS_RESOLVED: OFlags = OFlags::RDONLY
    .union(OFlags::DIRECTORY)
    .union(OFlags::CLOEXEC);

/// How every path below the root is resolved.
///
/// `IN_ROOT` makes the kernel treat the root fd as `/` for the whole walk, so nothing a layer
/// plants (`link -> /etc`, `link -> ../../..`) can lead outside. `NO_SYMLINKS` goes further and
/// refuses any symlink on the way: a tar made from a real tree never reaches a member through a
/// symlink, so an archive that does is playing the "symlink-then-file" trick and is rejected.
const RESOLVE: ResolveFlags = ResolveFlags::IN_ROOT
    .union(ResolveFlags::NO_SYMLINKS)
    .union(ResolveFlags::NO_MAGICLINKS)
    .union(ResolveFlags::NO_XDEV);

/// Mode of directories created implicitly for members whose parents the archive does not list.
const IMPLICIT_DIR_MODE: u32 = 0o755;

/// An open layer root directory.
#[derive(Debug)]
pub(crate) struct Root {
    fd: OwnedFd,
}

impl Root {
    /// Opens `dir` (which must exist) as the root of all later lookups.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        let fd = rustix::fs::open(dir, DIR_FLAGS, Mode::empty())
            .ctx(|| format!("open layer root {}", dir.display()))?;
        Ok(Root { fd })
    }

    /// Opens the existing directory at `comps`, resolved inside the root without symlinks.
    pub(crate) fn open_dir(&self, comps: &[OsString]) -> rustix::io::Result<OwnedFd> {
        openat2(
            &self.fd,
            join(comps),
            DIR_FLAGS_RESOLVED,
            Mode::empty(),
            RESOLVE,
        )
    }

    /// Opens the directory at `comps`, creating missing ones (mode 0755) one level at a time,
    /// each with `mkdirat` relative to a parent fd that was itself resolved inside the root.
    pub(crate) fn make_dirs(&self, comps: &[OsString]) -> Result<OwnedFd> {
        match self.open_dir(comps) {
            Ok(fd) => return Ok(fd),
            Err(Errno::NOENT) => {}
            Err(e) => return Err(lookup_error(e, comps)),
        }
        let mut cur = self.open_dir(&[]).map_err(|e| lookup_error(e, &[]))?;
        for (depth, comp) in comps.iter().enumerate() {
            let here = &comps[..=depth];
            // `cur` was resolved in the root and `comp` is a single plain name, so resolving it
            // with `cur` as the root is the same walk as from the real root.
            cur = match openat2(&cur, comp, DIR_FLAGS_RESOLVED, Mode::empty(), RESOLVE) {
                Ok(fd) => fd,
                Err(Errno::NOENT) => {
                    mkdirat(&cur, comp, Mode::from_raw_mode(IMPLICIT_DIR_MODE))
                        .ctx(|| format!("create directory {:?}", join(here)))?;
                    let fd = openat2(&cur, comp, DIR_FLAGS_RESOLVED, Mode::empty(), RESOLVE)
                        .map_err(|e| lookup_error(e, here))?;
                    // The umask must not decide the mode of an image's directories.
                    fchmod(&fd, Mode::from_raw_mode(IMPLICIT_DIR_MODE))
                        .ctx(|| format!("chmod directory {:?}", join(here)))?;
                    fd
                }
                Err(e) => return Err(lookup_error(e, here)),
            };
        }
        Ok(cur)
    }
}

/// Turns a failed lookup of the directory `comps` into an error that says what was wrong.
pub(crate) fn lookup_error(e: Errno, comps: &[OsString]) -> Error {
    let dir = join(comps);
    match e {
        Errno::LOOP => Error::invalid(format!("parent {dir:?} goes through a symlink")),
        Errno::NOTDIR => Error::invalid(format!("parent {dir:?} is not a directory")),
        Errno::XDEV => Error::invalid(format!("parent {dir:?} escapes the layer root")),
        Errno::NAMETOOLONG => Error::invalid(format!("parent {dir:?} is too long")),
        e => Error::from(e).context(format!("open directory {dir:?}")),
    }
}
