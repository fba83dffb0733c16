//! Starting monitors and learning when their containers exit: [`launch_monitor`], the spare monitor, the [`MonitorLauncher`] trait with [`ProcessLauncher`] and [`FakeLauncher`], and [`ExitWatcher`].

mod exit;
pub mod launcher;
pub mod spare;
mod start;

pub use crate::monitor::args::MonitorArgs;
pub use exit::{
    find_monitors, monitor_alive, read_exit, running_monitors, ContainerExit, ExitWatcher,
};
pub use launcher::{FakeLauncher, MonitorLauncher, ProcessLauncher};
pub use start::{launch_monitor, launch_with, restock, Launched, MonitorLaunch};
