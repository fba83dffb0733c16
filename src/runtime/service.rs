//! The runtime service: the domain API `cri/` (and later `pod/`) calls for sandboxes and containers.

use std::sync::Arc;
use std::time::Duration;

use super::meta::{ContainerEntry, NewContainer, SandboxEntry, SandboxRequest};
use super::status::{ContainerState, SandboxState};
use super::table::Filter;
use crate::error::Result;
use crate::oci::{ExecOutput, Resources};

/// Sandboxes and containers on runc.
pub struct Runtime {}

impl Runtime {
    /// RunPodSandbox: returns the new sandbox id.
    pub async fn run_sandbox(self: &Arc<Self>, req: SandboxRequest) -> Result<String> {
        todo!("{req:?}")
    }
    /// StopPodSandbox: idempotent, unknown ids succeed.
    pub async fn stop_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        todo!("{id}")
    }
    /// RemovePodSandbox: idempotent, unknown ids succeed.
    pub async fn remove_sandbox(self: &Arc<Self>, id: &str) -> Result<()> {
        todo!("{id}")
    }
    /// PodSandboxStatus: the sandbox with this id (or unique prefix); NotFound otherwise.
    pub fn sandbox(&self, id: &str) -> Result<Arc<SandboxEntry>> {
        todo!("{id}")
    }
    /// ListPodSandbox.
    pub fn list_sandboxes(&self, filter: &Filter<SandboxState>) -> Vec<Arc<SandboxEntry>> {
        todo!("{filter:?}")
    }
    /// CreateContainer in `sandbox_id`: returns the new container id.
    pub async fn create_container(
        self: &Arc<Self>,
        sandbox_id: &str,
        new: NewContainer,
    ) -> Result<String> {
        todo!("{sandbox_id} {new:?}")
    }
    /// StartContainer.
    pub async fn start_container(self: &Arc<Self>, id: &str) -> Result<()> {
        todo!("{id}")
    }
    /// StopContainer with a grace period in seconds (`<= 0`: SIGKILL at once); idempotent.
    pub async fn stop_container(self: &Arc<Self>, id: &str, timeout_secs: i64) -> Result<()> {
        todo!("{id} {timeout_secs}")
    }
    /// RemoveContainer: idempotent.
    pub async fn remove_container(self: &Arc<Self>, id: &str) -> Result<()> {
        todo!("{id}")
    }
    /// ContainerStatus: the container with this id (or unique prefix); NotFound otherwise.
    pub fn container(&self, id: &str) -> Result<Arc<ContainerEntry>> {
        todo!("{id}")
    }
    /// ListContainers.
    pub fn list_containers(&self, filter: &Filter<ContainerState>) -> Vec<Arc<ContainerEntry>> {
        todo!("{filter:?}")
    }
    /// UpdateContainerResources.
    pub async fn update_container(self: &Arc<Self>, id: &str, resources: Resources) -> Result<()> {
        todo!("{id} {resources:?}")
    }
    /// ExecSync: `timeout` None means none; a timeout is Err(DeadlineExceeded) once the process
    /// is killed and reaped; a non-zero exit is a normal result.
    pub async fn exec_sync(
        self: &Arc<Self>,
        id: &str,
        cmd: Vec<String>,
        timeout: Option<Duration>,
    ) -> Result<ExecOutput> {
        todo!("{id} {cmd:?} {timeout:?}")
    }
}
