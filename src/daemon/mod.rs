//! The daemon: take the root and state locks, open the stores, bind the socket, serve CRI and bosun.v1 until a signal.

pub mod authority;
pub mod deadline;
pub mod idle;
pub mod lock;
pub mod logging;
pub mod notify;
pub mod socket;

use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tokio_stream::wrappers::UnixListenerStream;
use tonic::transport::Server;

use crate::api::{ApiImages, ApiPods};
use crate::config::Config;
use crate::cri::{CriImages, CriRuntime};
use crate::error::{Error, Result};
use crate::image::service::Images;
use crate::proto::bosun::v1::images_server::ImagesServer;
use crate::proto::bosun::v1::pods_server::PodsServer;
use crate::proto::runtime::v1::image_service_server::ImageServiceServer;
use crate::proto::runtime::v1::runtime_service_server::RuntimeServiceServer;

/// Largest gRPC message accepted or sent (kubelet uses 16 MiB; ExecSync output can be 2 × 16 MiB).
pub const MAX_MESSAGE: usize = 64 << 20;

/// A bare `runtime` name (`runc`) becomes its path in PATH, found once here: otherwise every
/// runc call (each monitor's `runc run`, every `runc delete`) tries PATH's entries in turn.
/// A name not found stays as it is, looked up at each call as before.
fn resolve_runtime(config: &mut Config) {
    let bare = config.runtime.components().count() == 1 && config.runtime.is_relative();
    if !bare {
        return;
    }
    if let Some(path) = config
        .runtime
        .to_str()
        .and_then(crate::oci::host::find_in_path)
    {
        tracing::debug!(runtime = %path.display(), "OCI runtime found in PATH");
        config.runtime = path;
    }
}

/// Runs the daemon until SIGTERM or SIGINT; containers are left running on exit. `notifier`
/// (systemd's `$NOTIFY_SOCKET`, see [`notify`]) hears `READY=1` once the socket serves.
pub async fn run(mut config: Config, notifier: Option<notify::Notifier>) -> Result<()> {
    resolve_runtime(&mut config);
    // Before any lock: what the config needs of this host (its values were checked at load).
    config.check_host()?;
    let config = Arc::new(config);
    // Handlers first: a SIGTERM that arrives once the socket exists must be a clean shutdown,
    // never the default action.
    let (mut term, mut int) = (
        signal(SignalKind::terminate())
            .map_err(|e| Error::internal(format!("install SIGTERM handler: {e}")))?,
        signal(SignalKind::interrupt())
            .map_err(|e| Error::internal(format!("install SIGINT handler: {e}")))?,
    );
    arm_failpoints()?;
    // The root holds the stores, the state dir volatile runtime state: one daemon for each.
    // A killed daemon still exiting holds them a while longer: waited for, but a signal
    // still stops this one.
    let locks = async {
        let root = lock::StateLock::acquire(&config.root, "root").await?;
        let state = lock::StateLock::acquire(&config.state, "state").await?;
        Ok::<_, Error>((root, state))
    };
    let (_root_lock, _state_lock) = tokio::select! {
        locks = locks => locks?,
        _ = term.recv() => { tracing::info!("SIGTERM while waiting for the lock"); return Ok(()) }
        _ = int.recv() => { tracing::info!("SIGINT while waiting for the lock"); return Ok(()) }
    };
    // Containers' writable layers need overlayfs to accept the root as an upper layer (not
    // so on an overlay root: a node container without a /var volume): refused here, saying
    // what to mount, rather than every container failing to start.
    crate::runtime::overlay_probe::check(&config.root)?;
    let images = Images::open(&config)?;
    // Recovery before serving: every sandbox and container is back before the socket exists.
    let runtime = crate::runtime::Runtime::open(config.clone(), images.clone()).await?;
    // Content a crash left outside any image (a pull or GC cut short) is collected now; held
    // container layers are leased and survive it.
    images.spawn_gc(None);
    let metrics = crate::metrics::Metrics::new(Some(runtime.clone()));
    let metrics_server = serve_metrics(&config, &metrics).await?;
    // The streaming server (exec/attach/port-forward URLs) is up before the CRI socket.
    let streaming = crate::stream::Server::start(
        config.stream.address,
        Arc::new(crate::stream::RuntimeBackend(runtime.clone())),
    )
    .await?;
    // Supervised pods are picked up (and their probes restarted) before the socket exists.
    let supervisor =
        crate::pod::supervisor::Supervisor::open(runtime.clone(), images.clone(), config.clone())
            .await?;
    let listener = socket::bind(&config.socket)?;
    let mut extra = Vec::new();
    let mut bound = vec![config.socket.clone()];
    for path in &config.extra_sockets {
        match socket::bind_extra(path) {
            Ok(l) => {
                extra.push(l);
                bound.push(path.clone());
            }
            Err(e) => {
                // Only what this daemon made: the path may be another process's socket.
                remove_sockets(&bound);
                return Err(e);
            }
        }
    }
    tracing::info!(
        socket = %config.socket.display(),
        extra_sockets = ?config.extra_sockets,
        root = %config.root.display(),
        version = %crate::version::long(),
        images = images.list().len(),
        sandboxes = runtime.list_sandboxes(&Default::default()).len(),
        containers = runtime.list_containers(&Default::default()).len(),
        streaming = %streaming.addr(),
        "bosun serving"
    );

    // A signal starts a graceful drain (HTTP/2 GOAWAY); clients that ignore it cannot hold the
    // daemon: after DRAIN_DEADLINE it exits anyway. Containers are never touched here.
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = Server::builder()
        .layer(crate::metrics::layer::MetricsLayer::new(metrics.clone()))
        // Inside the metrics (which then count DeadlineExceeded) and inside tonic's own
        // grpc-timeout, which would answer Cancelled.
        .layer(deadline::DeadlineLayer)
        .add_service(
            RuntimeServiceServer::new(
                CriRuntime::new(config.clone(), runtime.clone())
                    .with_streaming(streaming.clone())
                    .with_pods(supervisor.clone()),
            )
            .max_decoding_message_size(MAX_MESSAGE)
            .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(
            ImageServiceServer::new(CriImages::new(images.clone()))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .add_service(ImagesServer::new(ApiImages::new(images.clone())))
        .add_service(
            PodsServer::new(ApiPods::new(supervisor.clone()))
                .max_decoding_message_size(MAX_MESSAGE)
                .max_encoding_message_size(MAX_MESSAGE),
        )
        .serve_with_incoming_shutdown(incoming(listener, extra), async {
            let _ = stop_rx.await;
        });
    let mut server = tokio::spawn(server);
    // What startup touched (config, recovery, server set-up) is given back, and again whenever
    // the daemon has been quiet for a while after some calls.
    idle::spawn(metrics.clone());
    // The listener is bound and accepting: connections queue until the server task polls them.
    notify::send(notifier.as_ref(), "READY=1\nSTATUS=serving");
    let signalled = tokio::select! {
        served = &mut server => Some(served),
        _ = term.recv() => { tracing::info!("SIGTERM: shutting down"); None }
        _ = int.recv() => { tracing::info!("SIGINT: shutting down"); None }
    };
    let served = match signalled {
        Some(served) => served,
        None => {
            notify::send(notifier.as_ref(), "STOPPING=1");
            let _ = stop_tx.send(());
            match tokio::time::timeout(DRAIN_DEADLINE, &mut server).await {
                Ok(served) => served,
                Err(_) => {
                    tracing::warn!(
                        "clients still connected {}s after the signal: exiting without them",
                        DRAIN_DEADLINE.as_secs()
                    );
                    server.abort();
                    Ok(Ok(()))
                }
            }
        }
    };
    remove_sockets(&bound);
    if let Some(task) = metrics_server {
        task.abort();
    }
    served
        .map_err(|e| Error::internal(format!("serve task: {e}")))?
        .map_err(|e| Error::internal(format!("serve {}: {e}", config.socket.display())))?;
    tracing::info!("bosun stopped");
    Ok(())
}

/// The sockets' connections (the main one and `extra_sockets`, one server for all), each
/// behind [`authority::AuthorityFix`] so that grpc-core clients' percent-encoded `:authority`
/// is accepted (issue 16 item 10).
fn incoming(
    listener: tokio::net::UnixListener,
    extra: Vec<tokio::net::UnixListener>,
) -> impl futures::Stream<Item = std::io::Result<authority::AuthorityFix<tokio::net::UnixStream>>> {
    use futures::StreamExt;
    futures::stream::select_all(
        std::iter::once(listener)
            .chain(extra)
            .map(UnixListenerStream::new),
    )
    .map(|conn| conn.map(authority::AuthorityFix::new))
}

/// Removes the sockets this daemon made (at exit; the next start would replace them anyway).
fn remove_sockets(bound: &[std::path::PathBuf]) {
    for path in bound {
        let _ = std::fs::remove_file(path);
    }
}

/// Arms the test build's failpoints from `BOSUN_FAILPOINTS` (see `src/failpoint.rs`).
#[cfg(feature = "failpoints")]
fn arm_failpoints() -> Result<()> {
    let armed = crate::failpoint::init()?;
    if !armed.is_empty() {
        tracing::warn!(?armed, "failpoints armed (test build)");
    }
    Ok(())
}

/// A build without failpoints says so when a test tries to arm some.
#[cfg(not(feature = "failpoints"))]
fn arm_failpoints() -> Result<()> {
    if std::env::var_os("BOSUN_FAILPOINTS").is_some() {
        tracing::warn!("BOSUN_FAILPOINTS is set, but failpoints exist only in `cargo test` builds");
    }
    Ok(())
}

/// Starts the `/metrics` endpoint when `metrics_address` is set.
async fn serve_metrics(
    config: &Config,
    metrics: &Arc<crate::metrics::Metrics>,
) -> Result<Option<tokio::task::JoinHandle<()>>> {
    if config.metrics_address.is_empty() {
        return Ok(None);
    }
    let (bound, task) =
        crate::metrics::server::serve(&config.metrics_address, &config.state, metrics.clone())
            .await?;
    tracing::info!(address = %bound, "metrics served on http://{bound}/metrics");
    Ok(Some(task))
}

/// How long a SIGTERM/SIGINT waits for in-flight calls before the daemon exits regardless.
pub const DRAIN_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_runtime_name_is_resolved_once_through_path() {
        let resolved = |runtime: &str| {
            let mut config = Config {
                runtime: runtime.into(),
                ..Config::default()
            };
            resolve_runtime(&mut config);
            config.runtime
        };
        let sh = resolved("sh");
        assert!(sh.is_absolute() && sh.ends_with("sh"), "{}", sh.display());
        assert_eq!(
            sh,
            crate::oci::host::find_in_path("sh").expect("sh in PATH")
        );
        for kept in ["/opt/x/runc", "./runc", "bin/runc", "no-such-runtime-b05un"] {
            assert_eq!(resolved(kept), std::path::PathBuf::from(kept), "{kept}");
        }
    }
}
