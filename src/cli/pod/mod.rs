//! `bosun pod apply|get|describe|logs|delete|events|condition`: the standalone supervisor's CLI over bosun.v1.Pods.

pub mod describe;
pub mod logs;
pub mod table;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::core::v1::Pod;

use crate::cli::client::connect;
use crate::proto::bosun::v1 as api;
use api::pods_client::PodsClient;

/// Pod subcommands.
#[derive(Debug, Subcommand)]
pub enum PodCommand {
    /// Create or replace the pods of a manifest file, a directory of them, or stdin (-).
    Apply {
        /// File, directory (every .yaml/.yml/.json, sorted) or - for stdin.
        #[arg(short = 'f', long = "filename", required = true)]
        files: Vec<PathBuf>,
    },
    /// List pods (or one) like kubectl get pods.
    Get(GetArgs),
    /// Show a pod in detail: containers, probes, conditions, volumes, events.
    Describe {
        /// Pod name.
        name: String,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Print a container's log.
    Logs(logs::LogsArgs),
    /// Delete pods gracefully (preStop hooks, stop signal, grace period).
    Delete(DeleteArgs),
    /// Show events (of one pod, or all).
    Events {
        /// Pod name (all pods when left out).
        name: Option<String>,
        #[command(flatten)]
        ns: Namespace,
    },
    /// Set a pod condition (for readinessGates).
    #[command(subcommand)]
    Condition(ConditionCommand),
}

/// `-n NS`.
#[derive(Debug, Args, Clone)]
pub struct Namespace {
    /// Namespace.
    #[arg(short = 'n', long = "namespace", default_value = "default")]
    pub namespace: String,
}

/// Output formats of `get`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Wide,
    Yaml,
    Json,
    Name,
}

/// `bosun pod get`.
#[derive(Debug, Args)]
pub struct GetArgs {
    /// Pod name (all pods when left out).
    pub name: Option<String>,
    #[command(flatten)]
    pub ns: Namespace,
    /// Every namespace.
    #[arg(short = 'A', long = "all-namespaces")]
    pub all_namespaces: bool,
    /// Label selector k=v[,k=v].
    #[arg(short = 'l', long = "selector")]
    pub selector: Option<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum)]
    pub output: Option<Output>,
    /// After listing, print every change.
    #[arg(short = 'w', long = "watch")]
    pub watch: bool,
}

/// `bosun pod delete`.
#[derive(Debug, Args)]
pub struct DeleteArgs {
    /// Pod names.
    #[arg(required = true)]
    pub names: Vec<String>,
    #[command(flatten)]
    pub ns: Namespace,
    /// Seconds to wait for a graceful stop (shortens the pod's terminationGracePeriodSeconds).
    #[arg(long = "grace-period")]
    pub grace_period: Option<i64>,
    /// With --grace-period 0: remove the pod at once (containers still get a minimum grace).
    #[arg(long)]
    pub force: bool,
    /// Wait until the pods are gone.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    pub wait: bool,
}

/// `bosun pod condition ...`.
#[derive(Debug, Subcommand)]
pub enum ConditionCommand {
    /// Set TYPE=True|False on a pod.
    Set {
        /// Pod name.
        name: String,
        /// TYPE=True or TYPE=False.
        condition: String,
        #[command(flatten)]
        ns: Namespace,
        /// Machine-readable reason.
        #[arg(long, default_value = "")]
        reason: String,
        /// Human-readable message.
        #[arg(long, default_value = "")]
        message: String,
    },
}

/// Runs a pod subcommand against the daemon at `socket`. What can be checked here (the
/// manifests `-f` names, flags, a condition, a selector) is checked before the daemon is
/// dialled, so a typo is reported as such and not as a daemon that cannot be reached.
pub async fn run(socket: PathBuf, cmd: PodCommand) -> anyhow::Result<()> {
    match cmd {
        PodCommand::Apply { files } => {
            let mut texts = Vec::new();
            for f in &files {
                texts.extend(manifests(f)?);
            }
            apply(&mut pods(&socket).await?, texts).await
        }
        PodCommand::Get(a) => {
            table::selector(a.selector.as_deref())?;
            table::get(&mut pods(&socket).await?, a).await
        }
        PodCommand::Describe { name, ns } => {
            let v = get_view(&mut pods(&socket).await?, &ns.namespace, &name).await?;
            let text = describe::describe(&v, now_ns())?;
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(())
        }
        PodCommand::Logs(a) => logs::logs(&mut pods(&socket).await?, a).await,
        PodCommand::Delete(a) => {
            if a.force && a.grace_period != Some(0) {
                bail!("--force needs --grace-period 0 (bosun pod delete NAME --grace-period 0 --force)");
            }
            delete(&mut pods(&socket).await?, a).await
        }
        PodCommand::Events { name, ns } => {
            let mut c = pods(&socket).await?;
            let views = match name {
                Some(n) => vec![get_view(&mut c, &ns.namespace, &n).await?],
                None => {
                    c.list(api::ListPodsRequest {
                        namespace: ns.namespace.clone(),
                        labels: Default::default(),
                    })
                    .await?
                    .into_inner()
                    .pods
                }
            };
            let text = describe::events_table(&views, now_ns(), true)?;
            std::io::stdout().write_all(text.as_bytes())?;
            Ok(())
        }
        PodCommand::Condition(ConditionCommand::Set {
            name,
            condition,
            ns,
            reason,
            message,
        }) => {
            let (kind, status) = condition_pair(&condition)?;
            pods(&socket)
                .await?
                .set_condition(api::SetPodConditionRequest {
                    namespace: ns.namespace,
                    name: name.clone(),
                    r#type: kind.to_string(),
                    status: status.to_string(),
                    reason,
                    message,
                })
                .await?;
            writeln!(std::io::stdout(), "pod/{name} condition {kind}={status}")?;
            Ok(())
        }
    }
}

/// A client of the daemon's Pods service at `socket`.
async fn pods(socket: &Path) -> anyhow::Result<PodsClient<tonic::transport::Channel>> {
    Ok(PodsClient::new(connect(socket).await?))
}

/// `TYPE=True|False` taken apart.
fn condition_pair(condition: &str) -> anyhow::Result<(&str, &str)> {
    match condition.split_once('=') {
        Some((kind, status)) if !kind.is_empty() && ["True", "False"].contains(&status) => {
            Ok((kind, status))
        }
        _ => bail!(
            "condition {condition:?}: want TYPE=True or TYPE=False (e.g. bosun pod condition set \
             NAME example.com/ready=True)"
        ),
    }
}

/// Wall-clock nanoseconds now.
pub fn now_ns() -> i64 {
    crate::runtime::status::now_ns()
}

/// The pod of a view.
pub fn pod_of(v: &api::PodView) -> anyhow::Result<Pod> {
    serde_json::from_str(&v.pod_json).context("decode the pod JSON from the daemon")
}

/// One pod's view (NotFound → a kubectl-like error).
pub async fn get_view(
    c: &mut PodsClient<tonic::transport::Channel>,
    namespace: &str,
    name: &str,
) -> anyhow::Result<api::PodView> {
    match c
        .get(api::GetPodRequest {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
        .await
    {
        Ok(r) => Ok(r.into_inner()),
        Err(s) if s.code() == tonic::Code::NotFound => {
            bail!(
                "pods {name:?} not found in namespace {namespace:?} (bosun pod get -A lists \
                 every pod; -n NAMESPACE picks another namespace)"
            )
        }
        Err(s) => Err(s.into()),
    }
}

/// The files `-f` names: a file, every manifest of a directory (sorted), or stdin.
fn manifests(path: &Path) -> anyhow::Result<Vec<(String, String)>> {
    if path == Path::new("-") {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        return Ok(vec![("-".into(), text)]);
    }
    if path.is_dir() {
        let mut files: Vec<PathBuf> = std::fs::read_dir(path)
            .with_context(|| format!("read manifest directory {}", path.display()))?
            .flatten()
            .map(|e| e.path())
            .filter(|p| {
                p.extension()
                    .is_some_and(|x| x == "yaml" || x == "yml" || x == "json")
            })
            .collect();
        files.sort();
        return files.iter().map(|p| read(p)).collect();
    }
    Ok(vec![read(path)?])
}

fn read(p: &Path) -> anyhow::Result<(String, String)> {
    match std::fs::read_to_string(p) {
        Ok(text) => Ok((p.display().to_string(), text)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => bail!(
            "manifest {}: no such file (-f takes a Pod manifest file, a directory of them, or - \
             for stdin)",
            p.display()
        ),
        Err(e) => Err(e).with_context(|| format!("read manifest {}", p.display())),
    }
}

async fn apply(
    c: &mut PodsClient<tonic::transport::Channel>,
    texts: Vec<(String, String)>,
) -> anyhow::Result<()> {
    if texts.is_empty() {
        bail!("no manifest to apply (a directory gives its .yaml, .yml and .json files)");
    }
    let mut failed = 0;
    for (source, text) in texts {
        match c
            .apply(api::ApplyPodsRequest {
                text,
                source: source.clone(),
            })
            .await
        {
            Ok(r) => {
                let r = r.into_inner();
                for w in &r.warnings {
                    eprintln!("Warning: {w}");
                }
                for p in &r.pods {
                    writeln!(std::io::stdout(), "pod/{} {}", p.name, p.action)?;
                }
            }
            Err(s) => {
                failed += 1;
                let msg = s.message();
                if msg.starts_with(&source) {
                    eprintln!("error: {msg}");
                } else {
                    eprintln!("error: {source}: {msg}");
                }
            }
        }
    }
    if failed > 0 {
        bail!(
            "{failed} manifest(s) were not applied: fix what the errors above name and apply \
             again"
        );
    }
    Ok(())
}

async fn delete(
    c: &mut PodsClient<tonic::transport::Channel>,
    a: DeleteArgs,
) -> anyhow::Result<()> {
    for name in &a.names {
        c.delete(api::DeletePodRequest {
            namespace: a.ns.namespace.clone(),
            name: name.clone(),
            grace_period: a.grace_period,
            force: a.force,
        })
        .await
        .map_err(|s| anyhow::anyhow!("pod/{name}: {}", s.message()))?;
        writeln!(std::io::stdout(), "pod/{name} deleted")?;
    }
    if !a.wait {
        return Ok(());
    }
    for name in &a.names {
        loop {
            let r = c
                .get(api::GetPodRequest {
                    namespace: a.ns.namespace.clone(),
                    name: name.clone(),
                })
                .await;
            match r {
                Err(s) if s.code() == tonic::Code::NotFound => break,
                Err(s) => return Err(s.into()),
                Ok(_) => tokio::time::sleep(Duration::from_millis(200)).await,
            }
        }
    }
    Ok(())
}
