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
            // tonic's transport error hides its cause ("transport error"): show the chain.
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                let part = s.to_string();
                if !msg.contains(&part) {
                    msg = format!("{msg}: {part}");
                }
                src = s.source();
            }
            anyhow::anyhow!(
                "connect to bosun at {}: {msg} (is the daemon running?)",
                socket.display()
            )
        })?;
    Ok(channel)
}
