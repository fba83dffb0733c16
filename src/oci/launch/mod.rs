//! Starting monitors and learning when their containers exit: [`launch_monitor`], the spare monitor, the [`MonitorLauncher`] trait with [`ProcessLauncher`] and [`FakeLauncher`], and [`ExitWatcher`].

pub mod launcher;
pub mod spare;
mod start;

pub use launcher::{FakeLauncher, MonitorLauncher, ProcessLauncher};
pub use start::{
    find_monitors, launch_monitor, launch_with, monitor_alive, read_exit, restock,
    running_monitors, ContainerExit, ExitWatcher, Launched, MonitorArgs,
};
