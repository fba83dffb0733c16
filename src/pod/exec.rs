//! The seam between probes/hooks and the runtime: running a command in a container.

use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::oci::runc::ExecOutput;
use crate::runtime::Runtime;

/// Runs a command in a running container (ExecSync), killing it at `timeout`.
/// A timeout is an error of kind DeadlineExceeded.
#[async_trait::async_trait]
pub trait Exec: Send + Sync + 'static {
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecOutput>;
}

#[async_trait::async_trait]
impl Exec for Arc<Runtime> {
    async fn exec(
        &self,
        container_id: &str,
        cmd: Vec<String>,
        timeout: Duration,
    ) -> Result<ExecOutput> {
        self.exec_sync(container_id, cmd, Some(timeout)).await
    }
}
