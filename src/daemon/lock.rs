//! One daemon per root and per state directory: an exclusive flock on `<dir>/bosun.lock` with our pid.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::Path;

use rustix::fs::{flock, FlockOperation};

use crate::error::{Error, ErrorKind, Result, ResultExt};

/// Held for the daemon's lifetime; the kernel drops the lock if the process dies.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

impl StateLock {
    /// Takes the lock on `dir` (the daemon's `what`: "root" or "state") or fails naming the
    /// running daemon's pid.
    pub fn acquire(dir: &Path, what: &str) -> Result<StateLock> {
        std::fs::create_dir_all(dir).ctx(|| format!("create {what} dir {}", dir.display()))?;
        let path = dir.join("bosun.lock");
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .ctx(|| format!("open {}", path.display()))?;
        if flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
            let mut pid = String::new();
            let _ = file.read_to_string(&mut pid);
            return Err(Error::new(
                ErrorKind::FailedPrecondition,
                format!(
                    "another bosun daemon (pid {}) is running with {what} dir {}; stop it or use another --{what}",
                    pid.trim(),
                    dir.display()
                ),
            ));
        }
        file.set_len(0)
            .ctx(|| format!("truncate {}", path.display()))?;
        file.rewind().ctx(|| format!("rewind {}", path.display()))?;
        write!(file, "{}", std::process::id()).ctx(|| format!("write {}", path.display()))?;
        Ok(StateLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_lock_is_refused_with_the_pid() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = StateLock::acquire(dir.path(), "root").expect("first");
        let err = StateLock::acquire(dir.path(), "root").expect_err("second must fail");
        assert!(
            err.to_string().contains(&std::process::id().to_string()),
            "{err}"
        );
        drop(first);
        StateLock::acquire(dir.path(), "root").expect("free again after drop");
    }
}
