//! RunPodSandbox, StopPodSandbox and RemovePodSandbox: namespaces, pod files and the sandbox record.

use std::sync::Arc;

use super::events::EventKind;
use super::service::{require_id, Runtime};
use super::state::meta::{SandboxEntry, SandboxMeta, SandboxRequest};
use super::state::paths;
use super::state::status::{now_ns, SandboxState, SandboxStatus};
use super::state::table::Filter;
use crate::error::{Error, Result, ResultExt};
use crate::oci::NamespaceMode;
use crate::sandbox::{DnsConfig, NamespaceOptions, PodFiles, PodFilesConfig, PodNamespaces};
use crate::store::space::NameFs;

impl Runtime {
    /// RunPodSandbox: pins the pod's namespaces, writes its files and records it READY; all or
    /// nothing. A second request for the same pod (name, namespace, uid, attempt) while one
    /// exists or is being created fails with AlreadyExists naming the existing id.
    pub async fn run_sandbox(self: &Arc<Self>, req: SandboxRequest) -> Result<String> {
        super::validate::sandbox(&req, self.config.cgroup_driver)?;
        let handler = self.handlers.select(&req.runtime_handler)?;
        validate_userns(&req)?;
        if req.userns.is_some() && !handler.user_namespaces {
            return Err(Error::precondition(format!(
                "{USERNS_FIELD}: runtime handler {:?} has no user namespaces ({} features)",
                handler.name, handler.version
            )));
        }
        if req.userns.is_some() && !self.host.user_namespaces {
            return Err(Error::precondition(format!(
                "{USERNS_FIELD}: user namespaces are not available on this node ({})",
                self.host.user_namespaces_why
            )));
        }
        let reservation = self.state.sandboxes.reserve(&req.pod.key())?;
        let id = reservation.id().to_string();
        let dir = self.layout.sandbox_dir(&id);
        let hostname = match (req.network, req.hostname.is_empty()) {
            (NamespaceMode::Node, _) => self.host.hostname.clone(),
            (_, false) => req.hostname.clone(),
            (_, true) => req.pod.hostname(),
        };
        let meta = SandboxMeta {
            request: req,
            hostname,
            state_dir: dir.clone(),
        };
        let entry =
            self.state
                .sandboxes
                .create(reservation, meta, SandboxStatus::created(now_ns()))?;
        let id = entry.id().to_string();
        // Held while setting up, so a concurrent Stop/Remove waits for a consistent sandbox.
        let lock = self.sandbox_lock(&id);
        let guard = lock.write().await;
        let made = async {
            crate::failpoint_check!("sandbox.run.recorded")?;
            self.set_up_sandbox(&entry).await?;
            crate::failpoint_check!("sandbox.run.ready")
        }
        .await;
        if let Err(e) = made {
            let e = e.context(format!("sandbox {id} ({})", entry.meta().request.pod.key()));
            let e = match self.undo_sandbox(&entry).await {
                Ok(()) => e,
                Err(kept) => Error::new(e.kind(), format!("{e}; {kept}")),
            };
            drop(guard);
            self.drop_sandbox_lock(&id);
            return Err(e);
        }
        let meta = entry.meta();
        let (pod, handler) = (meta.request.pod.key(), &meta.request.runtime_handler);
        tracing::info!(sandbox = %id, pod = %pod, handler = %handler, "sandbox ready");
        self.emit(EventKind::Created, &id, &id);
        self.emit(EventKind::Started, &id, &id);
        Ok(id)
    }

    /// Namespaces, then the pod network (CNI ADD in the pinned netns), then the pod files
    /// (`hosts` with the pod's IPs), then READY with the addresses recorded.
    async fn set_up_sandbox(self: &Arc<Self>, entry: &SandboxEntry) -> Result<()> {
        let id = entry.id().to_string();
        let meta = entry.meta();
        let (rt, sid) = (self.clone(), id.clone());
        let pid = tokio::task::spawn_blocking(move || rt.create_namespaces(&sid))
            .await
            .map_err(|e| Error::internal(format!("sandbox set-up task: {e}")))??;
        crate::failpoint_check!("sandbox.run.namespaces")?;
        let ips = self.attach_network(&id, meta).await?;
        crate::failpoint_check!("sandbox.run.network")?;
        let (rt, sid, pod_ips) = (self.clone(), id.clone(), ips.clone());
        tokio::task::spawn_blocking(move || rt.write_pod_files(&sid, &pod_ips))
            .await
            .map_err(|e| Error::internal(format!("sandbox set-up task: {e}")))??;
        crate::failpoint_check!("sandbox.run.files")?;
        let attached = super::network::own_network(meta);
        entry.update(|s| {
            s.ready(now_ns(), pid)?;
            s.ips = ips.iter().map(ToString::to_string).collect();
            s.network_attached = attached;
            Ok(())
        })?;
        Ok(())
    }

    /// Pins the pod's namespaces; returns the pid holder (0 without a pod pid namespace).
    fn create_namespaces(&self, id: &str) -> Result<u32> {
        let entry = self.state.sandboxes.get(id)?;
        let meta = entry.meta();
        let req = &meta.request;
        let own_net = req.network != NamespaceMode::Node;
        let own_ipc = req.ipc != NamespaceMode::Node;
        let own_pid = req.pid == NamespaceMode::Pod;
        let opts = NamespaceOptions {
            net: own_net,
            ipc: own_ipc,
            uts: own_net,
            pid: own_pid,
            hostname: own_net.then(|| meta.hostname.clone()),
            sysctls: req.sysctls.clone(),
            binary: self.binary.clone(),
            uid_map: ranges(req.userns.as_ref().map(|u| u.uids.as_slice())),
            gid_map: ranges(req.userns.as_ref().map(|u| u.gids.as_slice())),
        };
        std::fs::create_dir_all(&meta.state_dir)
            .ctx(|| format!("create {}", meta.state_dir.display()))
            .name_fs(&meta.state_dir)?;
        let ns = PodNamespaces::create(&paths::ns_dir(&meta.state_dir), &opts)
            .name_fs(&meta.state_dir)?;
        match ns.pid_holder {
            Some(pid) => Ok(pid),
            None if !own_pid => Ok(0),
            // Never a READY pod whose containers cannot join its pid namespace.
            None => Err(Error::internal(
                "the pod's pid namespace holder is not running after its start",
            )),
        }
    }

    /// The pod's hostname, hosts (with `ips`) and resolv.conf files and its shm mount.
    fn write_pod_files(&self, id: &str, ips: &[std::net::IpAddr]) -> Result<()> {
        let entry = self.state.sandboxes.get(id)?;
        let meta = entry.meta();
        let req = &meta.request;
        let files = PodFilesConfig {
            hostname: meta.hostname.clone(),
            ips: ips.to_vec(),
            dns: req.dns.as_ref().map(|d| DnsConfig {
                servers: d.servers.clone(),
                searches: d.searches.clone(),
                options: d.options.clone(),
            }),
            shm_size: (req.ipc != NamespaceMode::Node).then_some(self.config.shm_size),
            ..PodFilesConfig::default()
        };
        PodFiles::write(&meta.state_dir, &files).name_fs(&meta.state_dir)?;
        Ok(())
    }

    /// Releases the namespaces and pod files (idempotent).
    fn tear_down_sandbox(&self, id: &str) -> Result<()> {
        let dir = self.layout.sandbox_dir(id);
        let ns_dir = paths::ns_dir(&dir);
        if ns_dir.exists() {
            PodNamespaces::open(&ns_dir)?.remove()?;
        }
        if dir.exists() {
            PodFiles::remove(&dir)?;
        }
        Ok(())
    }

    /// Undoes a RunPodSandbox that failed at any step (DESIGN rule 8): CNI DEL while the netns
    /// still exists, then the namespaces and pod files, the sandbox's directories and record,
    /// and with the record its name. A DEL that fails is handed to a background retry that
    /// survives restarts, with the netns pinned for it (a sandbox nobody asked for must not
    /// hold the pod's name, issue 28). Err only in the last resort, when even that hand-over
    /// failed: the sandbox is then kept NOTREADY, for Stop/RemovePodSandbox to retry the DEL.
    async fn undo_sandbox(self: &Arc<Self>, entry: &SandboxEntry) -> Result<()> {
        let id = entry.id().to_string();
        if let Err(de) = self.detach_network(entry).await {
            if let Err(he) = self.hand_over_detach(entry, &de).await {
                let msg = format!(
                    "the network teardown failed ({de}) and could not be left to a background \
                     retry ({he}): the sandbox is kept NOTREADY for Stop/RemovePodSandbox to \
                     retry it"
                );
                tracing::error!(sandbox = %id, "{msg}");
                let _ = entry.update(|s| {
                    s.message = msg.clone();
                    s.stop(now_ns())
                });
                return Err(Error::new(de.kind(), msg));
            }
        }
        let rt = self.clone();
        let sid = id.clone();
        let torn = tokio::task::spawn_blocking(move || rt.tear_down_sandbox(&sid)).await;
        match torn {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(sandbox = %id, "undo: {e}"),
            Err(e) => tracing::warn!(sandbox = %id, "undo task: {e}"),
        }
        // What is left of the pod files (a mount the tear-down could not detach included) goes
        // with the trash, which detaches every mount below an entry before deleting it.
        let dir = self.layout.sandbox_dir(&id);
        if let Err(e) = self.trash.put(super::state::trash::Bin::Volatile, &dir) {
            tracing::warn!(sandbox = %id, "undo: {e}");
        }
        if let Err(e) = self.state.sandboxes.remove(&id) {
            tracing::warn!(sandbox = %id, "undo: {e}");
        }
        let pod = entry.meta().request.pod.key();
        tracing::info!(sandbox = %id, pod = %pod, "undone: nothing is left of the failed sandbox");
        Ok(())
    }

    /// StopPodSandbox: kills every container of the pod at once (the kubelet has already given
    /// them their grace), detaches the pod network (CNI DEL, once), then releases the
    /// namespaces and the shm mount. Idempotent; unknown ids succeed.
    pub async fn stop_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("sandbox", id)?;
        let Some(entry) = self.find_sandbox(id)? else {
            return Ok(());
        };
        let id = entry.id().to_string();
        let lock = self.sandbox_lock(&id);
        let _guard = lock.write().await;
        let t0 = std::time::Instant::now();
        self.kill_pod_containers(&id).await?;
        crate::failpoint!("sandbox.stop.killed");
        let killed = t0.elapsed();
        // CNI DEL before the netns goes; a failure keeps it (and the sandbox) for a retry.
        self.detach_network(&entry)
            .await
            .map_err(|e| e.context(format!("sandbox {id}: stop: network teardown")))?;
        crate::failpoint!("sandbox.stop.detached");
        let detached = t0.elapsed();
        let rt = self.clone();
        let sid = id.clone();
        tokio::task::spawn_blocking(move || rt.tear_down_sandbox(&sid))
            .await
            .map_err(|e| Error::internal(format!("sandbox {id}: stop task: {e}")))?
            .map_err(|e| e.context(format!("sandbox {id}: stop")))?;
        crate::failpoint!("sandbox.stop.torn-down");
        let torn_down = t0.elapsed();
        if entry.status().state() != SandboxState::NotReady {
            // Its namespaces are gone: NOTREADY is a fact, published on a full disk too (the
            // pod stays removable; recovery finds the same, issue 28).
            entry.update_even_if_full(|s| s.stop(now_ns()))?;
            tracing::info!(sandbox = %id, "sandbox stopped");
            self.emit(EventKind::Stopped, &id, &id);
        }
        tracing::debug!(
            sandbox = %id,
            kill_us = killed.as_micros() as u64,
            network_us = (detached - killed).as_micros() as u64,
            namespaces_us = (torn_down - detached).as_micros() as u64,
            record_us = (t0.elapsed() - torn_down).as_micros() as u64,
            "sandbox stop steps"
        );
        Ok(())
    }

    /// Stops every container of sandbox `id` with no grace, concurrently.
    async fn kill_pod_containers(self: &Arc<Self>, id: &str) -> Result<()> {
        let filter = Filter {
            pod_id: Some(id.to_string()),
            ..Filter::default()
        };
        let stops = self.state.containers.list(&filter).into_iter().map(|c| {
            let rt = self.clone();
            async move { rt.stop_container(c.id(), 0).await }
        });
        for r in futures::future::join_all(stops).await {
            r?;
        }
        Ok(())
    }

    /// RemovePodSandbox: stops the sandbox, removes its containers and every trace of it.
    /// Idempotent; unknown ids succeed.
    pub async fn remove_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("sandbox", id)?;
        let Some(entry) = self.find_sandbox(id)? else {
            return Ok(());
        };
        let id = entry.id().to_string();
        self.stop_sandbox(&id).await?;
        crate::failpoint!("sandbox.remove.stopped");
        let lock = self.sandbox_lock(&id);
        let _guard = lock.write().await;
        let filter = Filter {
            pod_id: Some(id.clone()),
            ..Filter::default()
        };
        let removals = self.state.containers.list(&filter).into_iter().map(|c| {
            let rt = self.clone();
            async move { rt.remove_container(c.id()).await }
        });
        for r in futures::future::join_all(removals).await {
            r?;
        }
        crate::failpoint!("sandbox.remove.containers");
        // Namespaces and the shm mount went with the stop; what is left of the pod files and
        // the record is moved into the trash (deleted in the background).
        let dir = self.layout.sandbox_dir(&id);
        self.trash
            .put(super::state::trash::Bin::Volatile, &dir)
            .map_err(|e| e.context(format!("sandbox {id}: remove")))?;
        crate::failpoint!("sandbox.remove.dir");
        self.state.sandboxes.retire(&id, &self.trash)?;
        self.drop_sandbox_lock(&id);
        tracing::info!(sandbox = %id, "sandbox removed");
        self.emit(EventKind::Deleted, &id, &id);
        Ok(())
    }
}

/// `(inside, host, length)` of each range.
fn ranges(map: Option<&[crate::oci::IdMapping]>) -> Vec<(u32, u32, u32)> {
    map.unwrap_or_default()
        .iter()
        .map(|m| (m.container_id, m.host_id, m.length))
        .collect()
}

/// Where a pod's user namespace is in the CRI request (for error messages).
const USERNS_FIELD: &str =
    "sandbox config: linux.security_context.namespace_options.userns_options";

/// The pod user namespace's mappings, and the namespaces it must own (metadata, handler and
/// the other namespace modes are checked by `validate::sandbox`).
fn validate_userns(req: &SandboxRequest) -> Result<()> {
    if let Some(userns) = &req.userns {
        crate::oci::userns::check_pod(USERNS_FIELD, userns)?;
        // The pod's namespaces must be owned by its user namespace (sysfs, /proc and mqueue
        // are mounted from inside it); the host's are not. The kubelet refuses these too.
        for (what, mode) in [("network", req.network), ("pid", req.pid), ("ipc", req.ipc)] {
            if mode == NamespaceMode::Node {
                return Err(Error::invalid(format!(
                    "{USERNS_FIELD}: mode POD cannot be combined with the host's {what} \
                     namespace (namespace_options.{what} NODE)"
                )));
            }
        }
    }
    Ok(())
}

impl Runtime {
    /// UpdatePodSandboxResources: records the pod-level resources and overhead the kubelet has
    /// just applied to the pod cgroup (reported in the verbose status). Unknown id: NotFound.
    pub fn update_sandbox_resources(
        &self,
        id: &str,
        overhead: Option<crate::oci::Resources>,
        resources: Option<crate::oci::Resources>,
    ) -> Result<()> {
        require_id("sandbox", id)?;
        let entry = self.sandbox(id)?;
        entry
            .update(|s| {
                s.overhead = overhead;
                s.resources = resources;
                Ok(())
            })
            .map(drop)
            .map_err(|e| e.context(format!("sandbox {}: update resources", entry.id())))
    }
}
