//! `runc checkpoint --leave-running` (CRIU) and the start-up probe saying whether CRIU works on this node (`criu check`).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::Runc;
use crate::error::{Error, Result};
use crate::sys::CommandExt;

/// How long `criu check` may take at start.
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);
/// How long one checkpoint may take when the request sets no timeout: CRIU writes the whole
/// memory of the container (hundreds of MiB on a slow disk or an emulated guest).
pub const CHECKPOINT_TIMEOUT: Duration = Duration::from_secs(600);
/// The CRIU log runc leaves in the work directory.
pub const DUMP_LOG: &str = "dump.log";

/// CRIU's path when `criu check` passes; otherwise why checkpointing is unavailable (CRIU not
/// installed, or its check's own last error line: a CRIU too old for the kernel, a kernel
/// built without what CRIU needs). Blocking; run once at start.
pub fn probe_criu() -> std::result::Result<PathBuf, String> {
    let criu = crate::oci::host::find_in_path("criu")
        .ok_or_else(|| "CRIU is not installed (no criu in PATH)".to_string())?;
    check(&criu).map(|()| criu)
}

/// `criu check` by the program at `criu`: Ok when it passes, else its error line.
fn check(criu: &Path) -> std::result::Result<(), String> {
    let mut cmd = Command::new(criu);
    cmd.arg("check")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .reset_signals();
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("{} check: cannot run: {e}", criu.display()))?;
    // Both pipes drained while it runs: a chatty check must not block on a full pipe.
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let start = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if start.elapsed() < PROBE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Ok(None) | Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "{} check did not finish in {PROBE_TIMEOUT:?}",
                    criu.display()
                ));
            }
        }
    };
    let output = |h: std::thread::JoinHandle<Vec<u8>>| h.join().unwrap_or_default();
    let out = std::process::Output {
        status,
        stdout: output(stdout),
        stderr: output(stderr),
    };
    if out.status.success() {
        return Ok(());
    }
    let text = [out.stderr, out.stdout].concat();
    let text = String::from_utf8_lossy(&text);
    let why = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .find(|l| l.contains("Error"))
        .or_else(|| text.lines().map(str::trim).rfind(|l| !l.is_empty()))
        .unwrap_or("no message")
        .to_string();
    Err(format!(
        "criu check failed ({}): {why}; CRIU does not work with this kernel",
        out.status
    ))
}

/// Reads `pipe` to its end on a thread, keeping the first 64 KiB.
fn drain<R: std::io::Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        use std::io::Read;
        let mut kept = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.by_ref().take(64 << 10).read_to_end(&mut kept);
            let _ = std::io::copy(&mut pipe, &mut std::io::sink());
        }
        kept
    })
}

/// Where and how long one dump goes.
#[derive(Debug, Clone)]
pub struct Dump {
    /// CRIU's images.
    pub images: PathBuf,
    /// CRIU's work directory (its `dump.log`).
    pub work: PathBuf,
    /// DeadlineExceeded after this long.
    pub timeout: Duration,
}

impl Runc {
    /// `runc checkpoint --leave-running --image-path IMAGES --work-path WORK ID`: CRIU dumps
    /// the container's processes into `dump.images` and leaves them running (within
    /// `dump.timeout`); its log is `work/dump.log`, whose last error lines a failure carries.
    pub(crate) async fn checkpoint_leave_running(&self, id: &str, dump: &Dump) -> Result<()> {
        let args: Vec<OsString> = vec![
            "checkpoint".into(),
            "--leave-running".into(),
            "--image-path".into(),
            dump.images.clone().into(),
            "--work-path".into(),
            dump.work.clone().into(),
            id.into(),
        ];
        let mut slow = self.clone();
        slow.command_timeout = dump.timeout;
        slow.run(id, "checkpoint", args, None)
            .await
            .map(drop)
            .map_err(|e| match criu_errors(&dump.work.join(DUMP_LOG)) {
                Some(log) => Error::new(e.kind(), format!("{}; CRIU: {log}", e.message())),
                None => e,
            })
    }
}

/// The last few error lines of a CRIU log, joined; `None` when it has none.
pub fn criu_errors(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let errors: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("Error") || l.contains("error"))
        .collect();
    let tail = &errors[errors.len().saturating_sub(3)..];
    (!tail.is_empty()).then(|| tail.join(" | "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chatty_failing_check_is_read_to_its_end_not_timed_out() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("bosun-criu-chatty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("test fixture");
        let fake = dir.join("criu");
        // 1 MiB on stdout (a pipe holds 64 KiB) before the error and the exit.
        std::fs::write(
            &fake,
            "#!/bin/sh\nhead -c 1048576 /dev/zero\necho 'Error (criu/kerndat.c:1): boom' >&2\nexit 1\n",
        )
        .expect("test fixture");
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755))
            .expect("test fixture");
        let t = Instant::now();
        let why = check(&fake).expect_err("a failing check");
        assert!(t.elapsed() < PROBE_TIMEOUT / 2, "took {:?}", t.elapsed());
        assert!(why.contains("Error (criu/kerndat.c:1): boom"), "{why}");
        std::fs::remove_dir_all(&dir).expect("test fixture");
    }

    #[test]
    fn criu_errors_keeps_the_last_three_error_lines() {
        let dir = std::env::temp_dir().join(format!("bosun-criu-log-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("test fixture");
        let log = dir.join(DUMP_LOG);
        std::fs::write(&log, "(0.1) ok\n(0.2) Error (a): 1\n(0.3) Error (b): 2\n(0.4) Error (c): 3\n(0.5) Error (d): 4\n").expect("test fixture");
        let got = criu_errors(&log).expect("test fixture");
        assert_eq!(
            got,
            "(0.3) Error (b): 2 | (0.4) Error (c): 3 | (0.5) Error (d): 4"
        );
        std::fs::write(&log, "all fine\n").expect("test fixture");
        assert_eq!(criu_errors(&log), None);
        std::fs::remove_dir_all(&dir).expect("test fixture");
    }
}
