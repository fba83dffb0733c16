//! Client side of the streaming protocols (what crictl and kubectl speak): used by `bosun exec/attach/port-forward` and by the server's tests.

pub mod spdy;
pub mod ws;

use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;

use crate::error::{Error, Result};
use crate::runtime::TerminalSize;

/// Which upgrade a client uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Transport {
    /// SPDY/3.1 (crictl's and the kubelet's default).
    #[default]
    Spdy,
    /// WebSocket (`crictl --transport websocket`).
    Websocket,
}

/// The local ends of an exec or attach.
#[derive(Default)]
pub struct ExecIo {
    /// Sent as the process's stdin; its EOF is propagated.
    pub stdin: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// Receives stdout (with a TTY: the terminal's output).
    pub stdout: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Receives stderr (never with a TTY).
    pub stderr: Option<Pin<Box<dyn AsyncWrite + Send>>>,
    /// Terminal sizes to send (TTY only).
    pub resize: Option<mpsc::Receiver<TerminalSize>>,
    /// Whether the session has a terminal.
    pub tty: bool,
}

/// `host:port` and path (with query) of an `http://` URL.
pub fn split_url(url: &str) -> Result<(&str, &str)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| Error::invalid(format!("streaming URL {url}: only http:// is served")))?;
    Ok(match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    })
}

/// Runs an exec or attach on `url` over `transport`; the outcome comes from the error stream.
pub async fn exec(
    url: &str,
    transport: Transport,
    io: ExecIo,
) -> Result<crate::stream::status::Outcome> {
    match transport {
        Transport::Spdy => spdy::exec(url, &spdy::EXEC_PROTOCOLS, io).await,
        Transport::Websocket => ws::exec(url, &ws::EXEC_PROTOCOLS, io).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_split_into_authority_and_path() {
        assert_eq!(
            split_url("http://127.0.0.1:5/exec/ab").ok(),
            Some(("127.0.0.1:5", "/exec/ab"))
        );
        assert!(split_url("https://x/y").is_err());
    }
}
