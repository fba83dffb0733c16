//! RunPodSandbox, StopPodSandbox and RemovePodSandbox: namespaces, pod files and the sandbox record.

use std::sync::Arc;

use super::events::EventKind;
use super::meta::{SandboxMeta, SandboxRequest};
use super::paths;
use super::service::{require_id, Runtime};
use super::status::{now_ns, SandboxState, SandboxStatus};
use super::table::Filter;
use crate::error::{Error, Result};
use crate::oci::NamespaceMode;
use crate::sandbox::{DnsConfig, NamespaceOptions, PodFiles, PodFilesConfig, PodNamespaces};

/// The runtime handlers bosun serves ("" is the default).
const HANDLERS: [&str; 2] = ["", "runc"];

impl Runtime {
    /// RunPodSandbox: pins the pod's namespaces, writes its files and records it READY; all or
    /// nothing. A second request for the same pod (name, namespace, uid, attempt) while one
    /// exists or is being created fails with AlreadyExists naming the existing id.
    pub async fn run_sandbox(self: &Arc<Self>, req: SandboxRequest) -> Result<String> {
        validate(&req)?;
        let reservation = self.state.sandboxes.reserve(&req.pod.key())?;
        let id = reservation.id().to_string();
        let dir = self.layout.sandbox_dir(&id);
        let hostname = match (req.network, req.hostname.is_empty()) {
            (NamespaceMode::Node, _) => self.host.hostname.clone(),
            (_, false) => req.hostname.clone(),
            (_, true) => req.pod.name.chars().take(63).collect(),
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
        let rt = self.clone();
        let set_up = tokio::task::spawn_blocking(move || rt.set_up_sandbox(&id)).await;
        let set_up = set_up
            .map_err(|e| Error::internal(format!("sandbox set-up task: {e}")))
            .and_then(|r| r);
        let id = entry.id().to_string();
        let result = set_up.and_then(|pid| entry.update(|s| s.ready(now_ns(), pid)).map(drop));
        if let Err(e) = result {
            let _ = self.tear_down_sandbox(&id);
            let _ = self.state.sandboxes.remove(&id);
            let _ = std::fs::remove_dir_all(&dir);
            return Err(e.context(format!("sandbox {id} ({})", entry.meta().request.pod.key())));
        }
        tracing::info!(sandbox = %id, pod = %entry.meta().request.pod.key(), "sandbox ready");
        self.emit(EventKind::Created, &id, &id);
        self.emit(EventKind::Started, &id, &id);
        Ok(id)
    }

    /// Namespaces and pod files; returns the pid holder (0 without a pod pid namespace).
    fn set_up_sandbox(&self, id: &str) -> Result<u32> {
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
        };
        std::fs::create_dir_all(&meta.state_dir)
            .map_err(|e| Error::internal(format!("create {}: {e}", meta.state_dir.display())))?;
        let ns = PodNamespaces::create(&paths::ns_dir(&meta.state_dir), &opts)?;
        let files = PodFilesConfig {
            hostname: meta.hostname.clone(),
            dns: req.dns.as_ref().map(|d| DnsConfig {
                servers: d.servers.clone(),
                searches: d.searches.clone(),
                options: d.options.clone(),
            }),
            shm_size: own_ipc.then_some(self.config.shm_size),
            ..PodFilesConfig::default()
        };
        PodFiles::write(&meta.state_dir, &files)?;
        Ok(ns.pid_holder.unwrap_or(0))
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

    /// StopPodSandbox: kills every container of the pod at once (the kubelet has already given
    /// them their grace), then releases the namespaces and the shm mount. Idempotent; unknown
    /// ids succeed.
    pub async fn stop_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("sandbox", id)?;
        let Some(entry) = self.find_sandbox(id)? else {
            return Ok(());
        };
        let id = entry.id().to_string();
        let lock = self.sandbox_lock(&id);
        let _guard = lock.write().await;
        self.kill_pod_containers(&id).await?;
        let rt = self.clone();
        let sid = id.clone();
        tokio::task::spawn_blocking(move || rt.tear_down_sandbox(&sid))
            .await
            .map_err(|e| Error::internal(format!("sandbox {id}: stop task: {e}")))?
            .map_err(|e| e.context(format!("sandbox {id}: stop")))?;
        if entry.status().state() != SandboxState::NotReady {
            entry.update(|s| s.stop(now_ns()))?;
            tracing::info!(sandbox = %id, "sandbox stopped");
            self.emit(EventKind::Stopped, &id, &id);
        }
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
        let lock = self.sandbox_lock(&id);
        let _guard = lock.write().await;
        let filter = Filter {
            pod_id: Some(id.clone()),
            ..Filter::default()
        };
        for c in self.state.containers.list(&filter) {
            self.remove_container(c.id()).await?;
        }
        let dir = self.layout.sandbox_dir(&id);
        match std::fs::remove_dir_all(&dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Error::internal(format!(
                    "sandbox {id}: remove {}: {e}",
                    dir.display()
                )))
            }
            _ => {}
        }
        self.state.sandboxes.remove(&id)?;
        self.drop_sandbox_lock(&id);
        tracing::info!(sandbox = %id, "sandbox removed");
        self.emit(EventKind::Deleted, &id, &id);
        Ok(())
    }
}

/// Metadata and handler checks (the proto conversion checks field presence too).
fn validate(req: &SandboxRequest) -> Result<()> {
    let p = &req.pod;
    for (field, v) in [
        ("name", &p.name),
        ("namespace", &p.namespace),
        ("uid", &p.uid),
    ] {
        if v.is_empty() {
            return Err(Error::invalid(format!(
                "sandbox config: metadata.{field} is required"
            )));
        }
    }
    if !HANDLERS.contains(&req.runtime_handler.as_str()) {
        return Err(Error::invalid(format!(
            "runtime handler {:?} is not configured (bosun has \"runc\")",
            req.runtime_handler
        )));
    }
    if req.pid == NamespaceMode::Target {
        return Err(Error::invalid(
            "sandbox config: pid namespace mode TARGET is for containers only",
        ));
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
