//! containerd's registry host directories (`[registry] config_path`, `/etc/containerd/certs.d`): which directory serves a host, re-read when it changes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use crate::error::{Error, Result};
use crate::image::registry::hosts_toml::{self, HostsFile, HOSTS_FILE};

/// The directory every host without its own falls back to.
pub const DEFAULT_DIR: &str = "_default";

/// What the candidate directories of a host looked like: which exist, and the chosen one's
/// files (name, mtime, size). Any change makes the next lookup read the files again.
type Stamp = (Vec<bool>, Vec<(String, Option<SystemTime>, u64)>);

/// A host's settings as last read, and what the directory looked like then.
struct Cached {
    stamp: Stamp,
    found: std::result::Result<Option<Found>, Error>,
}

/// The hosts file that serves a host.
#[derive(Debug, Clone)]
pub struct Found {
    /// The directory it came from.
    pub dir: PathBuf,
    /// Its settings.
    pub file: Arc<HostsFile>,
}

/// The host directories under one or more roots (containerd's `config_path`: roots separated
/// by `:`, the first root with a directory for the host winning, its `_default` included).
pub struct HostsDirs {
    roots: Vec<PathBuf>,
    cache: Mutex<HashMap<String, Cached>>,
}

impl HostsDirs {
    /// The roots of `config_path` (empty: none).
    pub fn new(config_path: &str) -> HostsDirs {
        HostsDirs {
            roots: config_path
                .split(':')
                .filter(|p| !p.is_empty())
                .map(PathBuf::from)
                .collect(),
            cache: Mutex::default(),
        }
    }

    /// Whether there is any root to look in.
    pub fn is_empty(&self) -> bool {
        self.roots.is_empty()
    }

    /// The roots, as configured.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// The settings for `host` (`docker.io`, `127.0.0.1:5000`): its own directory, else
    /// `_default`, else none. Each call looks at the directories (a few stats), so files
    /// written while the daemon runs take effect at the next pull; a directory is read again
    /// only when something in it changed. A file that cannot be used is an error naming it
    /// (logged once per change), never silently skipped.
    pub fn lookup(&self, host: &str) -> Result<Option<Found>> {
        let candidates = self.candidates(host);
        let exists: Vec<bool> = candidates.iter().map(|c| c.is_dir()).collect();
        let chosen = exists.iter().position(|e| *e).map(|i| &candidates[i]);
        let stamp: Stamp = (
            exists.clone(),
            chosen.map(|d| listing(d)).unwrap_or_default(),
        );
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(c) = cache.get(host).filter(|c| c.stamp == stamp) {
            return c.found.clone();
        }
        let found = match chosen {
            None => Ok(None),
            Some(dir) => read_dir(dir).map(|file| {
                Some(Found {
                    dir: dir.clone(),
                    file: Arc::new(file),
                })
            }),
        };
        match &found {
            Ok(Some(f)) => {
                tracing::info!(host, dir = %f.dir.display(), "registry host settings read")
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(host, "registry host settings refused: {e}"),
        }
        cache.insert(
            host.to_string(),
            Cached {
                stamp,
                found: found.clone(),
            },
        );
        found
    }

    /// Where `host`'s settings may be, in the order containerd looks: per root,
    /// `host_port_` (for `host:port`), `host:port`, `_default`.
    fn candidates(&self, host: &str) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for root in &self.roots {
            if let Some(i) = host.rfind(':').filter(|i| *i > 0) {
                out.push(root.join(format!("{}_{}_", &host[..i], &host[i + 1..])));
            }
            out.push(root.join(host));
            out.push(root.join(DEFAULT_DIR));
        }
        out
    }

    /// Reads every host directory now (the daemon's start), logging what it cannot use.
    pub fn check_all(&self) {
        for root in &self.roots {
            let Ok(rd) = std::fs::read_dir(root) else {
                continue;
            };
            for e in rd.flatten().filter(|e| e.path().is_dir()) {
                if let Err(err) = read_dir(&e.path()) {
                    tracing::warn!("registry host settings refused: {err}");
                }
            }
        }
    }
}

/// A host directory's settings: its hosts file, or its certificate files when it has none.
fn read_dir(dir: &Path) -> Result<HostsFile> {
    let file = dir.join(HOSTS_FILE);
    match std::fs::read_to_string(&file) {
        Ok(text) if !text.trim().is_empty() => hosts_toml::parse(&file, dir, &text),
        Ok(_) => hosts_toml::cert_dir(dir),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => hosts_toml::cert_dir(dir),
        Err(e) => Err(Error::invalid(format!("{}: {e}", file.display()))),
    }
}

fn listing(dir: &Path) -> Vec<(String, Option<SystemTime>, u64)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| {
                    // Followed: a CA file may be a link into /etc/ssl.
                    let m = std::fs::metadata(e.path()).ok();
                    (
                        e.file_name().to_string_lossy().into_owned(),
                        m.as_ref().and_then(|m| m.modified().ok()),
                        m.map(|m| m.len()).unwrap_or(0),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}
