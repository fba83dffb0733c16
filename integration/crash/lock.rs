//! A SIGKILLed daemon that cannot exit yet keeps its root lock: here a thread of it sits in
//! uninterruptible sleep creating a container's log directory on a frozen file system. The
//! next daemon waits for it, saying so, and serves once it is gone (issue 16).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};

use crate::support::cri::{self, Pod};
use crate::support::{block_on, trial, wait_until, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "crash::lock::the_next_daemon_waits_for_a_killed_one_stuck_in_the_kernel",
        &[
            Need::Root,
            Need::Runc,
            Need::Images,
            Need::Cni,
            Need::Freeze,
        ],
        waits_for_killed_daemon,
    )]
}

fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd).args(args).output()?;
    ensure!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// A small ext4 file system on a loop device; thawed, unmounted (the loop device goes with
/// it) and deleted on drop.
struct FrozenFs {
    image: PathBuf,
    mount: PathBuf,
}

impl FrozenFs {
    fn new(dir: &Path) -> Result<FrozenFs> {
        std::fs::create_dir_all(dir)?;
        let fs = FrozenFs {
            image: dir.join("fs.img"),
            mount: dir.join("mnt"),
        };
        std::fs::create_dir_all(&fs.mount)?;
        std::fs::File::create(&fs.image)?.set_len(32 << 20)?;
        let (image, mount) = (
            fs.image.display().to_string(),
            fs.mount.display().to_string(),
        );
        run("mkfs.ext4", &["-q", "-F", &image])?;
        run("mount", &["-o", "loop", &image, &mount])?;
        Ok(fs)
    }
    fn freeze(&self) -> Result<()> {
        run("fsfreeze", &["-f", &self.mount.display().to_string()])
    }
    fn thaw(&self) -> Result<()> {
        run("fsfreeze", &["-u", &self.mount.display().to_string()])
    }
}

impl Drop for FrozenFs {
    fn drop(&mut self) {
        let _ = self.thaw();
        let _ = run("umount", &["-l", &self.mount.display().to_string()]);
        let _ = std::fs::remove_file(&self.image);
    }
}

/// The daemon's threads in uninterruptible sleep, as `tid wchan`.
fn stuck(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("stat"))
                .is_ok_and(|s| s.rfind(')').and_then(|i| s.get(i + 2..i + 3)) == Some("D"))
        })
        .map(|t| {
            let wchan = std::fs::read_to_string(t.path().join("wchan")).unwrap_or_default();
            format!("{} {wchan}", t.file_name().to_string_lossy())
        })
        .collect()
}

fn waits_for_killed_daemon() -> Result<()> {
    let mut d = cri::daemon()?;
    let image = cri::import(&d, "busybox")?;
    // Declared after the daemon: thawed and unmounted before the daemon's cleanup runs.
    let fs = FrozenFs::new(&d.dir().join("frozen"))?;
    let mut config = cri::pod_config(&d, "frozen");
    config.log_directory = fs.mount.join("logs").display().to_string();
    let pod = cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::run_pod(&mut rt, config).await
        }),
    )?;
    fs.freeze()?;
    // CreateContainer makes the log's directory: on the frozen fs, that mkdir sleeps.
    let mut c = cri::sh_config(&pod, "stuck", &image, "sleep 1");
    c.log_path = "new-dir/stuck.log".into();
    let socket = d.socket();
    let call = {
        let pod: Pod = pod.clone();
        std::thread::spawn(move || {
            block_on(async {
                let ch = bosun::cli::client::connect(&socket).await?;
                let mut rt =
                    bosun::proto::runtime::v1::runtime_service_client::RuntimeServiceClient::new(
                        ch,
                    );
                cri::create(&mut rt, &pod, &c).await
            })
        })
    };
    let pid = d.pid().context("daemon pid")?;
    // The same thread still in D 300 ms later: blocked on the frozen fs, not in a moment of
    // disk I/O that a busy machine can show any thread in.
    let blocked = || {
        let first = stuck(pid);
        std::thread::sleep(Duration::from_millis(300));
        let later = stuck(pid);
        first.iter().any(|t| later.contains(t))
    };
    ensure!(
        wait_until(10, blocked),
        "no daemon thread blocked on the frozen fs"
    );
    let mut old = d.kill_nowait().context("daemon child")?;
    std::thread::sleep(Duration::from_secs(1));
    let lingering = stuck(pid);
    ensure!(
        Path::new(&format!("/proc/{pid}")).exists() && !lingering.is_empty(),
        "the killed daemon exited although a thread was in the kernel"
    );
    eprintln!("killed daemon {pid} still there 1 s after SIGKILL; D threads: {lingering:?}");
    d.launch()?;
    std::thread::sleep(Duration::from_secs(2));
    if !d.running() {
        bail!(
            "the next daemon gave up while the killed one was exiting; log:\n{}",
            d.log()
        );
    }
    ensure!(
        d.log().contains("was killed but has not exited yet"),
        "the next daemon waits without saying why; log:\n{}",
        d.log()
    );
    fs.thaw()?;
    let status = old.wait()?;
    eprintln!("killed daemon gone after the thaw: {status:?}");
    d.wait_serving(20)?;
    let created = call
        .join()
        .map_err(|_| anyhow::anyhow!("call thread panicked"))?;
    ensure!(
        created.is_err(),
        "CreateContainer succeeded in a killed daemon"
    );
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    cri::assert_clean(&d)
}
