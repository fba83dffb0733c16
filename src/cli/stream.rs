//! `bosun exec`, `bosun attach` and `bosun port-forward`: a CRI streaming RPC for the URL, then the same protocols crictl speaks.

use std::io::Write;
use std::os::fd::AsFd;
use std::path::PathBuf;

use clap::Args;
use tokio::sync::mpsc;

use crate::proto::runtime::v1 as pb;
use crate::runtime::TerminalSize;
use crate::stream::client::{self, spdy, ws, ExecIo, Transport};
use crate::stream::status::Outcome;
use pb::runtime_service_client::RuntimeServiceClient;

/// `bosun exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Pass stdin to the process.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// Allocate a terminal (stderr is merged into stdout).
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Streaming transport.
    #[arg(long, value_enum, default_value_t)]
    pub transport: Transport,
    /// Container id (or unique prefix).
    pub container: String,
    /// The command and its arguments.
    #[arg(last = true, required = true)]
    pub cmd: Vec<String>,
}

/// `bosun attach`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// Pass stdin to the container.
    #[arg(short = 'i', long)]
    pub stdin: bool,
    /// The container has a terminal.
    #[arg(short = 't', long)]
    pub tty: bool,
    /// Streaming transport.
    #[arg(long, value_enum, default_value_t)]
    pub transport: Transport,
    /// Container id (or unique prefix).
    pub container: String,
}

/// `bosun port-forward`.
#[derive(Debug, Args)]
pub struct PortForwardArgs {
    /// Streaming transport (websocket: SPDY tunnelled over WebSocket, as crictl does).
    #[arg(long, value_enum, default_value_t)]
    pub transport: Transport,
    /// Local address to listen on.
    #[arg(long, default_value = "127.0.0.1")]
    pub address: std::net::IpAddr,
    /// Pod sandbox id (or unique prefix).
    pub pod: String,
    /// LOCAL:REMOTE port pairs (LOCAL 0 or empty: any free port; a single PORT means PORT:PORT).
    #[arg(required = true)]
    pub ports: Vec<String>,
}

/// Puts the terminal on `fd` in raw mode until dropped.
struct RawMode(Option<rustix::termios::Termios>);

impl RawMode {
    fn enter(on: bool) -> RawMode {
        let stdin = std::io::stdin();
        if !on || !rustix::termios::isatty(stdin.as_fd()) {
            return RawMode(None);
        }
        let Ok(saved) = rustix::termios::tcgetattr(stdin.as_fd()) else {
            return RawMode(None);
        };
        let mut raw = saved.clone();
        raw.make_raw();
        if rustix::termios::tcsetattr(stdin.as_fd(), rustix::termios::OptionalActions::Now, &raw)
            .is_err()
        {
            return RawMode(None);
        }
        RawMode(Some(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(saved) = self.0.take() {
            let _ = rustix::termios::tcsetattr(
                std::io::stdin().as_fd(),
                rustix::termios::OptionalActions::Now,
                &saved,
            );
        }
    }
}

/// The local terminal's size (stdout, else stdin), if either is a terminal.
fn terminal_size() -> Option<TerminalSize> {
    let size = rustix::termios::tcgetwinsize(std::io::stdout().as_fd())
        .or_else(|_| rustix::termios::tcgetwinsize(std::io::stdin().as_fd()))
        .ok()?;
    (size.ws_col > 0).then_some(TerminalSize {
        width: size.ws_col,
        height: size.ws_row,
    })
}

/// The current size now and after every SIGWINCH.
fn resizes() -> mpsc::Receiver<TerminalSize> {
    let (tx, rx) = mpsc::channel(4);
    tokio::spawn(async move {
        if let Some(s) = terminal_size() {
            let _ = tx.send(s).await;
        }
        let Ok(mut winch) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())
        else {
            return;
        };
        while winch.recv().await.is_some() {
            if let Some(s) = terminal_size() {
                if tx.send(s).await.is_err() {
                    return;
                }
            }
        }
    });
    rx
}

/// Runs a session on `url` with the local stdio and exits the process with its outcome
/// (the remote exit code; 1 with a message when the session failed).
async fn session(url: &str, transport: Transport, stdin: bool, tty: bool) -> anyhow::Result<()> {
    let raw = RawMode::enter(tty && stdin);
    let io = ExecIo {
        stdin: stdin.then(|| Box::pin(tokio::io::stdin()) as _),
        stdout: Some(Box::pin(tokio::io::stdout())),
        stderr: (!tty).then(|| Box::pin(tokio::io::stderr()) as _),
        resize: tty.then(resizes),
        tty,
    };
    let outcome = client::exec(url, transport, io).await;
    drop(raw);
    let code = match outcome? {
        Outcome::Success => 0,
        Outcome::ExitCode(c) => c,
        Outcome::Failed(m) => {
            let _ = writeln!(std::io::stderr(), "bosun: {m}");
            1
        }
    };
    // A blocking read of our stdin may still be pending: leave without waiting for it.
    std::process::exit(code);
}

/// `bosun exec`: exits with the command's exit code.
pub async fn exec(socket: PathBuf, args: ExecArgs) -> anyhow::Result<()> {
    let channel = super::client::connect(&socket).await?;
    let url = RuntimeServiceClient::new(channel)
        .exec(pb::ExecRequest {
            container_id: args.container,
            cmd: args.cmd,
            tty: args.tty,
            stdin: args.stdin,
            stdout: true,
            stderr: !args.tty,
        })
        .await?
        .into_inner()
        .url;
    session(&url, args.transport, args.stdin, args.tty).await
}

/// `bosun attach`: detaching (closing the connection) leaves the container running.
pub async fn attach(socket: PathBuf, args: AttachArgs) -> anyhow::Result<()> {
    let channel = super::client::connect(&socket).await?;
    let url = RuntimeServiceClient::new(channel)
        .attach(pb::AttachRequest {
            container_id: args.container,
            stdin: args.stdin,
            tty: args.tty,
            stdout: true,
            stderr: !args.tty,
        })
        .await?
        .into_inner()
        .url;
    session(&url, args.transport, args.stdin, args.tty).await
}

/// `LOCAL:REMOTE` → (local, remote).
fn parse_pair(s: &str) -> anyhow::Result<(u16, u16)> {
    let (l, r) = match s.split_once(':') {
        Some((l, r)) => (if l.is_empty() { "0" } else { l }, r),
        None => (s, s),
    };
    let remote: u16 = r
        .parse()
        .map_err(|_| anyhow::anyhow!("bad port pair {s:?}"))?;
    let local: u16 = l
        .parse()
        .map_err(|_| anyhow::anyhow!("bad port pair {s:?}"))?;
    anyhow::ensure!(remote != 0, "bad port pair {s:?}: remote port 0");
    Ok((local, remote))
}

/// `bosun port-forward`: listens locally and forwards each connection until interrupted.
pub async fn port_forward(socket: PathBuf, args: PortForwardArgs) -> anyhow::Result<()> {
    let pairs = args
        .ports
        .iter()
        .map(|p| parse_pair(p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let channel = super::client::connect(&socket).await?;
    let url = RuntimeServiceClient::new(channel)
        .port_forward(pb::PortForwardRequest {
            pod_sandbox_id: args.pod,
            port: pairs.iter().map(|(_, r)| i32::from(*r)).collect(),
        })
        .await?
        .into_inner()
        .url;
    let forwarder = std::sync::Arc::new(match args.transport {
        Transport::Spdy => spdy::PortForwarder::connect(&url).await?,
        Transport::Websocket => ws::port_forward_tunnel(&url).await?,
    });
    let mut listeners = Vec::new();
    for (local, remote) in pairs {
        let l = tokio::net::TcpListener::bind((args.address, local)).await?;
        let addr = l.local_addr()?;
        writeln!(std::io::stdout(), "Forwarding from {addr} -> {remote}")?;
        std::io::stdout().flush()?;
        listeners.push((l, remote));
    }
    let accepts = listeners.into_iter().map(|(l, remote)| {
        let forwarder = forwarder.clone();
        async move {
            loop {
                let (conn, peer) = l.accept().await?;
                let forwarder = forwarder.clone();
                tokio::spawn(async move {
                    if let Err(e) = forwarder.forward(remote, conn).await {
                        let _ = writeln!(std::io::stderr(), "bosun: {peer} -> {remote}: {e}");
                    }
                });
            }
            #[allow(unreachable_code)]
            Ok::<(), anyhow::Error>(())
        }
    });
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        r = futures::future::try_join_all(accepts) => { r?; }
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
        () = forwarder.closed() => anyhow::bail!("port forward: the streaming connection ended"),
    }
    forwarder.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_pairs() {
        assert_eq!(parse_pair("8080:80").ok(), Some((8080, 80)));
        assert_eq!(parse_pair(":80").ok(), Some((0, 80)));
        assert_eq!(parse_pair("80").ok(), Some((80, 80)));
        assert!(parse_pair("x:80").is_err());
        assert!(parse_pair("80:0").is_err());
    }
}
