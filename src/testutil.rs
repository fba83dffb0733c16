//! Helpers shared by unit tests: stand-in executables that never fail with ETXTBSY, small full file systems.

use std::path::Path;
use std::time::{Duration, Instant};

/// The variable that makes a script written by [`script`] exit at once.
const PROBE: &str = "BOSUN_SCRIPT_PROBE";

/// Writes the shell script `text` (shebang first) to `path` as an executable and returns once
/// it can be executed.
///
/// Tests run on parallel threads: one that forks while this one holds the script open for
/// writing passes the descriptor to its child until that child execs, and executing the
/// script meanwhile fails with ETXTBSY. So the script is run once, with [`PROBE`] set (a line
/// after the shebang makes it exit), until the kernel lets it; no new writer can appear after.
pub(crate) fn script(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    let (shebang, body) = text.split_once('\n').unwrap_or((text, ""));
    let guarded = format!("{shebang}\n[ -n \"${PROBE}\" ] && exit 0\n{body}");
    std::fs::write(path, guarded).expect("write script");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match std::process::Command::new(path).env(PROBE, "1").status() {
            Ok(s) if s.success() => return,
            Ok(s) => panic!("{}: the probe run failed: {s}", path.display()),
            Err(e)
                if e.raw_os_error() == Some(rustix::io::Errno::TXTBSY.raw_os_error())
                    && Instant::now() < until =>
            {
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => panic!("{}: {e}", path.display()),
        }
    }
}

/// A tmpfs of a few pages on a temp dir (root only), unmounted on drop: a file system to fill.
pub(crate) struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    /// Mounts a tmpfs of `kib` KiB; None (the caller skips, saying why) when not root.
    pub(crate) fn new(test: &str, kib: u64) -> Option<SmallTmpfs> {
        if !rustix::process::geteuid().is_root() {
            eprintln!("SKIP {test}: needs root (mounts a tmpfs)");
            return None;
        }
        let dir = tempfile::tempdir().expect("tempdir");
        let data = std::ffi::CString::new(format!("size={kib}k")).expect("options");
        rustix::mount::mount(
            "none",
            dir.path(),
            "tmpfs",
            rustix::mount::MountFlags::empty(),
            data.as_c_str(),
        )
        .expect("mount a tmpfs");
        Some(SmallTmpfs { dir })
    }

    /// Its mount point.
    pub(crate) fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `filler` until the file system is full (the last write a short one).
    pub(crate) fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path().join("filler")).expect("filler");
        while f.write(&[0u8; 1024]).is_ok_and(|n| n > 0) {}
    }

    /// Deletes `filler`.
    pub(crate) fn free(&self) {
        std::fs::remove_file(self.path().join("filler")).expect("remove filler");
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = rustix::mount::unmount(self.dir.path(), rustix::mount::UnmountFlags::DETACH);
    }
}
