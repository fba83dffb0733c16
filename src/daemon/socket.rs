//! The CRI unix sockets: parent dir created, a stale socket replaced, mode 0660; an extra socket another process serves is left alone.

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
    // Bound under a temporary name, given its mode, then renamed: the socket never answers
    // at `path` with the umask's mode (a client racing the chmod saw 0755 in the VM lane).
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    let listener = UnixListener::bind(&tmp).ctx(|| format!("bind {}", tmp.display()))?;
    let placed = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o660))
        .ctx(|| format!("chmod {}", tmp.display()))
        .and_then(|()| {
            std::fs::rename(&tmp, path)
                .ctx(|| format!("rename {} to {}", tmp.display(), path.display()))
        });
    if let Err(e) = placed {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(listener)
}

/// Binds `path`, one of `extra_sockets`, as [`bind`] does. The state lock says nothing about
/// it (containerd may serve `/run/containerd/containerd.sock`), so a socket found there is
/// replaced only when nothing answers on it.
pub fn bind_extra(path: &Path) -> Result<UnixListener> {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(Error::precondition(format!(
            "extra_sockets: {} is served by another process (containerd?); stop it or take the \
             path out of extra_sockets",
            path.display()
        )));
    }
    bind(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_socket_appears_with_mode_0660_and_nothing_else_is_left() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run/bosun.sock");
        let _listener = bind(&path).expect("bind");
        let meta = std::fs::symlink_metadata(&path).expect("socket");
        assert!(meta.file_type().is_socket());
        assert_eq!(meta.permissions().mode() & 0o777, 0o660);
        let names: Vec<_> = std::fs::read_dir(dir.path().join("run"))
            .expect("read_dir")
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names, ["bosun.sock"]);
        std::os::unix::net::UnixStream::connect(&path).expect("connect");
    }

    #[tokio::test]
    async fn an_extra_socket_someone_serves_is_left_alone_and_a_stale_one_replaced() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("run/containerd/containerd.sock");
        let live = bind(&path).expect("someone else's");
        let e = bind_extra(&path).expect_err("served");
        assert!(e.to_string().contains("served by another process"), "{e}");
        drop(live);
        let _ours = bind_extra(&path).expect("stale: replaced");
    }

    #[tokio::test]
    async fn a_stale_socket_is_replaced_and_a_file_is_not() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("bosun.sock");
        drop(bind(&path).expect("first"));
        let _again = bind(&path).expect("stale socket replaced");
        let file = dir.path().join("file");
        std::fs::write(&file, "x").expect("write");
        let e = bind(&file).expect_err("not a socket");
        assert!(e.to_string().contains("not a socket"), "{e}");
    }
}
