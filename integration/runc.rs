//! The runc wrapper, monitor launcher and exit watcher against real runc and busybox: states,
//! update, exec output, exit codes, timeouts and caps, kill and delete.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use bosun::oci::{
    launch_monitor, ContainerExit, ExecOutput, ExitWatcher, Launched, MonitorArgs, MonitorLaunch,
    OciRuntime, Runc, EXEC_OUTPUT_CAP,
};
use serde_json::json;

use crate::support::{
    block_on, cgroup_dirs, remove_cgroups, runc_bin, scratch, trial, wait_until, Need,
};

const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images];

type Test = fn() -> Result<()>;

const TESTS: [(&str, Test); 5] = [
    ("runc::launch_failure_names_the_container", launch_fails),
    (
        "runc::create_start_kill_delete_with_exit_watcher",
        lifecycle,
    ),
    ("runc::exec_output_and_exit_codes", exec_codes),
    ("runc::exec_timeout_kills_and_reaps", exec_timeout),
    ("runc::exec_output_is_capped_at_16_mib", exec_cap),
];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    TESTS.iter().map(|(n, f)| trial(n, NEEDS, *f)).collect()
}

fn lifecycle() -> Result<()> {
    let fx = Fixture::new("life")?;
    block_on(async {
        // The monitor runs the container (`runc run --detach`, issue 13): it is running, with
        // the init the monitor reported.
        let launched = fx.launch().await?;
        let state = fx.runc.state(&fx.id).await?.context("no state")?;
        ensure!(state.status == "running", "{state:?}");
        ensure!(state.pid == launched.init_pid, "{state:?} vs {launched:?}");
        fx.runc
            .update(&fx.id, &json!({"pids": {"limit": 123}}))
            .await?;
        let max = fx.cgroup_file("pids.max").unwrap_or_default();
        ensure!(max.trim() == "123", "pids.max {max:?}");
        let watcher = ExitWatcher::new(&fx.id, launched.monitor_pid, fx.exit_file());
        let waiting = tokio::spawn(async move { watcher.wait().await });
        tokio::time::sleep(Duration::from_millis(200)).await;
        ensure!(!waiting.is_finished(), "watcher resolved while running");
        fx.runc.kill(&fx.id, libc::SIGKILL, true).await?;
        let exit = tokio::time::timeout(Duration::from_secs(30), waiting).await??;
        let ContainerExit::Recorded(record) = exit else {
            anyhow::bail!("no exit record: {exit:?}");
        };
        ensure!(
            record.exit_code == 137 && record.signal == Some(9),
            "{record:?}"
        );
        ensure!(record.pid == launched.init_pid, "{record:?}");
        // The monitor is gone now: a new watcher reads the file at once.
        let again = ExitWatcher::new(&fx.id, launched.monitor_pid, fx.exit_file());
        let exit = tokio::time::timeout(Duration::from_secs(5), again.wait()).await?;
        ensure!(exit == ContainerExit::Recorded(record), "{exit:?}");
        fx.runc.delete(&fx.id, false).await?;
        ensure!(fx.runc.state(&fx.id).await?.is_none(), "state after delete");
        let e = fx
            .runc
            .kill(&fx.id, 9, false)
            .await
            .expect_err("kill after delete");
        let want = format!("container {}: runc kill: ", fx.id);
        ensure!(e.to_string().starts_with(&want), "{e}");
        Ok(())
    })?;
    fx.finish()
}

fn launch_fails() -> Result<()> {
    let fx = Fixture::with_args("fails", &["/no-such"])?;
    let e = block_on(fx.launch()).expect_err("launch of a bad bundle");
    // runc's failure, reported by the monitor: not put down to the monitor.
    let want = format!("container {}: start: ", fx.id);
    ensure!(e.to_string().starts_with(&want), "{e}");
    ensure!(e.to_string().contains("/no-such"), "{e}");
    let kind = e.downcast_ref::<bosun::Error>().map(|e| e.kind());
    ensure!(
        kind == Some(bosun::ErrorKind::FailedPrecondition),
        "{kind:?}: {e}"
    );
    ensure!(!fx.exit_file().exists(), "exit file written");
    fx.finish()
}

fn exec_codes() -> Result<()> {
    let fx = Fixture::new("exec")?;
    block_on(async {
        fx.running().await?;
        let out = fx.exec(&["echo", "hi"], None, EXEC_OUTPUT_CAP).await?;
        ensure!(
            out.stdout == b"hi\n" && out.exit_code == 0 && !out.timed_out,
            "{out:?}"
        );
        let out = fx
            .exec(&["sh", "-c", "echo oops >&2; exit 7"], None, 16)
            .await?;
        ensure!(out.exit_code == 7 && out.stderr == b"oops\n", "{out:?}");
        let e = fx.exec(&["/no-such"], None, 16).await;
        ensure!(e.is_err_and(|e| e.to_string().contains("/no-such")));
        let e = fx.runc.exec("bosun-it-none", &process(&[]), None, 1).await;
        ensure!(e.is_err_and(|e| e.to_string().contains("does not exist")));
        Ok(())
    })?;
    fx.finish()
}

fn exec_timeout() -> Result<()> {
    let fx = Fixture::new("timeout")?;
    block_on(async {
        let init = fx.running().await?.init_pid;
        let start = std::time::Instant::now();
        let out = fx
            .exec(
                &["sh", "-c", "sleep 100 & sleep 100"],
                Some(Duration::from_secs(1)),
                16,
            )
            .await?;
        let took = start.elapsed();
        ensure!(
            out.timed_out && took < Duration::from_secs(10),
            "{out:?} {took:?}"
        );
        // Nothing but the init is left in the container and we have no zombie children.
        let procs = fx.container_pids();
        ensure!(
            procs == [init],
            "processes left in the container: {procs:?}"
        );
        // (The killed background sleep may linger as a zombie of the container's init, which
        // does not reap: that is the container's business, as with any non-reaping init.)
        // Only runc zombies are ours to judge (exec spawns runc); tests share this process, so
        // wait for a sibling's child to be reaped by its owner. A real leak never settles.
        let me = std::process::id() as i32;
        let runc_zombies = || {
            zombie_children(me)
                .into_iter()
                .filter(|p| {
                    std::fs::read_to_string(format!("/proc/{p}/comm"))
                        .is_ok_and(|c| c.trim() == "runc")
                })
                .collect::<Vec<_>>()
        };
        ensure!(
            wait_until(5, || runc_zombies().is_empty()),
            "zombies: {:?}",
            runc_zombies()
        );
        Ok(())
    })?;
    fx.finish()
}

fn exec_cap() -> Result<()> {
    let fx = Fixture::new("cap")?;
    block_on(async {
        fx.running().await?;
        let args = ["head", "-c", "20000000", "/dev/zero"];
        let out = tokio::time::timeout(
            Duration::from_secs(60),
            fx.exec(&args, None, EXEC_OUTPUT_CAP),
        )
        .await??;
        ensure!(out.exit_code == 0, "exit {}", out.exit_code);
        ensure!(out.stdout.len() == 16 << 20, "{} bytes", out.stdout.len());
        ensure!(out.stdout.iter().all(|&b| b == 0), "not zeros");
        Ok(())
    })?;
    fx.finish()
}

fn process(args: &[&str]) -> oci_spec::runtime::Process {
    let mut p = oci_spec::runtime::Process::default();
    p.set_args(Some(args.iter().map(|a| a.to_string()).collect()));
    p.set_cwd("/".into());
    p.set_terminal(Some(false));
    p.set_env(Some(vec!["PATH=/usr/bin:/bin:/usr/sbin:/sbin".into()]));
    p.set_capabilities(None);
    p.set_rlimits(None);
    p
}

/// Pids in /proc for which `keep` holds.
fn pids_where(keep: impl Fn(i32) -> bool) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| keep(*pid))
        .collect()
}

/// Zombie children of `parent`.
fn zombie_children(parent: i32) -> Vec<i32> {
    let me = parent.to_string();
    pids_where(|pid| {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let rest = stat.rfind(')').map(|i| &stat[i + 2..]).unwrap_or("");
        let f: Vec<&str> = rest.split(' ').collect();
        f.first() == Some(&"Z") && f.get(1) == Some(&me.as_str())
    })
}

/// Live (non-zombie) monitor processes for container `id`.
fn monitors_of(id: &str) -> Vec<i32> {
    let needle = format!("\0monitor\0--id\0{id}\0");
    pids_where(|pid| {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        String::from_utf8_lossy(&cmdline).contains(&needle)
    })
}

/// A busybox bundle running `sleep 1000` with its runc root, log and exit file in a scratch
/// dir; dropping it force-deletes the container, kills its monitor, removes its cgroups.
struct Fixture {
    dir: tempfile::TempDir,
    id: String,
    runc: Runc,
}

impl Fixture {
    fn new(name: &str) -> Result<Fixture> {
        Self::with_args(name, &["sleep", "1000"])
    }

    fn with_args(name: &str, args: &[&str]) -> Result<Fixture> {
        let dir = scratch()?;
        let runc_path = runc_bin().context("runc")?;
        let mut runc = Runc::new(runc_path, dir.path().join("runc-root"));
        runc.tmp_dir = dir.path().to_path_buf();
        let fx = Fixture {
            id: format!("bosun-it-runc-{name}-{}", std::process::id()),
            dir,
            runc,
        };
        let rootfs = fx.bundle().join("rootfs");
        std::fs::create_dir_all(&rootfs)?;
        std::fs::create_dir(fx.dir.path().join("logs"))?;
        let st = Command::new("tar")
            .arg("-xzf")
            .arg(crate::support::busybox_layer()?)
            .arg("-C")
            .arg(&rootfs)
            .status()?;
        ensure!(st.success(), "untar busybox: {st}");
        let spec = crate::support::minimal_spec(args, &fx.id);
        std::fs::write(fx.bundle().join("config.json"), serde_json::to_vec(&spec)?)?;
        Ok(fx)
    }

    fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    fn exit_file(&self) -> PathBuf {
        self.dir.path().join("exit")
    }

    async fn launch(&self) -> Result<Launched> {
        let d = self.dir.path();
        let args = MonitorArgs::new(
            &self.id,
            self.bundle(),
            &self.runc.binary,
            &self.runc.root,
            d.join("logs/0.log"),
            self.exit_file(),
        );
        let launch = MonitorLaunch {
            program: Some(PathBuf::from(env!("CARGO_BIN_EXE_bosun"))),
            ..MonitorLaunch::new(args)
        };
        Ok(launch_monitor(&launch).await?)
    }

    async fn running(&self) -> Result<Launched> {
        self.launch().await
    }

    async fn exec(
        &self,
        args: &[&str],
        timeout: Option<Duration>,
        cap: usize,
    ) -> Result<ExecOutput> {
        Ok(self
            .runc
            .exec(&self.id, &process(args), timeout, cap)
            .await?)
    }

    /// The container's cgroup directories (one per v1 controller, or the v2 one).
    fn cgroups(&self) -> Vec<PathBuf> {
        cgroup_dirs(&self.id)
    }

    /// `file` of the container's first cgroup directory that has it.
    fn cgroup_file(&self, file: &str) -> Option<String> {
        let dirs = self.cgroups();
        dirs.iter()
            .find_map(|d| std::fs::read_to_string(d.join(file)).ok())
    }

    /// Pids in the container's cgroup.
    fn container_pids(&self) -> Vec<i32> {
        let procs = self.cgroup_file("cgroup.procs").unwrap_or_default();
        let mut pids: Vec<i32> = procs
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        pids.sort();
        pids
    }

    /// Deletes the container and checks nothing is left: monitor, cgroups.
    fn finish(self) -> Result<()> {
        let _ = block_on(self.runc.delete(&self.id, true));
        ensure!(
            wait_until(10, || monitors_of(&self.id).is_empty()),
            "monitor still running"
        );
        let left = self.cgroups();
        ensure!(left.is_empty(), "cgroups left: {left:?}");
        Ok(())
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = Command::new(&self.runc.binary)
            .arg("--root")
            .arg(&self.runc.root)
            .args(["delete", "--force", &self.id])
            .output();
        for pid in monitors_of(&self.id) {
            let _ = rustix::process::Pid::from_raw(pid)
                .map(|p| rustix::process::kill_process(p, rustix::process::Signal::KILL));
        }
        remove_cgroups(&self.id);
    }
}
