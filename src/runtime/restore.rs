//! Recovery at start: read every sandbox and container back, reconcile with the monitors, re-adopt them.

use std::sync::Arc;

use super::interrupted::unstartable;
use super::service::Runtime;
use super::state::load::{load_all, Recovered};
use super::state::meta::{ContainerMeta, SandboxMeta};
use super::state::paths;
use super::state::recover::reconcile;
use super::state::status::{now_ns, ContainerState, ContainerStatus, SandboxState};
use crate::oci::launch::read_exit;
use crate::oci::ContainerExit;
use crate::sandbox::PodNamespaces;

/// The exit record container `meta`'s monitor left, if any.
fn exit_record(meta: &ContainerMeta) -> Option<crate::monitor::exit_record::ExitRecord> {
    match read_exit(&paths::exit_file(&meta.state_dir)) {
        ContainerExit::Recorded(r) => Some(r),
        ContainerExit::Unknown(_) => None,
    }
}

/// Whether `status` is that of a created container no StartContainer got to launch a monitor
/// for (issue 13; a container created before it has one from its creation).
fn never_started(status: &ContainerStatus) -> bool {
    status.state() == ContainerState::Created && status.monitor_pid == 0
}

/// Whether `pid` is the monitor of container `id` (a recycled pid is not).
pub(super) fn monitor_alive(pid: u32, id: &str) -> bool {
    crate::oci::launch::monitor_alive(i32::try_from(pid).unwrap_or(0), id)
}

impl Runtime {
    /// Reads the state dir back before serving (DESIGN rule 7): containers whose monitor wrote
    /// an exit record while the daemon was down become EXITED with the real code and time;
    /// live monitors are watched again; a container whose monitor is gone without a record is
    /// UNKNOWN; a READY sandbox whose namespaces are gone (a reboot) becomes NOTREADY.
    /// Problems are logged, never fatal.
    pub(super) async fn recover(self: &Arc<Self>) {
        // First: no plugin of the previous daemon may still run when recovery's DEL does.
        self.network.recover().await;
        // Removals a crash interrupted: their objects are gone already, their files go now.
        let trashed = self.trash.sweep();
        if trashed > 0 {
            tracing::info!(
                trashed,
                "recovery: deleting what removals left in the trash"
            );
        }
        // A restore's extraction a crash interrupted (before its container was recorded).
        let staging = self.layout.durable.join(super::restore_checkpoint::STAGING);
        if let Err(e) = self.trash.put(super::state::trash::Bin::Durable, &staging) {
            tracing::warn!("recovery: {}: {e}", staging.display());
        }
        let mut recovered: Recovered<SandboxMeta, ContainerMeta> = load_all(&self.layout.durable);
        let mut changed = std::collections::HashSet::new();
        for c in &mut recovered.containers {
            let record = exit_record(&c.meta);
            let alive = monitor_alive(c.status.monitor_pid, &c.id);
            let mut reconciled = reconcile(c.status.clone(), record, alive);
            if never_started(&reconciled) {
                if let Some(why) = unstartable(&reconciled, &c.meta) {
                    reconciled.mark_unknown(why);
                }
            }
            if reconciled != c.status {
                changed.insert(c.id.clone());
                c.status = reconciled;
            }
        }
        crate::failpoint_async!("recover.reconciled");
        let problems = self.state.adopt(recovered);
        for p in &problems {
            tracing::warn!("recovery: {p}");
        }
        // Persist what reconciliation changed, watch live monitors, clean up exited ones.
        let mut monitors: Option<std::collections::HashSet<String>> = None;
        for entry in self.state.containers.list(&Default::default()) {
            let id = entry.id().to_string();
            let mut status = entry.status();
            let alive = monitor_alive(status.monitor_pid, &id);
            if !alive
                && !never_started(&status)
                && matches!(
                    status.state(),
                    ContainerState::Running | ContainerState::Created
                )
            {
                // Alive when reconciled, gone now: the container ended during recovery and its
                // monitor finished. Its exit record says how (issue 16: never RUNNING for ever).
                status = reconcile(status, exit_record(entry.meta()), false);
                changed.insert(id.clone());
            }
            if changed.contains(&id) {
                if let Err(e) = entry.update_even_if_full(|s| {
                    *s = status.clone();
                    Ok(())
                }) {
                    tracing::warn!(container = %id, "recovery: write status: {e}");
                }
            }
            let handle = self.handle(&id);
            match status.state() {
                ContainerState::Created if never_started(&status) => {
                    let monitored = monitors
                        .get_or_insert_with(|| {
                            crate::oci::launch::running_monitors()
                                .into_iter()
                                .map(|(id, _)| id)
                                .collect()
                        })
                        .contains(&id);
                    self.settle_created(&entry, monitored).await;
                }
                ContainerState::Running | ContainerState::Created if alive => {
                    let mut state = status.state();
                    if state == ContainerState::Created && self.started_behind_our_back(&id).await {
                        // The daemon died between `runc start` and the status write.
                        let pid = status.pid;
                        match entry.update(|s| s.start(now_ns(), pid)) {
                            Ok(_) => state = ContainerState::Running,
                            Err(e) => tracing::warn!(container = %id, "recovery: {e}"),
                        }
                        tracing::warn!(
                            container = %id,
                            "recovery: started while the daemon went down; start time is approximate"
                        );
                    }
                    if state == ContainerState::Running {
                        handle.set_init(status.pid);
                    }
                    self.watch_exit(&id, status.monitor_pid as i32);
                }
                _ => {
                    handle.set_exited();
                    self.delete_runc_state(&id).await;
                }
            }
        }
        // Mounts staged for a container are needed until its `runc run`: those of containers
        // still to be started stay, every other goes (a creation or start a crash cut short).
        let waiting: std::collections::HashSet<String> = self
            .state
            .containers
            .list(&Default::default())
            .iter()
            .filter(|e| never_started(&e.status()))
            .map(|e| e.id().to_string())
            .collect();
        let containers_dir = self.layout.volatile.join("containers");
        let unstaged = crate::oci::stage::unstage_all(&containers_dir, |id| !waiting.contains(id));
        if unstaged > 0 {
            tracing::warn!(unstaged, "recovery: detached mounts a creation left staged");
        }
        for entry in self.state.sandboxes.list(&Default::default()) {
            let id = entry.id().to_string();
            let meta = entry.meta();
            let state = entry.status().state();
            if state == SandboxState::NotReady {
                // A stop that died between CNI DEL and its status write: finish the DEL.
                if entry.status().network_attached {
                    self.recover_network(&entry).await;
                }
                continue;
            }
            let ns = PodNamespaces::open(&paths::ns_dir(&meta.state_dir));
            let own_net = meta.request.network != crate::oci::NamespaceMode::Node;
            let intact = ns.is_ok_and(|ns| !own_net || ns.net.is_some());
            if state != SandboxState::Ready || !intact {
                let why = if intact {
                    "set-up interrupted by a daemon crash"
                } else {
                    "namespaces are gone (node rebooted?)"
                };
                tracing::warn!(sandbox = %id, "recovery: {why}: marking it stopped");
                if let Err(e) = entry.update_even_if_full(|s| {
                    s.message = why.to_string();
                    s.stop(now_ns())
                }) {
                    tracing::warn!(sandbox = %id, "recovery: {e}");
                }
                // Its IP goes back now (DEL runs from the network's record of the attach, so
                // an ADD the crash interrupted is undone too, and a finished DEL is not rerun).
                self.recover_network(&entry).await;
            }
        }
        self.reconcile_network().await;
        // DELs a failed RunPodSandbox left to a background retry (their sandboxes are gone).
        self.resume_deferred_detaches();
        self.release_orphan_leases();
        tracing::info!(
            sandboxes = self.state.sandboxes.len(),
            containers = self.state.containers.len(),
            problems = problems.len(),
            "runtime state recovered"
        );
    }

    /// CNI DEL for a sandbox recovery found stopped; a failure is logged and left for
    /// Stop/RemovePodSandbox, which retry it.
    async fn recover_network(&self, entry: &crate::runtime::SandboxEntry) {
        if let Err(e) = self.detach_network(entry).await {
            tracing::warn!(sandbox = %entry.id(), "recovery: network teardown: {e}");
        }
    }

    /// Releases the image leases of containers that have no record: a CreateContainer that
    /// died between its lease and its record, a removal that died between the two, or a
    /// record a power cut lost. Such a lease would keep its layers from image GC for good.
    /// Nothing creates containers while recovery runs.
    fn release_orphan_leases(&self) {
        let leases = self.images.leases();
        for owner in leases.owners() {
            if self.state.containers.get(&owner).is_ok() {
                continue;
            }
            match leases.release(&owner) {
                Ok(()) => tracing::warn!(
                    lease = %owner,
                    "recovery: released the image lease of a container that has no record"
                ),
                Err(e) => tracing::warn!(lease = %owner, "recovery: {e}"),
            }
        }
    }

    /// Whether runc says a container we recorded as CREATED is running.
    async fn started_behind_our_back(&self, id: &str) -> bool {
        matches!(self.runc(id).state(id).await, Ok(Some(st)) if st.status == "running")
    }
}
