//! The runtime service: the domain API `cri/` (and later `pod/`) calls for sandboxes and containers.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use super::handle::Handle;
use super::state::dir::StateDir;
use super::state::lock;
use super::state::meta::{ContainerEntry, ContainerMeta, SandboxEntry, SandboxMeta};
use super::state::paths::Layout;
use super::state::status::{ContainerState, SandboxState};
use super::state::table::Filter;
use crate::cgroups::warm::Warmer;
use crate::config::Config;
use crate::error::{Error, Result, ResultExt};
use crate::image::service::Images;
use crate::network::{Cni, FakeNetwork, Network};
use crate::oci::runc::{Handler, Handlers, NodeFacts};
use crate::oci::{HostFacts, MonitorLauncher, OciRuntime, ProcessLauncher};

/// Sandboxes and containers on runc.
///
/// Locks: the tables' index locks are short; each container has a lifecycle lock
/// ([`Handle::lifecycle`]) and each sandbox an RwLock (containers are created under a read
/// lock, the sandbox is stopped and removed under the write lock). No lock is held while
/// waiting for a container to exit.
pub struct Runtime {
    pub(super) config: Arc<Config>,
    pub(super) images: Arc<Images>,
    pub(super) state: StateDir<SandboxMeta, ContainerMeta>,
    pub(super) layout: Layout,
    /// The runtime handlers (`runc` the default); a container's is in its meta.
    pub(super) handlers: Handlers,
    pub(super) launcher: Arc<dyn MonitorLauncher>,
    pub(super) host: HostFacts,
    /// Pod networking (CNI).
    pub(super) network: Arc<dyn Network>,
    /// The bosun binary run as `pinns` and `monitor`; `None`: this executable.
    pub(super) binary: Option<PathBuf>,
    pub(super) events: super::events::Events,
    /// Stats state: cgroup reader, CPU samples, writable layer usage.
    pub(super) stats: super::stats::StatsState,
    /// Removed objects' directories, deleted in the background.
    pub(super) trash: super::state::trash::Trash,
    /// Starts the grace period runc's cgroup join waits for, ahead of it (off in unit tests).
    pub(super) warmer: Arc<Warmer>,
    handles: Mutex<HashMap<String, Arc<Handle>>>,
    sandbox_locks: Mutex<HashMap<String, Arc<tokio::sync::RwLock<()>>>>,
}

impl Runtime {
    /// Opens the runtime on the config's root and state dirs with runc and real monitors, and
    /// recovers every sandbox and container before returning (DESIGN rule 7).
    pub async fn open(config: Arc<Config>, images: Arc<Images>) -> Result<Arc<Runtime>> {
        let handlers =
            crate::config::runtimes::resolve(&config.runtimes, &config.runtime, &config.state)?;
        let mut host = HostFacts::detect()?;
        let node = NodeFacts {
            cgroup_unified: host.cgroup_unified,
            systemd_cgroup: config.cgroup_driver == crate::config::CgroupDriver::Systemd,
            tmp_dir: config.state.join("tmp"),
        };
        std::fs::create_dir_all(&node.tmp_dir)
            .ctx(|| format!("create {}", node.tmp_dir.display()))?;
        let runtime = config.runtime.clone();
        let (store, profile_dir) = (
            config.root.clone(),
            Layout::new(&config.root, &config.state).apparmor_dir(),
        );
        let t = std::time::Instant::now();
        let (host, handlers) = tokio::task::spawn_blocking(move || {
            host.probe_extensions(&runtime, Path::new("/proc/self/exe"), &store);
            if host.apparmor {
                let t = std::time::Instant::now();
                let p = crate::oci::apparmor::load_default(&profile_dir);
                match &p.name {
                    Some(name) => tracing::info!(
                        profile = %name,
                        ms = t.elapsed().as_millis() as u64,
                        "AppArmor runtime-default profile: {}",
                        p.message
                    ),
                    None => tracing::warn!("AppArmor runtime-default profile: {}", p.message),
                }
                (host.apparmor_default_profile, host.apparmor_message) = (p.name, p.message);
            }
            (host, Handlers::probe(&handlers, &node))
        })
        .await
        .map_err(|e| Error::internal(format!("probe the node: {e}")))?;
        let handlers = handlers?;
        tracing::info!(
            runtime_rro = host.runtime_mounts.rro,
            runtime_idmap = host.runtime_mounts.idmap,
            recursive_read_only = host.recursive_read_only,
            user_namespaces = host.user_namespaces,
            why = %host.user_namespaces_why,
            ms = t.elapsed().as_millis() as u64,
            "node features probed"
        );
        let network = Cni::new(config.network.clone(), config.root.join("network"))?
            .with_socket(&config.socket);
        network.claim_embedded()?;
        let warmer = Warmer::detect(Path::new("/sys/fs/cgroup"));
        let rt = Self::build(
            config,
            images,
            handlers,
            Arc::new(ProcessLauncher::default()),
            host,
            Arc::new(network),
            warmer,
        )?;
        rt.recover().await;
        Ok(rt)
    }

    /// A runtime over explicit OS edges (fakes in unit tests) and a [`FakeNetwork`]; nothing
    /// is recovered.
    pub fn with_parts(
        config: Arc<Config>,
        images: Arc<Images>,
        runc: Arc<dyn OciRuntime>,
        launcher: Arc<dyn MonitorLauncher>,
        host: HostFacts,
    ) -> Result<Arc<Runtime>> {
        let network = Arc::new(FakeNetwork::default());
        Self::with_network(
            config,
            images,
            runc,
            launcher,
            host,
            network,
            Warmer::default(),
        )
    }

    /// [`Runtime::with_parts`] with an explicit network and cgroup warmer (unit tests: an
    /// off one, `Warmer::default()`).
    pub fn with_network(
        config: Arc<Config>,
        images: Arc<Images>,
        runc: Arc<dyn OciRuntime>,
        launcher: Arc<dyn MonitorLauncher>,
        host: HostFacts,
        network: Arc<dyn Network>,
        warmer: Warmer,
    ) -> Result<Arc<Runtime>> {
        let layout = Layout::new(&config.root, &config.state);
        let handlers = Handlers::single(
            runc,
            &config.runtime,
            &layout.runc_root(),
            host.runtime_mounts,
        );
        Self::build(config, images, handlers, launcher, host, network, warmer)
    }

    fn build(
        config: Arc<Config>,
        images: Arc<Images>,
        handlers: Handlers,
        launcher: Arc<dyn MonitorLauncher>,
        host: HostFacts,
        network: Arc<dyn Network>,
        warmer: Warmer,
    ) -> Result<Arc<Runtime>> {
        let layout = Layout::new(&config.root, &config.state);
        for dir in [
            layout.volatile.join("sandboxes"),
            layout.volatile.join("containers"),
        ] {
            std::fs::create_dir_all(&dir).ctx(|| format!("create {}", dir.display()))?;
        }
        let state = StateDir::open(&layout.durable)?;
        let trash = super::state::trash::Trash::open(&layout.durable, &layout.volatile)?;
        Ok(Arc::new(Runtime {
            config,
            images,
            state,
            layout,
            handlers,
            launcher,
            host,
            network,
            binary: None,
            events: Default::default(),
            stats: super::stats::StatsState::new(),
            trash,
            warmer: Arc::new(warmer),
            handles: Mutex::new(HashMap::new()),
            sandbox_locks: Mutex::new(HashMap::new()),
        }))
    }

    /// What this node can do (Status reports the runtime handler features from it).
    pub fn host(&self) -> &HostFacts {
        &self.host
    }

    /// The runtime handlers (Status lists them).
    pub fn handlers(&self) -> &Handlers {
        &self.handlers
    }

    /// The handler container `id` runs on (its meta's; the default for an unknown id).
    pub(super) fn handler_of(&self, id: &str) -> &Arc<Handler> {
        match self.state.containers.get(id) {
            Ok(entry) => self.handlers.recorded(&entry.meta().runtime_handler),
            Err(_) => self.handlers.default_handler(),
        }
    }

    /// The OCI runtime of container `id`.
    pub(super) fn runc(&self, id: &str) -> &dyn OciRuntime {
        self.handler_of(id).runtime.as_ref()
    }

    /// Waits (up to `max`) until the files of removed containers and sandboxes, deleted in
    /// the background, are gone; false when some are still being deleted. What frees disk
    /// space must wait for it before the space is measured again (disk-pressure reclaim).
    pub async fn settle_removals(&self, max: std::time::Duration) -> bool {
        let deadline = tokio::time::Instant::now() + max;
        while !self.trash.is_idle() {
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        true
    }

    /// The bosun binary run as a helper (`pinns`, `monitor`): the configured one, else this
    /// executable.
    pub(super) fn helper_binary(&self) -> PathBuf {
        self.binary
            .clone()
            .unwrap_or_else(|| PathBuf::from("/proc/self/exe"))
    }

    /// PodSandboxStatus: the sandbox with this id (or unique prefix); NotFound otherwise.
    pub fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        self.state.sandboxes.resolve(id)
    }

    /// ListPodSandbox.
    pub fn list_sandboxes(&self, filter: &Filter<SandboxState>) -> Vec<Arc<SandboxEntry>> {
        self.state.sandboxes.list(filter)
    }

    /// ContainerStatus: the container with this id (or unique prefix); NotFound otherwise.
    pub fn container(&self, id: &str) -> Result<Arc<ContainerEntry>> {
        self.state.containers.resolve(id)
    }

    /// ListContainers.
    pub fn list_containers(&self, filter: &Filter<ContainerState>) -> Vec<Arc<ContainerEntry>> {
        self.state.containers.list(filter)
    }

    /// The handle of container `id` (created on first use).
    pub(super) fn handle(&self, id: &str) -> Arc<Handle> {
        lock(&self.handles)
            .entry(id.to_string())
            .or_insert_with(Handle::new)
            .clone()
    }

    /// Forgets container `id`'s handle.
    pub(super) fn drop_handle(&self, id: &str) {
        lock(&self.handles).remove(id);
    }

    /// The lock of sandbox `id` (created on first use).
    pub(super) fn sandbox_lock(&self, id: &str) -> Arc<tokio::sync::RwLock<()>> {
        lock(&self.sandbox_locks)
            .entry(id.to_string())
            .or_default()
            .clone()
    }

    /// Forgets sandbox `id`'s lock.
    pub(super) fn drop_sandbox_lock(&self, id: &str) {
        lock(&self.sandbox_locks).remove(id);
    }

    /// Resolves a container id prefix; Ok(None) when no container matches (idempotent calls).
    pub(super) fn find_container(&self, id: &str) -> Result<Option<Arc<ContainerEntry>>> {
        match self.state.containers.resolve(id) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.kind() == crate::error::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Resolves a sandbox id prefix; Ok(None) when no sandbox matches (idempotent calls).
    pub(super) fn find_sandbox(&self, id: &str) -> Result<Option<Arc<SandboxEntry>>> {
        match self.state.sandboxes.resolve(id) {
            Ok(e) => Ok(Some(e)),
            Err(e) if e.kind() == crate::error::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// An error for an id that must not be empty.
pub(super) fn require_id(kind: &str, id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::invalid(format!("{kind} id is required")));
    }
    Ok(())
}
