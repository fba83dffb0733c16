//! The probers' own single-threaded tokio runtime, so hundreds of probe attempts a second do not wake the daemon's worker threads.

use std::io;

/// Starts the runtime on a thread of its own (`bosun-probes`) and returns its handle. The
/// thread lives as long as the process; probe tasks spawned on it stop when their `Probes`
/// handle drops.
pub fn start() -> io::Result<tokio::runtime::Handle> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("bosun-probes")
        .build()?;
    let handle = rt.handle().clone();
    std::thread::Builder::new()
        .name("bosun-probes".into())
        .spawn(move || rt.block_on(std::future::pending::<()>()))?;
    Ok(handle)
}
