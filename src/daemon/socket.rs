//! The CRI unix socket: parent dir created, a stale socket replaced, mode 0660.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::UnixListener;

use crate::error::{Error, Result, ResultExt};

/// Binds `path`. Call only while holding the state lock, so a socket found there is stale.
pub fn bind(path: &Path) -> Result<UnixListener> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).ctx(|| format!("create {}", dir.display()))?;
    }
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            std::fs::remove_file(path).ctx(|| format!("remove stale socket {}", path.display()))?;
        }
        Ok(_) => {
            return Err(Error::precondition(format!(
                "{} exists and is not a socket; refusing to replace it",
                path.display()
            )))
        }
        Err(_) => {}
    }
    let listener = UnixListener::bind(path).ctx(|| format!("bind {}", path.display()))?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .ctx(|| format!("chmod {}", path.display()))?;
    Ok(listener)
}
