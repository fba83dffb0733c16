//! The container's CRI log file: append-only records, reopened on SIGUSR1 after rotation.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::cri_log::{format_record, Sink, Stream, Tag};
use super::error::{Context, Result};

/// The open log file at a fixed path. Each record is written with one `write` on an
/// `O_APPEND` descriptor, so records never interleave with another writer's.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: File,
    record: Vec<u8>,
}

impl LogFile {
    /// Opens (creating, mode 0640) `path` for appending; its directory must exist.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: open_append(path)?,
            record: Vec::new(),
        })
    }

    /// Opens the path again: the kubelet renamed the file away and asks for a fresh one
    /// (CRI ReopenContainerLog). On failure the old file stays in use.
    pub fn reopen(&mut self) -> Result<()> {
        self.file = open_append(&self.path)?;
        Ok(())
    }
}

fn open_append(path: &Path) -> Result<File> {
    OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o640)
        .open(path)
        .with_context(|| format!("open log file {}", path.display()))
}

impl Sink for LogFile {
    fn record(&mut self, stream: Stream, tag: Tag, content: &[u8]) {
        self.record.clear();
        format_record(&mut self.record, SystemTime::now(), stream, tag, content);
        // Like containerd, a failed write is dropped and the stream keeps draining: the
        // container must never block on its log.
        let _ = self.file.write_all(&self.record);
        if self.record.capacity() > 64 * 1024 {
            self.record = Vec::new();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_append_and_reopen_starts_a_fresh_file_after_rename() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("0.log");
        let mut log = LogFile::open(&path).expect("open");
        log.record(Stream::Stdout, Tag::Full, b"before");
        std::fs::rename(&path, dir.path().join("0.log.1")).expect("rename");
        log.record(Stream::Stdout, Tag::Full, b"still old");
        log.reopen().expect("reopen");
        log.record(Stream::Stderr, Tag::Full, b"after");

        let old = std::fs::read_to_string(dir.path().join("0.log.1")).expect("old");
        let new = std::fs::read_to_string(&path).expect("new");
        assert!(old.contains(" stdout F before\n"));
        assert!(old.ends_with(" stdout F still old\n"));
        assert_eq!(new.lines().count(), 1);
        assert!(new.ends_with(" stderr F after\n"));
    }

    #[test]
    fn open_fails_when_the_directory_is_missing() {
        let err = LogFile::open(Path::new("/nonexistent-bosun-dir/0.log")).expect_err("must fail");
        assert!(err
            .to_string()
            .starts_with("open log file /nonexistent-bosun-dir/0.log: "));
    }
}
