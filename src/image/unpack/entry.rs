//! One tar member written into the layer: parent resolved in the root, the old name replaced,
//! the new object created with `*at` calls that never follow a symlink at the final component.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::{
    linkat, mkdirat, mknodat, openat, statat, symlinkat, AtFlags, FileType, Mode, OFlags,
};
use rustix::io::Errno;
use tar::EntryType;

use super::limits::{exhausted, Budget};
use super::meta::{DirFixups, Meta};
use super::path::{self, display, join, EntryPath};
use super::root::{lookup_error, Root, DIR_FLAGS};
use super::whiteout::{self, Whiteout};
use super::{tree, ApplyStats};
use crate::error::{Error, Result, ResultExt};
use crate::image::snapshot::UnpackLimits;

/// Copy buffer for file contents.
const COPY_BUF: usize = 128 * 1024;

/// The state of one layer being applied.
pub(crate) struct Applier<'a> {
    pub(crate) root: Root,
    pub(crate) limits: &'a UnpackLimits,
    pub(crate) budget: Budget,
    pub(crate) fixups: DirFixups,
    pub(crate) stats: ApplyStats,
}

impl Applier<'_> {
    /// Applies one member named `raw` (the name as the archive spells it, for messages).
    pub(crate) fn apply<R: Read>(
        &mut self,
        entry: &mut tar::Entry<'_, R>,
        raw: &[u8],
    ) -> Result<()> {
        self.budget.admit(entry.size())?;
        let kind = entry.header().entry_type();
        if kind.is_pax_global_extensions() {
            tracing::debug!("PAX global header ignored");
            self.stats.skipped += 1;
            return Ok(());
        }
        let path = EntryPath::parse(raw, self.limits.max_path_len)?;
        if kind.is_gnu_sparse() {
            return Err(Error::invalid("GNU sparse files are not supported"));
        }
        whiteout::check_parents(path.parent())?;
        if let Some(name) = path.name() {
            match whiteout::classify(name)? {
                Whiteout::No => {}
                Whiteout::Opaque => return self.opaque(&path),
                Whiteout::Remove(target) => {
                    let meta = Meta::read(entry)?;
                    return self.whiteout(&path, target, &meta);
                }
                Whiteout::Ignored => {
                    tracing::debug!(entry = %path::display(raw), "whiteout metadata member ignored");
                    self.stats.skipped += 1;
                    return Ok(());
                }
            }
        }
        let meta = Meta::read(entry)?;
        match kind {
            // Old (v7) archives mark directories only by a trailing slash; Go reads them so too.
            EntryType::Regular | EntryType::Continuous if raw.ends_with(b"/") => {
                self.dir(&path, raw, meta)
            }
            EntryType::Regular | EntryType::Continuous => self.file(&path, meta, entry),
            EntryType::Directory => self.dir(&path, raw, meta),
            EntryType::Symlink => {
                let target = entry.link_name_bytes().map(|t| t.into_owned());
                self.symlink(&path, target.as_deref(), &meta)
            }
            EntryType::Link => {
                let target = entry.link_name_bytes().map(|t| t.into_owned());
                self.hardlink(&path, target.as_deref())
            }
            EntryType::Fifo => self.fifo(&path, &meta),
            EntryType::Char | EntryType::Block => {
                let header = entry.header();
                let major = header
                    .device_major()
                    .map_err(|e| Error::invalid(format!("bad device major: {e}")))?;
                let minor = header
                    .device_minor()
                    .map_err(|e| Error::invalid(format!("bad device minor: {e}")))?;
                if kind == EntryType::Char && major == Some(0) && minor == Some(0) {
                    // Already in overlayfs form (a layer exported from an overlay upper dir).
                    let (parent, name) = self.replace(&path)?;
                    whiteout::make(parent.as_fd(), name, meta.uid, meta.gid)?;
                    self.stats.whiteouts += 1;
                    return Ok(());
                }
                // Policy: device nodes from an image are not created. Containers get /dev from
                // the runtime, and a node made from untrusted input (a disk, /dev/mem) is a risk.
                tracing::debug!(entry = %path::display(raw), ?major, ?minor, "device node skipped");
                self.stats.skipped += 1;
                Ok(())
            }
            other => Err(Error::invalid(format!(
                "unsupported entry type {:?}",
                char::from(other.as_byte())
            ))),
        }
    }

    /// Resolves (creating) the parent of a non-directory member and removes whatever is at
    /// its name. The root itself can never be replaced.
    fn replace<'p>(&self, path: &'p EntryPath) -> Result<(std::os::fd::OwnedFd, &'p OsStr)> {
        let Some(name) = path.name() else {
            return Err(Error::invalid(
                "only a directory may stand for the layer root",
            ));
        };
        let parent = self.root.make_dirs(path.parent())?;
        clear(parent.as_fd(), name, false)?;
        Ok((parent, name))
    }

    fn file<R: Read>(
        &mut self,
        path: &EntryPath,
        meta: Meta,
        entry: &mut tar::Entry<'_, R>,
    ) -> Result<()> {
        let (parent, name) = self.replace(path)?;
        let flags =
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
        let fd = openat(&parent, name, flags, Mode::from_raw_mode(0o600)).ctx(|| "create file")?;
        let mut file = File::from(fd);
        copy_data(entry, &mut file)?;
        meta.apply_fd(file.as_fd())?;
        self.stats.files += 1;
        Ok(())
    }

    fn dir(&mut self, path: &EntryPath, raw: &[u8], meta: Meta) -> Result<()> {
        let fd = match path.name() {
            None => self.root.open_dir(&[]).map_err(|e| lookup_error(e, &[]))?,
            Some(name) => {
                let parent = self.root.make_dirs(path.parent())?;
                // An existing directory is merged: only its metadata changes.
                if !clear(parent.as_fd(), name, true)? {
                    mkdirat(&parent, name, Mode::from_raw_mode(0o700))
                        .ctx(|| "create directory")?;
                }
                openat(&parent, name, DIR_FLAGS, Mode::empty()).ctx(|| "open directory")?
            }
        };
        self.fixups
            .push(&display(raw), path.components(), fd.as_fd(), meta)?;
        self.stats.dirs += 1;
        Ok(())
    }

    fn symlink(&mut self, path: &EntryPath, target: Option<&[u8]>, meta: &Meta) -> Result<()> {
        // The target is stored verbatim: nothing here ever follows it.
        let target = match target {
            None | Some(b"") => return Err(Error::invalid("symlink without a target")),
            Some(t) if t.contains(&0) => {
                return Err(Error::invalid("symlink target contains a NUL byte"))
            }
            Some(t) if t.len() > self.limits.max_path_len => {
                return Err(exhausted(format!(
                    "symlink target over the {} byte limit",
                    self.limits.max_path_len
                )))
            }
            Some(t) => t,
        };
        let (parent, name) = self.replace(path)?;
        symlinkat(target, &parent, name).ctx(|| "create symlink")?;
        meta.apply_at(parent.as_fd(), name, true)?;
        self.stats.symlinks += 1;
        Ok(())
    }

    /// A hard link. The target is resolved inside the root like any path (so `/etc/shadow`
    /// means the layer's own etc/shadow), must exist and must not be a directory. The shared
    /// inode keeps the metadata its own member gave it.
    fn hardlink(&mut self, path: &EntryPath, target: Option<&[u8]>) -> Result<()> {
        let raw = target.ok_or_else(|| Error::invalid("hard link without a target"))?;
        let shown = display(raw);
        let target = EntryPath::parse(raw, self.limits.max_path_len)
            .map_err(|e| e.context(format!("hard link target {shown:?}")))?;
        let Some(tname) = target.name() else {
            return Err(Error::invalid("hard link to the layer root"));
        };
        let tparent = match self.root.open_dir(target.parent()) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                return Err(Error::invalid(format!(
                    "hard link target {shown:?} does not exist"
                )))
            }
            Err(e) => {
                return Err(
                    lookup_error(e, target.parent()).context(format!("hard link target {shown:?}"))
                )
            }
        };
        let tstat = match statat(&tparent, tname, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::NOENT) => {
                return Err(Error::invalid(format!(
                    "hard link target {shown:?} does not exist"
                )))
            }
            Err(e) => {
                return Err(Error::from(e).context(format!("stat hard link target {shown:?}")))
            }
        };
        if FileType::from_raw_mode(tstat.st_mode) == FileType::Directory {
            return Err(Error::invalid(format!(
                "hard link target {shown:?} is a directory"
            )));
        }
        let Some(name) = path.name() else {
            return Err(Error::invalid(
                "only a directory may stand for the layer root",
            ));
        };
        let parent = self.root.make_dirs(path.parent())?;
        if let Ok(st) = statat(&parent, name, AtFlags::SYMLINK_NOFOLLOW) {
            if (st.st_dev, st.st_ino) == (tstat.st_dev, tstat.st_ino) {
                return Ok(()); // already that inode
            }
        }
        clear(parent.as_fd(), name, false)?;
        // No AT_SYMLINK_FOLLOW: a symlink target is linked itself, never what it points to.
        match linkat(&tparent, tname, &parent, name, AtFlags::empty()) {
            Ok(()) => {}
            Err(Errno::NOENT) => {
                return Err(Error::invalid(format!(
                    "hard link target {shown:?} was removed by this member"
                )))
            }
            Err(e) => return Err(Error::from(e).context(format!("link to {shown:?}"))),
        }
        self.stats.hardlinks += 1;
        Ok(())
    }

    fn fifo(&mut self, path: &EntryPath, meta: &Meta) -> Result<()> {
        let (parent, name) = self.replace(path)?;
        mknodat(&parent, name, FileType::Fifo, Mode::from_raw_mode(0o600), 0)
            .ctx(|| "create fifo")?;
        meta.apply_at(parent.as_fd(), name, false)?;
        self.stats.fifos += 1;
        Ok(())
    }

    /// `.wh..wh..opq`: the directory holding it becomes opaque (created if the archive did
    /// not list it).
    fn opaque(&mut self, path: &EntryPath) -> Result<()> {
        let dir = self.root.make_dirs(path.parent())?;
        whiteout::set_opaque(dir.as_fd())?;
        self.stats.opaque_dirs += 1;
        Ok(())
    }

    /// `.wh.NAME`: a 0:0 character device named NAME replaces whatever is there.
    fn whiteout(&mut self, path: &EntryPath, target: &OsStr, meta: &Meta) -> Result<()> {
        let parent = self.root.make_dirs(path.parent())?;
        clear(parent.as_fd(), target, false)?;
        whiteout::make(parent.as_fd(), target, meta.uid, meta.gid).map_err(|e| {
            e.context(format!(
                "whiteout for {:?}",
                join(path.parent()).to_string_lossy()
            ))
        })?;
        self.stats.whiteouts += 1;
        Ok(())
    }
}

/// Removes what is at `name` in `parent`, keeping it if it is a directory and `keep_dir` (a
/// directory member merging with an existing one). Returns whether a directory was kept.
fn clear(parent: BorrowedFd<'_>, name: &OsStr, keep_dir: bool) -> Result<bool> {
    match statat(parent, name, AtFlags::SYMLINK_NOFOLLOW) {
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(Error::from(e).context("stat existing path")),
        Ok(st) if keep_dir && FileType::from_raw_mode(st.st_mode) == FileType::Directory => {
            Ok(true)
        }
        Ok(_) => {
            tree::remove_at(parent, name).ctx(|| "remove existing path")?;
            Ok(false)
        }
    }
}

/// Copies a member's data, telling a broken archive (InvalidArgument) from a failed write.
fn copy_data<R: Read>(entry: &mut tar::Entry<'_, R>, file: &mut File) -> Result<()> {
    let want = entry.size();
    let mut buf = vec![
        0u8;
        COPY_BUF
            .min(usize::try_from(want).unwrap_or(COPY_BUF))
            .max(1)
    ];
    let mut copied = 0u64;
    loop {
        let n = match entry.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::invalid(format!("read file data: {e}"))),
        };
        // A full disk is NoSpace (the snapshot store names the file system).
        file.write_all(&buf[..n]).ctx(|| "write file data")?;
        copied += n as u64;
    }
    if copied != want {
        return Err(Error::invalid(format!(
            "archive truncated: {copied} of {want} data bytes"
        )));
    }
    Ok(())
}
