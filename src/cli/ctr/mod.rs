//! `ctr`, containerd's CLI, for what kind and CI scripts ask of a node: image import/list/remove/tag/pull and version, over bosun's socket (argv[0] `ctr`, or `bosun ctr`).

pub mod args;
#[cfg(test)]
mod args_tests;
mod flags;
mod images;
mod password;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::config::DEFAULT_SOCKET;
use args::{Command, Invocation, Parsed, CONTAINERD_SOCKET};

/// Runs `ctr` with `args` (after the program name); the process exit code.
pub fn main(args: Vec<OsString>) -> i32 {
    let args: Vec<String> = args
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let parsed = match args::parse(&args, |k| std::env::var(k).ok()) {
        Ok(p) => p,
        Err(refusal) => {
            eprintln!("ctr: {refusal}");
            return 1;
        }
    };
    let inv = match parsed {
        Parsed::Print(text) => {
            print!("{text}");
            return 0;
        }
        Parsed::Run(inv) => *inv,
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("ctr: start tokio runtime: {e}");
            return 1;
        }
    };
    let timeout = inv.timeout;
    let run = run(inv);
    let result = rt.block_on(async {
        match timeout {
            Some(t) => tokio::time::timeout(t, run)
                .await
                .unwrap_or_else(|_| Err(anyhow::anyhow!("timed out after {t:?} (--timeout)"))),
            None => run.await,
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            if let Some(io) = e.downcast_ref::<std::io::Error>() {
                if io.kind() == std::io::ErrorKind::BrokenPipe {
                    return 0;
                }
            }
            match e.downcast_ref::<tonic::Status>() {
                Some(s) if s.code() == tonic::Code::Unimplemented => eprintln!(
                    "ctr: the socket does not serve bosun's image API (is it containerd's own \
                     socket?): {}",
                    s.message()
                ),
                Some(s) => eprintln!("ctr: {}", s.message()),
                None => eprintln!("ctr: {e:#}"),
            }
            1
        }
    }
}

/// The socket: `-a`/`$CONTAINERD_ADDRESS`, else `$BOSUN_SOCKET`, else bosun's own when it
/// exists, else containerd's path (which bosun serves with `extra_sockets`).
fn socket(inv: &Invocation) -> PathBuf {
    if let Some(a) = &inv.address {
        return a.clone();
    }
    if let Some(s) = std::env::var_os("BOSUN_SOCKET").filter(|s| !s.is_empty()) {
        return s.into();
    }
    if Path::new(DEFAULT_SOCKET).exists() {
        PathBuf::from(DEFAULT_SOCKET)
    } else {
        PathBuf::from(CONTAINERD_SOCKET)
    }
}

async fn run(inv: Invocation) -> anyhow::Result<()> {
    let socket = socket(&inv);
    let connect = crate::cli::client::connect(&socket);
    let channel = match inv.connect_timeout {
        Some(t) => tokio::time::timeout(t, connect).await.map_err(|_| {
            anyhow::anyhow!(
                "connect to bosun at {}: timed out after {t:?}",
                socket.display()
            )
        })??,
        None => connect.await?,
    };
    match inv.command {
        Command::Version => images::version(&channel).await,
        Command::Import(a) => images::import(&channel, a).await,
        Command::List { quiet, names } => images::list(&channel, quiet, &names).await,
        Command::Remove(refs) => images::remove(&channel, &refs).await,
        Command::Tag {
            source,
            targets,
            force,
        } => images::tag(&channel, source, targets, force).await,
        Command::Pull(p) => images::pull(&channel, p).await,
    }
}
