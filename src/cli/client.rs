//! Connects a tonic channel to the daemon's unix socket (used by the CLI and the integration tests).

use std::path::{Path, PathBuf};

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// A channel to the daemon at `socket`.
pub async fn connect(socket: &Path) -> anyhow::Result<Channel> {
    let path: PathBuf = socket.to_path_buf();
    // The URI is required by tonic but unused: the connector dials the socket.
    let channel = Endpoint::try_from("http://[::1]:0")?
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let path = path.clone();
            async move {
                tokio::net::UnixStream::connect(path)
                    .await
                    .map(TokioIo::new)
            }
        }))
        .await
        .map_err(|e| {
            // tonic's transport error hides its cause ("transport error"): show the chain,
            // and say what to do about the cause.
            let mut msg = e.to_string();
            let mut kind = None;
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                let part = s.to_string();
                if !msg.contains(&part) {
                    msg = format!("{msg}: {part}");
                }
                if let Some(io) = s.downcast_ref::<std::io::Error>() {
                    kind = Some(io.kind());
                }
                src = s.source();
            }
            anyhow::anyhow!(unreachable(socket, kind, &msg))
        })?;
    Ok(channel)
}

/// What to do next when nothing answers at `socket`.
const START: &str = "start the daemon (systemctl start bosun, or bosun daemon), or name the \
                     socket it serves with --socket PATH or BOSUN_SOCKET";

/// Why the daemon at `socket` could not be reached (`kind`: the dial's I/O error, `msg`: the
/// whole chain), and what to do next.
fn unreachable(socket: &Path, kind: Option<std::io::ErrorKind>, msg: &str) -> String {
    use std::io::ErrorKind;
    let at = socket.display();
    match kind {
        Some(ErrorKind::NotFound) => {
            format!("no bosun daemon at {at}: the socket does not exist; {START}")
        }
        Some(ErrorKind::ConnectionRefused) => format!(
            "no bosun daemon at {at}: the socket exists but nothing serves it (a daemon that \
             stopped?); {START}"
        ),
        Some(ErrorKind::PermissionDenied) => format!(
            "cannot connect to bosun at {at}: permission denied (the socket is mode 0660: run \
             as root or as a member of its group)"
        ),
        _ => format!(
            "cannot connect to bosun at {at}: {msg}; is the daemon running (systemctl status \
             bosun)? Another socket: --socket PATH or BOSUN_SOCKET"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_socket_names_it_and_what_to_do() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("bosun.sock");
        let e = connect(&socket).await.expect_err("no daemon").to_string();
        assert!(e.contains(&socket.display().to_string()), "{e}");
        assert!(e.contains("does not exist"), "{e}");
        assert!(
            e.contains("systemctl start bosun") && e.contains("--socket"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn a_socket_nobody_serves_is_told_apart() {
        let dir = tempfile::tempdir().expect("tempdir");
        let socket = dir.path().join("bosun.sock");
        drop(std::os::unix::net::UnixListener::bind(&socket).expect("bind"));
        let e = connect(&socket).await.expect_err("no daemon").to_string();
        assert!(e.contains("nothing serves it"), "{e}");
        assert!(e.contains("systemctl start bosun"), "{e}");
    }

    #[test]
    fn permission_and_other_errors_say_what_to_do() {
        let socket = Path::new("/run/bosun/bosun.sock");
        let e = unreachable(socket, Some(std::io::ErrorKind::PermissionDenied), "x");
        assert!(e.contains("run as root"), "{e}");
        let e = unreachable(socket, None, "transport error: boom");
        assert!(e.contains("boom") && e.contains("--socket"), "{e}");
    }
}
