//! Member metadata (owner, mode, times, xattrs): read from headers, applied without following.

use std::cmp::Reverse;
use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::os::fd::BorrowedFd;

use rustix::fs::{chmodat, chownat, fchmod, fchown, fstat, futimens, utimensat};
use rustix::fs::{fsetxattr, AtFlags, Gid, Mode, Timespec, Timestamps, Uid, XattrFlags};
use rustix::io::Errno;

use super::root::Root;
use crate::error::{Error, Result, ResultExt};

/// PAX key prefix under which GNU tar, Go and docker store xattrs.
const XATTR_PREFIX: &[u8] = b"SCHILY.xattr.";

/// Owner, permission bits, times and xattrs of one member.
#[derive(Debug, Clone)]
pub(crate) struct Meta {
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Permission bits including setuid, setgid and sticky.
    pub(crate) mode: u32,
    atime: Timespec,
    mtime: Timespec,
    xattrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl Meta {
    /// Reads the metadata of `entry` (PAX `uid`/`gid` are already folded in by the tar crate).
    pub(crate) fn read<R: Read>(entry: &mut tar::Entry<'_, R>) -> Result<Self> {
        let header = entry.header();
        let uid = id(header.uid(), "uid")?;
        let gid = id(header.gid(), "gid")?;
        let mode = header
            .mode()
            .map_err(|e| Error::invalid(format!("bad mode: {e}")))?
            & 0o7777;
        let header_mtime = header
            .mtime()
            .map_err(|e| Error::invalid(format!("bad mtime: {e}")))?;
        let mut mtime = Timespec {
            tv_sec: i64::try_from(header_mtime).unwrap_or(i64::MAX),
            tv_nsec: 0,
        };
        let mut atime = None;
        let mut xattrs = Vec::new();
        if let Some(pax) = entry
            .pax_extensions()
            .map_err(|e| Error::invalid(format!("bad PAX header: {e}")))?
        {
            for ext in pax {
                let ext = ext.map_err(|e| Error::invalid(format!("bad PAX record: {e}")))?;
                let key = ext.key_bytes();
                if let Some(name) = key.strip_prefix(XATTR_PREFIX) {
                    if name.is_empty() || name.contains(&0) {
                        return Err(Error::invalid(format!(
                            "bad xattr name {:?}",
                            String::from_utf8_lossy(name)
                        )));
                    }
                    xattrs.push((name.to_vec(), ext.value_bytes().to_vec()));
                } else if key.starts_with(b"GNU.sparse.") {
                    return Err(Error::invalid("PAX sparse files are not supported"));
                } else if key == b"mtime" {
                    mtime = pax_time(ext.value_bytes()).unwrap_or(mtime);
                } else if key == b"atime" {
                    atime = pax_time(ext.value_bytes());
                }
            }
        }
        Ok(Meta {
            uid,
            gid,
            mode,
            atime: atime.unwrap_or(mtime),
            mtime,
            xattrs,
        })
    }

    /// Applies everything to an open regular file or directory. Order matters: chown clears
    /// setuid/setgid and file capabilities, so mode and xattrs come after it, times last.
    pub(crate) fn apply_fd(&self, fd: BorrowedFd<'_>) -> Result<()> {
        fchown(
            fd,
            Some(Uid::from_raw(self.uid)),
            Some(Gid::from_raw(self.gid)),
        )
        .ctx(|| format!("chown {}:{}", self.uid, self.gid))?;
        fchmod(fd, Mode::from_raw_mode(self.mode)).ctx(|| format!("chmod {:o}", self.mode))?;
        for (name, value) in &self.xattrs {
            set_xattr(fd, name, value)?;
        }
        futimens(fd, &self.times()).ctx(|| "set times")
    }

    /// Applies owner, mode (unless `symlink`) and times to `name` in `parent`, never following
    /// a symlink there. Xattrs cannot be set this way safely; `user.*` ones are not allowed on
    /// symlinks and special files anyway, so they are skipped with a log line.
    pub(crate) fn apply_at(
        &self,
        parent: BorrowedFd<'_>,
        name: &OsStr,
        symlink: bool,
    ) -> Result<()> {
        chownat(
            parent,
            name,
            Some(Uid::from_raw(self.uid)),
            Some(Gid::from_raw(self.gid)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .ctx(|| format!("chown {}:{}", self.uid, self.gid))?;
        if !symlink {
            // fchmodat cannot refuse to follow, but `name` is a FIFO we just created in a
            // directory only this unpack writes, so there is no symlink to follow.
            chmodat(
                parent,
                name,
                Mode::from_raw_mode(self.mode),
                AtFlags::empty(),
            )
            .ctx(|| format!("chmod {:o}", self.mode))?;
        }
        if !self.xattrs.is_empty() {
            tracing::debug!(name = ?name, count = self.xattrs.len(), "xattrs on a symlink or special file skipped");
        }
        utimensat(parent, name, &self.times(), AtFlags::SYMLINK_NOFOLLOW).ctx(|| "set times")
    }

    fn times(&self) -> Timestamps {
        Timestamps {
            last_access: self.atime,
            last_modification: self.mtime,
        }
    }
}

/// Parses a uid or gid; `-1` (all ones) means "leave unchanged" to chown, so it is refused.
fn id(value: std::io::Result<u64>, what: &str) -> Result<u32> {
    let value = value.map_err(|e| Error::invalid(format!("bad {what}: {e}")))?;
    match u32::try_from(value) {
        Ok(v) if v != u32::MAX => Ok(v),
        _ => Err(Error::invalid(format!("{what} {value} out of range"))),
    }
}

/// Parses a PAX time (`seconds[.fraction]`, possibly negative).
fn pax_time(value: &[u8]) -> Option<Timespec> {
    let s = std::str::from_utf8(value).ok()?;
    let (neg, s) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if secs.is_empty()
        || !secs.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let secs: i64 = secs.parse().ok()?;
    let digits = &frac[..frac.len().min(9)];
    let nanos: i64 = if digits.is_empty() {
        0
    } else {
        digits.parse::<i64>().ok()? * 10i64.pow(9 - digits.len() as u32)
    };
    Some(match (neg, nanos) {
        (false, n) => Timespec {
            tv_sec: secs,
            tv_nsec: n,
        },
        (true, 0) => Timespec {
            tv_sec: -secs,
            tv_nsec: 0,
        },
        (true, n) => Timespec {
            tv_sec: -secs - 1,
            tv_nsec: 1_000_000_000 - n,
        },
    })
}

/// Sets one xattr from the archive on `fd`, by namespace policy:
/// `user.*` must succeed; `security.*`, `trusted.*`, `system.*` are best effort (the filesystem
/// or a user namespace may refuse them, as docker tolerates); `trusted.overlay.*` is never taken
/// from an image (those attributes steer overlayfs itself; opacity comes only from
/// `.wh..wh..opq`); other namespaces do not exist on Linux and are skipped.
fn set_xattr(fd: BorrowedFd<'_>, name: &[u8], value: &[u8]) -> Result<()> {
    let shown = String::from_utf8_lossy(name);
    if name.starts_with(b"trusted.overlay.") {
        tracing::debug!(xattr = %shown, "overlayfs control xattr in the archive ignored");
        return Ok(());
    }
    let required = name.starts_with(b"user.");
    if !required
        && ![&b"security."[..], b"trusted.", b"system."]
            .iter()
            .any(|p| name.starts_with(p))
    {
        tracing::debug!(xattr = %shown, "xattr in an unknown namespace ignored");
        return Ok(());
    }
    match fsetxattr(fd, name, value, XattrFlags::empty()) {
        Ok(()) => Ok(()),
        Err(e) if !required => {
            tracing::debug!(xattr = %shown, error = %e, "xattr refused by the filesystem, skipped");
            Ok(())
        }
        Err(e @ (Errno::TOOBIG | Errno::RANGE | Errno::INVAL)) => {
            Err(Error::invalid(format!("set xattr {shown:?}: {e}")))
        }
        Err(e) => Err(Error::from(e).context(format!("set xattr {shown:?}"))),
    }
}

/// Directories whose mode and times are set once the whole layer is written, deepest first,
/// so that a 0555 directory does not block its own children and their creation does not
/// change its mtime.
#[derive(Debug, Default)]
pub(crate) struct DirFixups {
    dirs: Vec<PendingDir>,
}

#[derive(Debug)]
struct PendingDir {
    entry: String,
    comps: Vec<OsString>,
    dev: u64,
    ino: u64,
    meta: Meta,
}

impl DirFixups {
    /// Remembers directory `comps` (the open `fd`) for the final pass.
    pub(crate) fn push(
        &mut self,
        entry: &str,
        comps: &[OsString],
        fd: BorrowedFd<'_>,
        meta: Meta,
    ) -> Result<()> {
        let st = fstat(fd).ctx(|| "stat directory")?;
        self.dirs.push(PendingDir {
            entry: entry.to_string(),
            comps: comps.to_vec(),
            dev: st.st_dev,
            ino: st.st_ino,
            meta,
        });
        Ok(())
    }

    /// Applies the deferred metadata. A directory that a later member replaced or removed (its
    /// path no longer leads to the same inode) is skipped.
    pub(crate) fn finish(mut self, root: &Root) -> Result<()> {
        self.dirs.sort_by_key(|d| Reverse(d.comps.len()));
        for dir in &self.dirs {
            let Ok(fd) = root.open_dir(&dir.comps) else {
                continue;
            };
            let st = fstat(&fd).ctx(|| format!("entry {:?}: stat directory", dir.entry))?;
            if (st.st_dev, st.st_ino) != (dir.dev, dir.ino) {
                continue;
            }
            dir.meta
                .apply_fd(std::os::fd::AsFd::as_fd(&fd))
                .map_err(|e| e.context(format!("entry {:?}", dir.entry)))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pax_times_keep_fractions_and_sign() {
        let t = |s: &str| pax_time(s.as_bytes()).map(|t| (t.tv_sec, t.tv_nsec));
        assert_eq!(t("1700000000"), Some((1_700_000_000, 0)));
        assert_eq!(t("1700000000.5"), Some((1_700_000_000, 500_000_000)));
        assert_eq!(t("1.1234567891"), Some((1, 123_456_789)));
        assert_eq!(t("-1.25"), Some((-2, 750_000_000)));
        assert_eq!(t("x"), None);
        assert_eq!(t(""), None);
    }

    #[test]
    fn ids_of_all_ones_are_refused() {
        assert_eq!(id(Ok(1000), "uid").expect("ok"), 1000);
        assert!(id(Ok(u64::from(u32::MAX)), "uid").is_err());
        assert!(id(Ok(1 << 40), "gid").is_err());
    }
}
