//! Hostile-input-safe layer unpacking: a tar stream applied to one directory and nowhere else.

// The `tar` crate only parses (headers, PAX records, GNU long names). Every filesystem change
// is made here, relative to a directory fd of the destination: parents are resolved by the
// kernel with `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)`, the final component is never
// followed, and whiteouts are converted to overlayfs form. Policies: absolute names are taken
// relative to the root; `..` above the root, symlinks on the way to a member, sparse files
// and unknown types are refused; device nodes are skipped (except 0:0 whiteouts);
// `trusted.overlay.*` xattrs never come from an image.

mod entry;
mod limits;
mod meta;
mod path;
mod root;
mod stream;
mod tree;
mod whiteout;

#[cfg(test)]
pub(crate) mod tests;

use std::io::{self, Read};
use std::path::Path;

use crate::error::{Error, Result};
use crate::image::snapshot::UnpackLimits;

pub use stream::{decompress, DigestReader};
pub use tree::disk_usage;
pub(crate) use tree::remove_tree;

/// What one layer contained, by kind of member.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ApplyStats {
    /// Members read (including skipped ones).
    pub entries: u64,
    /// Sum of member sizes.
    pub bytes: u64,
    /// Regular files written.
    pub files: u64,
    /// Directory members (new or merged).
    pub dirs: u64,
    /// Symlinks created.
    pub symlinks: u64,
    /// Hard links created.
    pub hardlinks: u64,
    /// FIFOs created.
    pub fifos: u64,
    /// Whiteout devices created (from `.wh.NAME` or 0:0 character devices).
    pub whiteouts: u64,
    /// Directories marked opaque.
    pub opaque_dirs: u64,
    /// Members deliberately not created: device nodes, PAX global headers, `.wh..wh.*` metadata.
    pub skipped: u64,
}

/// Applies the tar stream `reader` to `dest_dir`, which must exist (normally empty).
///
/// The stream is read to its very end, trailing padding included, so a hashing reader the
/// caller passes sees every byte. On error the directory holds a partial layer: the caller
/// discards it. Errors name the member (`entry "a/b": ...`) and are InvalidArgument for bad
/// or hostile content, ResourceExhausted for limits, NoSpace for a full disk and Internal for
/// other I/O failures.
pub fn apply<R: Read>(reader: R, dest_dir: &Path, limits: &UnpackLimits) -> Result<ApplyStats> {
    let root = root::Root::open(dest_dir)?;
    let (guarded, switch) = limits::HeaderGuard::new(reader);
    let mut archive = tar::Archive::new(guarded);
    let mut applier = entry::Applier {
        root,
        limits,
        budget: limits::Budget::new(limits),
        fixups: meta::DirFixups::default(),
        stats: ApplyStats::default(),
    };
    let mut last = None::<String>;
    let mut entries = archive
        .entries()
        .map_err(|e| Error::invalid(format!("read archive: {e}")))?;
    loop {
        switch.arm();
        let next = entries.next();
        switch.disarm();
        let mut entry = match next {
            None => break,
            Some(Ok(entry)) => entry,
            Some(Err(e)) => return Err(malformed(e, switch.tripped(), last.as_deref())),
        };
        let raw = entry.path_bytes().into_owned();
        let name = path::display(&raw);
        applier
            .apply(&mut entry, &raw)
            .map_err(|e| e.context(format!("entry {name:?}")))?;
        // Whatever the member did not consume (data of a directory, a skipped device...) is
        // read here, charged to the byte budget already, so the header cap only sees headers.
        io::copy(&mut entry, &mut io::sink())
            .map_err(|e| Error::invalid(format!("entry {name:?}: read data: {e}")))?;
        last = Some(name);
    }
    let entry::Applier {
        root,
        budget,
        fixups,
        mut stats,
        ..
    } = applier;
    fixups.finish(&root)?;
    // Trailing bytes (end blocks, record padding) are charged to what is left of the byte
    // budget: unbounded, a compressed run of zeros would keep us hashing forever.
    archive
        .into_inner()
        .drain(limits.max_layer_bytes.saturating_sub(budget.bytes))?;
    stats.entries = budget.entries;
    stats.bytes = budget.bytes;
    Ok(stats)
}

/// An error from the tar parser: a limit if the header cap tripped, bad content otherwise.
fn malformed(e: io::Error, tripped: bool, last: Option<&str>) -> Error {
    let err = if tripped {
        limits::exhausted(e.to_string())
    } else {
        Error::invalid(format!("malformed archive: {e}"))
    };
    match last {
        Some(name) => err.context(format!("after entry {name:?}")),
        None => err.context("first entry"),
    }
}
