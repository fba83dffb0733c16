//! The container's CRI log file: whole records appended, reopened on SIGUSR1 after rotation; on a full disk lines are dropped, counted and marked.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use super::cri_log::{format_record, Sink, Stream, Tag};
use super::error::{Context, Result};

/// After a failed write, how long records are dropped without trying (a full ext4 may force
/// a journal commit on every try): at most four tries a second while the disk is full.
const RETRY: Duration = Duration::from_millis(250);

/// The open log file at a fixed path. Each record is written with one `write` on an
/// `O_APPEND` descriptor, so records never interleave with another writer's.
///
/// Like containerd, a record that cannot be written is dropped and the streams keep
/// draining: the container never blocks on its log (issue 28: a full log disk). Unlike it, a
/// record is written whole or not at all (a write the disk cut short is truncated away), and
/// the first record written after a gap is preceded, in the same write, by a marker on
/// stderr: `<ts> stderr F [bosun: N log lines dropped: no space left on device]`.
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: File,
    record: Vec<u8>,
    /// Records dropped since the last one written.
    dropped: u64,
    /// Why the first of them was.
    why: String,
    /// No write is tried before this (after a failed one).
    quiet_until: Option<Instant>,
    retry: Duration,
}

impl LogFile {
    /// Opens (creating, mode 0640) `path` for appending; its directory must exist.
    pub fn open(path: &Path) -> Result<Self> {
        Ok(LogFile {
            path: path.to_path_buf(),
            file: open_append(path)?,
            record: Vec::new(),
            dropped: 0,
            why: String::new(),
            quiet_until: None,
            retry: RETRY,
        })
    }

    /// Opens the path again: the kubelet renamed the file away and asks for a fresh one
    /// (CRI ReopenContainerLog). On failure the old file stays in use.
    pub fn reopen(&mut self) -> Result<()> {
        self.file = open_append(&self.path)?;
        Ok(())
    }

    /// The output has ended: the marker of a gap not marked yet is tried once more.
    pub fn end(&mut self) {
        if self.dropped > 0 {
            self.record.clear();
            self.push_marker(SystemTime::now());
            if append(&self.file, &self.record).is_ok() {
                self.dropped = 0;
            }
        }
    }

    /// Adds the marker of the records dropped so far to the record buffer.
    fn push_marker(&mut self, now: SystemTime) {
        let text = format!("[bosun: {} log lines dropped: {}]", self.dropped, self.why);
        format_record(
            &mut self.record,
            now,
            Stream::Stderr,
            Tag::Full,
            text.as_bytes(),
        );
    }

    fn drop_one(&mut self, e: &io::Error) {
        if self.dropped == 0 {
            self.why = crate::error::no_space(e).map_or_else(|| e.to_string(), str::to_string);
        }
        self.dropped += 1;
        self.quiet_until = Some(Instant::now() + self.retry);
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

/// Appends `rec` whole or not at all: one `write` normally; when the disk fills up midway,
/// what was written is cut off again, so no torn record is left for the next to run into.
fn append(mut file: &File, rec: &[u8]) -> io::Result<()> {
    let mut done = 0;
    while done < rec.len() {
        let e = match file.write(&rec[done..]) {
            Ok(0) => io::Error::from(io::ErrorKind::WriteZero),
            Ok(n) => {
                done += n;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => e,
        };
        if done > 0 {
            // O_APPEND and no other writer: the record began `done` bytes before the end.
            if let Ok(m) = file.metadata() {
                let _ = file.set_len(m.len().saturating_sub(done as u64));
            }
        }
        return Err(e);
    }
    Ok(())
}

impl Sink for LogFile {
    fn record(&mut self, stream: Stream, tag: Tag, content: &[u8]) {
        let now = SystemTime::now();
        self.record.clear();
        if self.dropped > 0 {
            if self.quiet_until.is_some_and(|t| Instant::now() < t) {
                self.dropped += 1;
                return;
            }
            // The marker goes in the same write as the record after the gap: one marker per
            // gap, never one alone while the disk has room for it but not for a line.
            self.push_marker(now);
        }
        format_record(&mut self.record, now, stream, tag, content);
        match append(&self.file, &self.record) {
            Ok(()) => {
                self.dropped = 0;
                self.quiet_until = None;
            }
            Err(e) => self.drop_one(&e),
        }
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

    /// The records of a log file, checked whole: `(stream, content)` each.
    fn records(path: &Path) -> Vec<(String, String)> {
        let text = std::fs::read_to_string(path).expect("read log");
        assert!(
            text.is_empty() || text.ends_with('\n'),
            "a torn record ends the log"
        );
        text.lines()
            .map(|l| {
                let mut f = l.splitn(4, ' ');
                let (_ts, stream, tag, msg) = (f.next(), f.next(), f.next(), f.next());
                assert_eq!(tag, Some("F"), "{l}");
                (
                    stream.expect("stream").to_string(),
                    msg.expect("msg").to_string(),
                )
            })
            .collect()
    }

    #[test]
    fn a_full_disk_drops_whole_records_and_marks_the_gap_when_space_returns() {
        let name = "a_full_disk_drops_whole_records_and_marks_the_gap_when_space_returns";
        let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
            return;
        };
        let path = fs.path().join("0.log");
        let mut log = LogFile::open(&path).expect("open");
        log.retry = Duration::ZERO;
        let line = |i: usize| format!("line {i} {}", "x".repeat(200));
        for i in 0..5 {
            log.record(Stream::Stdout, Tag::Full, line(i).as_bytes());
        }
        fs.fill();
        // The log's last page still has room: some records fit, one is cut short, the rest
        // find no room at all.
        for i in 5..100 {
            log.record(Stream::Stdout, Tag::Full, line(i).as_bytes());
        }
        let kept = records(&path);
        assert!(kept.len() > 5 && kept.len() < 100, "{} records", kept.len());
        assert!(log.dropped > 0);
        fs.free();
        log.record(Stream::Stdout, Tag::Full, b"after");
        let all = records(&path);
        assert_eq!(all[..kept.len()], kept[..]);
        let dropped = 100 - kept.len();
        assert_eq!(
            all[kept.len()..],
            [
                (
                    "stderr".to_string(),
                    format!("[bosun: {dropped} log lines dropped: no space left on device]")
                ),
                ("stdout".to_string(), "after".to_string())
            ]
        );
        for (i, (_, msg)) in kept.iter().enumerate() {
            assert_eq!(*msg, line(i));
        }
    }

    #[test]
    fn after_a_failure_records_are_dropped_untried_for_a_while_and_the_end_marks_them() {
        let name = "after_a_failure_records_are_dropped_untried_for_a_while_and_the_end_marks_them";
        let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
            return;
        };
        let path = fs.path().join("0.log");
        let mut log = LogFile::open(&path).expect("open");
        log.retry = Duration::from_secs(3600);
        fs.fill();
        let mut i = 0;
        while log.dropped == 0 {
            log.record(Stream::Stdout, Tag::Full, format!("line {i}").as_bytes());
            i += 1;
        }
        fs.free();
        for _ in 0..3 {
            log.record(Stream::Stderr, Tag::Partial, b"not tried");
        }
        assert_eq!(log.dropped, 4);
        assert!(!std::fs::read_to_string(&path)
            .expect("read")
            .contains("not tried"));
        log.end();
        let all = records(&path);
        assert_eq!(
            all.last().map(|(_, m)| m.as_str()),
            Some("[bosun: 4 log lines dropped: no space left on device]")
        );
        assert_eq!(log.dropped, 0);
    }

    #[test]
    fn open_fails_when_the_directory_is_missing() {
        let err = LogFile::open(Path::new("/nonexistent-bosun-dir/0.log")).expect_err("must fail");
        assert!(err
            .to_string()
            .starts_with("open log file /nonexistent-bosun-dir/0.log: "));
    }
}
