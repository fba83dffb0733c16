//! Command-line interface: `bosun daemon`, `bosun image …`, `bosun pod …`, `bosun version`, and containerd's `ctr` (as `bosun ctr` or a link named `ctr`).

pub mod client;
pub mod ctr;
pub mod image;
pub mod node;
pub mod pod;
pub mod stream;

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{CgroupDriver, Config, LogFormat, DEFAULT_SOCKET};

/// bosun: a small, predictable Kubernetes CRI runtime.
#[derive(Debug, Parser)]
#[command(name = "bosun", version = crate::version::LONG, about)]
pub struct Cli {
    /// The daemon's socket (client commands), or where to serve (daemon).
    #[arg(long, global = true, env = "BOSUN_SOCKET")]
    pub socket: Option<PathBuf>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon (CRI on a unix socket).
    Daemon(DaemonArgs),
    /// Manage images.
    #[command(subcommand)]
    Image(image::ImageCommand),
    /// Run Kubernetes Pod manifests on this node (standalone supervisor).
    #[command(subcommand)]
    Pod(pod::PodCommand),
    /// The standalone node: capacity, allocatable, pressure, events.
    #[command(subcommand)]
    Node(node::NodeCommand),
    /// Print client and daemon versions.
    Version,
    /// Run a command in a running container (exits with its exit code).
    Exec(stream::ExecArgs),
    /// Attach to a running container's stdio.
    Attach(stream::AttachArgs),
    /// Forward local TCP ports to a pod.
    PortForward(stream::PortForwardArgs),
    /// containerd's `ctr` image commands, as kind and CI scripts call them (also run by a link
    /// to bosun named `ctr`): `bosun ctr -n k8s.io images import -`.
    #[command(disable_help_flag = true)]
    Ctr {
        /// ctr's arguments, verbatim.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<std::ffi::OsString>,
    },
}

/// Daemon flags; each overrides the config file's key of the same name.
#[derive(Debug, Args)]
pub struct DaemonArgs {
    /// Config file (default /etc/bosun/config.toml, optional).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Persistent data directory.
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Volatile state directory.
    #[arg(long)]
    pub state: Option<PathBuf>,
    /// OCI runtime binary.
    #[arg(long)]
    pub runtime: Option<PathBuf>,
    /// cgroup driver.
    #[arg(long, value_enum)]
    pub cgroup_driver: Option<CgroupDriver>,
    /// Log filter (e.g. info, debug).
    #[arg(long)]
    pub log_level: Option<String>,
    /// Log format.
    #[arg(long, value_enum)]
    pub log_format: Option<LogFormat>,
}

impl DaemonArgs {
    /// The config file merged with these flags, checked (a bad key or flag is refused here).
    pub fn resolve(&self, socket: Option<PathBuf>) -> crate::Result<Config> {
        Config::load(self.config.as_deref(), |c| {
            if let Some(s) = socket {
                c.socket = s;
            }
            if let Some(v) = &self.root {
                c.root = v.clone();
            }
            if let Some(v) = &self.state {
                c.state = v.clone();
            }
            if let Some(v) = &self.runtime {
                c.runtime = v.clone();
            }
            if let Some(v) = self.cgroup_driver {
                c.cgroup_driver = v;
            }
            if let Some(v) = &self.log_level {
                c.log_level = v.clone();
            }
            if let Some(v) = self.log_format {
                c.log_format = v;
            }
        })
    }
}

/// The socket client commands talk to.
pub fn client_socket(cli: &Cli) -> PathBuf {
    cli.socket
        .clone()
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

/// What to do next after the daemon answered a call with `code`, where its message alone
/// does not say (`None`: it does).
pub fn status_hint(code: tonic::Code) -> Option<&'static str> {
    match code {
        tonic::Code::Unavailable => {
            Some("the daemon stopped answering: see systemctl status bosun, or its log")
        }
        tonic::Code::Unimplemented => {
            Some("this daemon does not serve the call: compare the versions with bosun version")
        }
        _ => None,
    }
}

/// `bosun version`: this binary's version and the daemon's, if reachable.
pub async fn version(socket: &std::path::Path) -> anyhow::Result<()> {
    use crate::proto::runtime::v1 as pb;
    use std::io::Write;
    writeln!(
        std::io::stdout(),
        "client: bosun {}",
        crate::version::long()
    )?;
    let channel = client::connect(socket).await?;
    let v = pb::runtime_service_client::RuntimeServiceClient::new(channel)
        .version(pb::VersionRequest {
            version: String::new(),
        })
        .await?
        .into_inner();
    writeln!(
        std::io::stdout(),
        "daemon: {} {} (CRI {})",
        v.runtime_name,
        v.runtime_version,
        v.runtime_api_version
    )?;
    Ok(())
}
