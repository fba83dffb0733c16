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
        .map_err(|e| anyhow::anyhow!("connect to bosun at {}: {e}", socket.display()))?;
    Ok(channel)
}
