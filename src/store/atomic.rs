//! Crash-safe file writes: write a temp file, fsync, rename over the target, fsync the directory.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Result, ResultExt};
use crate::store::space::NameFs;

/// A temp path next to `path` that no other writer picks (random suffix).
pub fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    path.with_file_name(format!(
        "{TEMP_PREFIX}{}-{:016x}",
        name,
        rand::random::<u64>()
    ))
}

/// The prefix of [`temp_path`] names.
const TEMP_PREFIX: &str = ".tmp-";

/// Deletes the temp files [`write_atomic`]s cut short by a crash left in `dir` (nothing reads
/// them: the rename never happened). Call it before anything writes in `dir`. Returns how many
/// went and a line per file that could not be removed.
pub fn remove_temps(dir: &Path) -> (usize, Vec<String>) {
    let (mut removed, mut failed) = (0, Vec::new());
    let Ok(rd) = fs::read_dir(dir) else {
        return (removed, failed);
    };
    for ent in rd.flatten() {
        if ent.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
            match fs::remove_file(ent.path()) {
                Ok(()) => removed += 1,
                Err(e) => failed.push(format!("{}: remove temp: {e}", ent.path().display())),
            }
        }
    }
    (removed, failed)
}

/// Replaces `path` with `bytes` so that a crash leaves either the old or the new content.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_synced(path, bytes)?;
    sync_parent(path)
}

/// [`write_atomic`] but for the fsync of the directory, which the caller does once for
/// several files written there (a new object's records: issue 13). On any failure (a full
/// disk: the file system named) the temp file is gone and `path` is as it was.
pub fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    let res = (|| -> Result<()> {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
            .ctx(|| format!("write {}", path.display()))?;
        f.write_all(bytes)
            .ctx(|| format!("write {}", path.display()))?;
        f.sync_all().ctx(|| format!("fsync {}", path.display()))?;
        fs::rename(&tmp, path).ctx(|| format!("rename into {}", path.display()))
    })();
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.name_fs(path)
}

/// Replaces `path` with `bytes` atomically for readers and against a crash of this process
/// (kill -9 keeps the page cache): temp file, rename, no fsync. A power cut may bring the old
/// content back (ext4 flushes a file renamed over another before the rename commits), so use
/// it only where the old content is a state recovery reconciles anyway; each fsync costs ms
/// on a busy disk (issue 13). Failures as [`write_synced`]'s.
pub fn write_atomic_nosync(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_path(path);
    let res = fs::write(&tmp, bytes)
        .ctx(|| format!("write {}", path.display()))
        .and_then(|()| fs::rename(&tmp, path).ctx(|| format!("rename into {}", path.display())));
    if res.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    res.name_fs(path)
}

/// [`write_json`] without the fsyncs (see [`write_atomic_nosync`]).
pub fn write_json_nosync<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)?;
    write_atomic_nosync(path, &bytes)
}

/// Serialises `value` as JSON and writes it atomically.
pub fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let bytes = serde_json::to_vec_pretty(value)?;
    write_atomic(path, &bytes)
}

/// fsyncs the directory holding `path`, making a rename or unlink in it durable.
pub fn sync_parent(path: &Path) -> Result<()> {
    if let Some(dir) = path.parent() {
        sync_dir(dir)?;
    }
    Ok(())
}

/// fsyncs a directory.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .ctx(|| format!("fsync directory {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_atomic_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("status.json");
        write_atomic(&p, b"one").expect("first write");
        write_atomic(&p, b"two").expect("second write");
        assert_eq!(fs::read(&p).expect("read"), b"two");
        let names: Vec<_> = fs::read_dir(dir.path()).expect("ls").flatten().collect();
        assert_eq!(names.len(), 1, "temp files left behind");
    }

    #[test]
    fn write_atomic_nosync_replaces_and_leaves_no_temp() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("status.json");
        write_atomic_nosync(&p, b"one").expect("first write");
        write_json_nosync(&p, &2).expect("second write");
        assert_eq!(fs::read(&p).expect("read"), b"2");
        assert_eq!(
            fs::read_dir(dir.path()).expect("ls").count(),
            1,
            "temp left"
        );
        assert!(write_atomic_nosync(&dir.path().join("no/such/file"), b"x").is_err());
        assert_eq!(
            fs::read_dir(dir.path()).expect("ls").count(),
            1,
            "temp left"
        );
    }

    #[test]
    fn a_full_disk_keeps_the_old_record_leaves_no_temp_and_names_the_file_system() {
        let name = "a_full_disk_keeps_the_old_record_leaves_no_temp_and_names_the_file_system";
        let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
            return;
        };
        let p = fs.path().join("status.json");
        write_atomic(&p, b"old").expect("first write");
        fs.fill();
        let big = vec![b'x'; 16 << 10];
        for write in [write_atomic, write_synced, write_atomic_nosync] {
            let e = write(&p, &big).expect_err("a full disk");
            assert_eq!(e.kind(), crate::ErrorKind::NoSpace, "{e}");
            let named = format!(
                "write {}: no space left on device (file system {}, tmpfs: ",
                p.display(),
                fs.path().display()
            );
            assert!(e.message().starts_with(&named), "{e}");
            assert_eq!(fs::read(&p).expect("read"), b"old");
            assert_eq!(
                fs::read_dir(fs.path()).expect("ls").count(),
                2,
                "a temp was left"
            );
        }
        fs.free();
        write_atomic(&p, &big).expect("once freed");
    }

    #[test]
    fn temps_of_interrupted_writes_are_removed_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("a.json");
        write_atomic(&p, b"kept").expect("write");
        fs::write(temp_path(&p), b"{\"half").expect("temp");
        fs::write(temp_path(&p), b"").expect("temp");
        assert_eq!(remove_temps(dir.path()), (2, Vec::new()));
        assert_eq!(fs::read(&p).expect("read"), b"kept");
        assert_eq!(fs::read_dir(dir.path()).expect("ls").count(), 1);
        assert_eq!(remove_temps(&dir.path().join("absent")), (0, Vec::new()));
    }
}
