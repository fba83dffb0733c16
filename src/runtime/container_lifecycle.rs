//! CreateContainer, StartContainer, RemoveContainer, UpdateContainerResources and ExecSync.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::events::EventKind;
use super::service::{require_id, Runtime};
use super::signal;
use super::state::meta::{ContainerMeta, NewContainer, SandboxEntry};
use super::state::paths;
use super::state::status::{now_ns, ContainerState, ContainerStatus, SandboxState, UserIds};
use crate::error::{Error, ErrorKind, Result, ResultExt};
use crate::image::index::ImageRecord;
use crate::oci::{
    cgroups_path, ExecOutput, Resources, SandboxContext, SpecOptions, EXEC_OUTPUT_CAP,
};
use crate::store::space::NameFs;

impl Runtime {
    /// CreateContainer in sandbox `sandbox_id`: resolves the image, mounts the rootfs, writes
    /// the bundle and records the container CREATED; no process is started until
    /// StartContainer (as containerd: no task at create). All or nothing; returns the new id.
    pub async fn create_container(
        self: &Arc<Self>,
        sandbox_id: &str,
        new: NewContainer,
    ) -> Result<String> {
        require_id("sandbox", sandbox_id)?;
        let name = new.request.name.clone();
        if name.is_empty() {
            return Err(Error::invalid(
                "container config: metadata.name is required",
            ));
        }
        let sandbox = self.sandbox(sandbox_id)?;
        let cpus = crate::oci::resources::HostCpus::detect();
        super::validate::container(&new, sandbox.meta(), &cpus)?;
        crate::oci::apparmor::check(
            &format!("container config {:?}", name),
            &new.request.linux.security,
            self.host.apparmor,
            self.host.apparmor_default_profile.as_deref(),
            || std::fs::read_to_string(crate::oci::apparmor::PROFILES_FILE),
            || crate::oci::apparmor::reload_default(&self.layout.apparmor_dir()),
        )?;
        if let Some(source) = self.checkpoint_source(&new.request.image) {
            return self.create_restored(&sandbox, new, source).await;
        }
        self.create_container_with(sandbox.id(), new, None).await
    }

    /// CreateContainer after the request's checks; `restore`: from that checkpoint.
    pub(super) async fn create_container_with(
        self: &Arc<Self>,
        sandbox_id: &str,
        new: NewContainer,
        restore: Option<super::checkpoint_restore_archive::Extracted>,
    ) -> Result<String> {
        let name = new.request.name.clone();
        let t0 = std::time::Instant::now();
        let sandbox = self.sandbox(sandbox_id)?;
        let lock = self.sandbox_lock(sandbox.id());
        let _guard = lock.read().await;
        let st = sandbox.status().state();
        if st != SandboxState::Ready {
            return Err(Error::precondition(format!(
                "sandbox {}: is {st:?}, containers need a ready sandbox",
                sandbox.id()
            )));
        }
        let image = self
            .images
            .lookup(&new.request.image)
            .ok_or_else(|| Error::not_found(format!(
                "image {:?}: not found; pull it first (PullImage, `crictl pull`, `bosun image pull`)",
                new.request.image
            )))?;
        super::bundle::check(sandbox.meta(), &new.request, &self.host)?;
        let pod_key = sandbox.meta().request.pod.key();
        let reservation = self
            .state
            .containers
            .reserve(&format!("{name}_{pod_key}_{}", new.attempt))?;
        let id = reservation.id().to_string();
        let meta = self.container_meta(&sandbox, &image, &id, new)?;
        // The lease is taken under the image service's busy guard so a concurrent GC cannot
        // collect the layers between the lookup and the hold.
        {
            let _busy = self.images.busy().await;
            let chain: Vec<_> = image.chain_ids().cloned().collect();
            if chain.iter().any(|c| !self.images.snapshots().exists(c)) {
                return Err(Error::not_found(format!(
                    "image {:?}: removed while the container was being created; pull it again",
                    meta.request.image
                )));
            }
            self.images
                .leases()
                .hold(&id, &chain)
                .map_err(|e| e.context(format!("container {id}: image lease")))?;
        }
        // A crash from here to the record leaves a lease without its container: recovery
        // releases it.
        let recorded = crate::failpoint_check!("container.create.leased").and_then(|()| {
            let status = ContainerStatus::created(now_ns());
            self.state.containers.create(reservation, meta, status)
        });
        let entry = match recorded {
            Ok(e) => e,
            Err(e) => {
                let _ = self.images.leases().release(&id);
                return Err(e.context(format!("container {name:?}")));
            }
        };
        let handle = self.handle(&id);
        let _life = handle.lifecycle.lock().await;
        let recorded = t0.elapsed();
        let built = async {
            crate::failpoint_check!("container.create.recorded")?;
            let user = self.build_container(&sandbox, &image, entry.meta()).await?;
            if let Some(x) = &restore {
                self.finish_restore(&id, entry.meta(), x).await?;
            }
            // The identity is known only now; a rename, like every status update
            // (docs/architecture.md, "State on disk"): the synced creation record above is
            // what recovery needs.
            entry.update(|s| {
                s.user = Some(user);
                Ok(())
            })?;
            crate::failpoint_check!("container.create.done")
        }
        .await;
        if let Err(e) = built {
            // All or nothing (DESIGN rule 8): what the steps made goes, the name with it.
            drop(_life);
            self.discard_container(&id).await;
            self.drop_handle(&id);
            return Err(e.context(format!("container {name:?} ({id})")));
        }
        tracing::info!(
            container = %id,
            name = %name,
            sandbox = %sandbox.id(),
            checks_records_us = recorded.as_micros() as u64,
            total_us = t0.elapsed().as_micros() as u64,
            "container created"
        );
        self.emit(EventKind::Created, &id, sandbox.id());
        Ok(id)
    }

    /// The metadata of a new container (paths, image facts, cgroups path).
    fn container_meta(
        &self,
        sandbox: &SandboxEntry,
        image: &ImageRecord,
        id: &str,
        new: NewContainer,
    ) -> Result<ContainerMeta> {
        let sb = sandbox.meta();
        // Checked by validate::log_path: relative below the directory, or absolute without one.
        let log_path = match (sb.request.log_directory.as_str(), new.log_path.as_str()) {
            (_, "") => String::new(),
            ("", p) => p.to_string(),
            (dir, p) => Path::new(dir).join(p).to_string_lossy().into_owned(),
        };
        let image_stop_signal = match image.config.config.stop_signal.as_deref() {
            Some(s) if !s.is_empty() => Some(
                signal::parse(s)
                    .map_err(|e| e.context(format!("image {}: STOPSIGNAL", image.id)))?,
            ),
            _ => None,
        };
        let driver = self.config.cgroup_driver;
        let parent = [
            sb.request.cgroup_parent.as_str(),
            self.config.default_cgroup_parent.as_str(),
        ]
        .into_iter()
        .find(|p| !p.is_empty())
        .unwrap_or(crate::cgroups::path::default_parent(driver));
        let snapshots = self.images.snapshots();
        let mut lower_dirs: Vec<PathBuf> =
            image.chain_ids().map(|c| snapshots.fs_path(c)).collect();
        lower_dirs.reverse();
        Ok(ContainerMeta {
            sandbox_id: sandbox.id().to_string(),
            pod_key: sb.request.pod.key(),
            attempt: new.attempt,
            image_id: image.id.to_string(),
            image_name: image
                .repo_tags
                .first()
                .cloned()
                .unwrap_or_else(|| new.request.image.clone()),
            image_ref: image
                .repo_digests
                .first()
                .cloned()
                .unwrap_or_else(|| image.id.to_string()),
            image_stop_signal,
            log_path,
            cgroups_path: cgroups_path(driver, parent, id),
            lower_dirs,
            state_dir: self.layout.container_dir(id),
            runtime_handler: self
                .handlers
                .recorded(&sb.request.runtime_handler)
                .name
                .clone(),
            request: new.request,
        })
    }

    /// Rootfs and bundle: the steps of a creation that touch the OS. No process is started:
    /// StartContainer has the monitor `runc run` the bundle (issue 13: a created container
    /// costs no memory, and CreateContainer no runc).
    async fn build_container(
        self: &Arc<Self>,
        sandbox: &SandboxEntry,
        image: &ImageRecord,
        meta: &ContainerMeta,
    ) -> Result<UserIds> {
        let id = meta
            .state_dir
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let rw = self.layout.rw_dir(&id);
        let ctx = self.sandbox_context(sandbox, meta)?;
        let lower = meta.lower_dirs.clone();
        let run_config = image.config.config.clone();
        let mut host = self.host.clone();
        // What the container's own runtime applies itself (staged on the host otherwise).
        host.runtime_mounts = self.handlers.recorded(&meta.runtime_handler).mounts;
        let opts = SpecOptions {
            cgroup_driver: self.config.cgroup_driver,
            cgroups_path: meta.cgroups_path.clone(),
            host,
        };
        let request = meta.request.clone();
        let dir = meta.state_dir.clone();
        let binary = self.helper_binary();
        let t0 = std::time::Instant::now();
        let user = tokio::task::spawn_blocking(move || {
            let p = super::bundle::Prepare {
                lower: &lower,
                rw: &rw,
                dir: &dir,
                sandbox: &ctx,
                image: &run_config,
                opts: &opts,
                binary: &binary,
            };
            super::bundle::prepare(&request, &p)
        })
        .await
        .map_err(|e| Error::internal(format!("create task: {e}")))??;
        crate::failpoint_check!("container.create.rootfs")?;
        // The monitor creates the log file at start; its directory is checked now.
        let log_dir = Path::new(&meta.log_path).parent();
        if let Some(dir) = log_dir.filter(|_| !meta.log_path.is_empty()) {
            std::fs::create_dir_all(dir)
                .ctx(|| format!("create {}", dir.display()))
                .name_fs(dir)?;
        }
        tracing::debug!(
            container = %id,
            bundle_us = t0.elapsed().as_micros() as u64,
            "container built"
        );
        Ok(user)
    }

    /// What the spec needs from the sandbox, including the pid-Target container's init.
    fn sandbox_context(
        &self,
        sandbox: &SandboxEntry,
        meta: &ContainerMeta,
    ) -> Result<SandboxContext> {
        use crate::oci::NamespaceMode;
        let sb = sandbox.meta();
        let dir = &sb.state_dir;
        let ns = paths::ns_dir(dir);
        let exists = |p: PathBuf| p.exists().then_some(p);
        let host_network = sb.request.network == NamespaceMode::Node;
        let host_ipc = sb.request.ipc == NamespaceMode::Node;
        let target_pid = match meta.request.linux.security.namespaces.pid {
            NamespaceMode::Target => {
                let target = &meta.request.linux.security.namespaces.target_id;
                let t = self.container(target).map_err(|_| {
                    Error::not_found(format!(
                        "pid namespace target container {target:?}: not found"
                    ))
                })?;
                if t.status().state() != ContainerState::Running {
                    return Err(Error::precondition(format!(
                        "pid namespace target container {target}: is not running"
                    )));
                }
                Some(t.status().pid)
            }
            _ => None,
        };
        Ok(SandboxContext {
            id: sandbox.id().to_string(),
            hostname: sb.hostname.clone(),
            net_ns: if host_network {
                None
            } else {
                exists(ns.join("net"))
            },
            ipc_ns: if host_ipc {
                None
            } else {
                exists(ns.join("ipc"))
            },
            uts_ns: if host_network {
                None
            } else {
                exists(ns.join("uts"))
            },
            pid_ns_holder: match sandbox.status().pid {
                0 => None,
                pid => Some(pid),
            },
            user_ns: sb
                .request
                .userns
                .as_ref()
                .and_then(|_| exists(ns.join("user"))),
            userns: sb.request.userns.clone(),
            target_pid,
            hosts_path: exists(dir.join("hosts")),
            hostname_path: exists(dir.join("hostname")),
            resolv_conf_path: exists(dir.join("resolv.conf")),
            shm_path: if host_ipc {
                None
            } else {
                exists(dir.join("shm"))
            },
            cgroup_parent: sb.request.cgroup_parent.clone(),
            sysctls: sb.request.sysctls.clone(),
            host_network,
            host_ipc,
            host_pid: sb.request.pid == NamespaceMode::Node,
            privileged: sb.request.privileged,
        })
    }

    /// RemoveContainer: kills it if running, then removes the runc state, the rootfs mount,
    /// the bundle, the writable layer and the record (a created container has no process:
    /// nothing to kill, no runc). The log file stays (it is the kubelet's). Idempotent;
    /// unknown ids succeed.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<()> {
        require_id("container", id)?;
        let Some(entry) = self.find_container(id)? else {
            return Ok(());
        };
        let id = entry.id().to_string();
        let handle = self.handle(&id);
        let _life = loop {
            let st = entry.status();
            if matches!(
                st.state(),
                ContainerState::Running | ContainerState::Unknown
            ) {
                self.stop_container(&id, 0).await?;
            } else if st.state() == ContainerState::Created
                && st.monitor_pid != 0
                && !handle.is_exited()
            {
                // Created by a bosun before issue 13: its init waits inside `runc create`;
                // deleting it ends the monitor. (Now a created container has no process.)
                let _ = self.runc(&id).delete(&id, true).await;
                let _ = tokio::time::timeout(Duration::from_secs(10), handle.exited()).await;
            }
            // A checkpoint in progress ends first (the stop above killed what it dumps).
            let dump = handle.checkpoint.lock().await;
            let life = handle.lifecycle.lock().await;
            if self.find_container(&id)?.is_none() {
                // A concurrent remove got here first and finished.
                return Ok(());
            }
            if entry.status().state() != ContainerState::Running {
                break (dump, life);
            }
            // A StartContainer got the lock first: stop what it started.
        };
        // No `removing` mark is written first: the exit is recorded, and the teardown below
        // is one rename per directory, each leaving a state that Remove (or recovery) takes
        // up again.
        crate::failpoint!("container.remove.marked");
        self.discard_container(&id).await;
        self.drop_handle(&id);
        tracing::info!(container = %id, "container removed");
        self.emit(EventKind::Deleted, &id, &entry.meta().sandbox_id);
        Ok(())
    }

    /// `runc delete --force` if runc still knows the container (in-process when its init is
    /// gone, see `OciRuntime::delete_stopped`). Usually the exit path has deleted it already;
    /// spawning runc (~7 ms) only to hear "does not exist" made RemovePodSandbox and a
    /// restart with many exited containers slow.
    pub(super) async fn delete_runc_state(&self, id: &str) {
        if !self.handler_of(id).root.join(id).exists() {
            return;
        }
        if let Err(e) = self.runc(id).delete_stopped(id).await {
            tracing::debug!(container = %id, "runc delete: {e}");
        }
    }

    /// Removes everything of container `id` that exists (idempotent, best effort for the OS
    /// pieces, errors logged); the record goes last. The directories are moved into the trash
    /// (the bundle with its rootfs mount first, then the record with the writable layer) and
    /// unmounted and deleted in the background: the overlay's unmount syncs the whole upper
    /// filesystem, tens of milliseconds the caller need not wait for (issue 13).
    pub(super) async fn discard_container(&self, id: &str) {
        let t0 = std::time::Instant::now();
        self.delete_runc_state(id).await;
        let runc = t0.elapsed();
        let dir = self.layout.container_dir(id);
        if let Err(e) = self.trash.put(super::state::trash::Bin::Volatile, &dir) {
            tracing::warn!(container = %id, "cleanup: {e}");
        }
        crate::failpoint!("container.discard.files");
        let files = t0.elapsed() - runc;
        // The overlay may still be mounted on the image's layers for a moment: harmless, a
        // snapshot deleted under it stays readable through it until the unmount.
        if let Err(e) = self.images.leases().release(id) {
            tracing::warn!(container = %id, "release image lease: {e}");
        }
        if let Err(e) = self.state.containers.retire(id, &self.trash) {
            tracing::warn!(container = %id, "remove record: {e}");
        }
        tracing::debug!(
            container = %id,
            runc_us = runc.as_micros() as u64,
            files_us = files.as_micros() as u64,
            records_us = (t0.elapsed() - runc - files).as_micros() as u64,
            "container discarded"
        );
    }

    /// UpdateContainerResources: applies the limits with `runc update` to a running container,
    /// or writes them into the bundle of a created one (its cgroup is made at start), and
    /// records them for ContainerStatus.
    pub async fn update_container(self: &Arc<Self>, id: &str, resources: Resources) -> Result<()> {
        require_id("container", id)?;
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let handle = self.handle(&id);
        // Not during a checkpoint's dump: runc update freezes and thaws the cgroup CRIU froze.
        let _dump = handle.checkpoint.lock().await;
        let _life = handle.lifecycle.lock().await;
        if self.state.containers.get(&id).is_err() {
            return Err(Error::not_found(format!(
                "container {id}: update resources: removed while the update waited"
            )));
        }
        let status = entry.status();
        let st = status.state();
        if !matches!(st, ContainerState::Created | ContainerState::Running) {
            return Err(Error::precondition(format!(
                "container {id}: update resources: container is {st:?}"
            )));
        }
        let cpus = crate::oci::resources::HostCpus::detect();
        crate::oci::resources::validate(&resources, Some(&cpus))
            .map_err(|e| e.context(format!("container {id}: update resources")))?;
        let support = self.host.cgroup_support();
        if st == ContainerState::Created && status.monitor_pid == 0 {
            let dir = entry.meta().state_dir.clone();
            let (cid, r) = (id.clone(), resources.clone());
            tokio::task::spawn_blocking(move || {
                super::bundle::update_resources(&dir, |linux| {
                    crate::oci::resources::apply(&cid, &r, support, linux)
                })
            })
            .await
            .map_err(|e| Error::internal(format!("update task: {e}")))?
            .map_err(|e| e.context(format!("container {id}: update resources")))?;
        } else {
            let mut linux = oci_spec::runtime::LinuxResources::default();
            crate::oci::resources::apply(&id, &resources, support, &mut linux)?;
            let json = serde_json::to_value(&linux)
                .map_err(|e| Error::internal(format!("container {id}: encode resources: {e}")))?;
            self.runc(&id).update(&id, &json).await?;
        }
        entry.update(|s| {
            s.resources = Some(resources);
            Ok(())
        })?;
        Ok(())
    }

    /// ExecSync: runs `cmd` in the running container with its process settings; output capped
    /// at 16 MiB per stream; a timeout kills and reaps the process and is DeadlineExceeded.
    pub async fn exec_sync(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput> {
        let (id, mut process) = self.exec_process(id, cmd).await?;
        process.set_terminal(Some(false));
        process.set_console_size(None);
        let out = self
            .runc(&id)
            .exec(&id, &process, timeout, EXEC_OUTPUT_CAP)
            .await?;
        if out.timed_out {
            return Err(Error::new(
                ErrorKind::DeadlineExceeded,
                format!(
                    "container {id}: exec timed out after {}s (process killed)",
                    timeout.map_or(0, |t| t.as_secs())
                ),
            ));
        }
        Ok(out)
    }
}

impl Runtime {
    /// The container's process settings, the base of its execs (cached in its handle).
    /// The full id of running container `id` and the process an exec of `cmd` runs there:
    /// the container's process settings with `cmd` as its arguments. Unknown: NotFound; not
    /// running: FailedPrecondition.
    pub(super) async fn exec_process(
        &self,
        id: &str,
        cmd: Vec<String>,
    ) -> Result<(String, oci_spec::runtime::Process)> {
        require_id("container", id)?;
        if cmd.is_empty() {
            return Err(Error::invalid(format!(
                "container {}: exec: cmd is required (the command and its arguments)",
                crate::error::echo(id)
            )));
        }
        for (i, a) in cmd.iter().enumerate() {
            super::validate::no_nul(&format!("exec: cmd[{i}]"), a)?;
        }
        let entry = self.container(id)?;
        let id = entry.id().to_string();
        let st = entry.status().state();
        if st != ContainerState::Running {
            return Err(Error::precondition(format!(
                "container {id}: exec: container is {st:?}"
            )));
        }
        // `runc exec` joins the container's cgroups: its grace period starts now (see start).
        self.warmer.warm();
        let mut process = (*self.exec_base(&entry).await?).clone();
        process.set_args(Some(cmd));
        Ok((id, process))
    }

    async fn exec_base(
        &self,
        entry: &super::state::meta::ContainerEntry,
    ) -> Result<Arc<oci_spec::runtime::Process>> {
        let handle = self.handle(entry.id());
        if let Some(t) = handle.exec_template() {
            return Ok(t);
        }
        let t = Arc::new(exec_template(entry.id(), &entry.meta().state_dir).await?);
        handle.set_exec_template(t.clone());
        Ok(t)
    }
}

/// The process settings of the container's bundle (`config.json`), the base of its execs.
async fn exec_template(id: &str, state_dir: &Path) -> Result<oci_spec::runtime::Process> {
    let config = paths::bundle(state_dir).join("config.json");
    let spec = tokio::fs::read(&config)
        .await
        .ctx(|| format!("container {id}: read {}", config.display()))?;
    let spec: oci_spec::runtime::Spec = serde_json::from_slice(&spec)
        .map_err(|e| Error::internal(format!("container {id}: {}: {e}", config.display())))?;
    spec.process()
        .clone()
        .ok_or_else(|| Error::internal(format!("container {id}: spec has no process")))
}
