//! The monitor launcher behind a trait (DESIGN rule 3): [`MonitorLauncher`], the real [`ProcessLauncher`] and a scripted [`FakeLauncher`] for unit tests.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::Mutex;

use super::exit::{ContainerExit, ExitWatcher};
use super::spare::SpareSlot;
use super::start::{launch_with, restock, Launched, MonitorLaunch};
use crate::error::Result;

/// Starts monitors (which run containers) and waits for containers to exit.
#[tonic::async_trait]
pub trait MonitorLauncher: Send + Sync {
    /// Starts `bosun monitor` for `launch.args.id`; see [`crate::oci::launch_monitor`].
    async fn launch(&self, launch: &MonitorLaunch) -> Result<Launched>;
    /// Resolves when the container watched by `monitor_pid` has exited; see [`ExitWatcher`].
    /// Works for monitors started before a daemon restart.
    async fn wait_exit(&self, id: &str, monitor_pid: i32, exit_file: &Path) -> ContainerExit;
    /// Gets ready for the next launch like `launch` (a spare monitor), in the background;
    /// called once a start is done, so that this work takes nothing from it.
    fn restock(&self, _launch: &MonitorLaunch) {}
}

/// The real launcher: spawns processes (keeping a spare monitor ready), watches pidfds.
#[derive(Debug, Default)]
pub struct ProcessLauncher {
    spare: std::sync::Arc<SpareSlot>,
}

#[tonic::async_trait]
impl MonitorLauncher for ProcessLauncher {
    async fn launch(&self, launch: &MonitorLaunch) -> Result<Launched> {
        launch_with(launch, Some(&self.spare)).await
    }

    async fn wait_exit(&self, id: &str, monitor_pid: i32, exit_file: &Path) -> ContainerExit {
        ExitWatcher::new(id, monitor_pid, exit_file).wait().await
    }

    fn restock(&self, launch: &MonitorLaunch) {
        restock(launch, &self.spare);
    }
}

/// A scripted launcher: `launch` pops the next queued result (default: pids 1000+n and
/// 2000+n) and records the arguments; `wait_exit` pops the next queued exit, or waits forever
/// when none is queued (a container that keeps running).
#[derive(Debug, Default)]
pub struct FakeLauncher {
    inner: Mutex<FakeInner>,
}

#[derive(Debug, Default)]
struct FakeInner {
    launched: Vec<MonitorLaunch>,
    results: VecDeque<Result<Launched>>,
    exits: VecDeque<ContainerExit>,
}

impl FakeLauncher {
    fn lock(&self) -> std::sync::MutexGuard<'_, FakeInner> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next `launch` returns `result`.
    pub fn push_launch(&self, result: Result<Launched>) {
        self.lock().results.push_back(result);
    }

    /// The next `wait_exit` returns `exit`.
    pub fn push_exit(&self, exit: ContainerExit) {
        self.lock().exits.push_back(exit);
    }

    /// What every `launch` so far was asked to start.
    pub fn launched(&self) -> Vec<MonitorLaunch> {
        self.lock().launched.clone()
    }
}

#[tonic::async_trait]
impl MonitorLauncher for FakeLauncher {
    async fn launch(&self, launch: &MonitorLaunch) -> Result<Launched> {
        let mut inner = self.lock();
        inner.launched.push(launch.clone());
        let n = i32::try_from(inner.launched.len()).unwrap_or(i32::MAX - 3000);
        inner.results.pop_front().unwrap_or(Ok(Launched {
            monitor_pid: 1000 + n,
            init_pid: 2000 + n,
        }))
    }

    async fn wait_exit(&self, _id: &str, _monitor_pid: i32, _exit_file: &Path) -> ContainerExit {
        let next = self.lock().exits.pop_front();
        match next {
            Some(exit) => exit,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;
    use crate::monitor::args::MonitorArgs;

    #[tokio::test]
    async fn fake_launcher_scripts_results_and_exits() {
        let fake = FakeLauncher::default();
        let launcher: &dyn MonitorLauncher = &fake;
        let launch = MonitorLaunch::new(MonitorArgs::new("c1", "/b", "runc", "/r", "/l", "/e"));
        let first = launcher.launch(&launch).await.expect("launch");
        assert_eq!((first.monitor_pid, first.init_pid), (1001, 2001));
        fake.push_launch(Err(Error::internal("container c1: start monitor: boom")));
        assert!(launcher.launch(&launch).await.is_err());
        assert_eq!(fake.launched().len(), 2);
        fake.push_exit(ContainerExit::Unknown("gone".into()));
        let exit = launcher.wait_exit("c1", 1001, &launch.args.exit_file).await;
        assert_eq!(exit, ContainerExit::Unknown("gone".into()));
        let pending = launcher.wait_exit("c1", 1001, &launch.args.exit_file);
        let timed = tokio::time::timeout(std::time::Duration::from_millis(20), pending).await;
        assert!(timed.is_err(), "no queued exit: still running");
    }
}
