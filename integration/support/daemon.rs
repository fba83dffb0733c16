//! A bosun daemon on a temp socket, root and state dir; SIGTERM (then KILL) and removal on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use anyhow::{bail, Context};
use bosun::proto::bosun::v1::images_client::ImagesClient;
use bosun::proto::runtime::v1::image_service_client::ImageServiceClient;
use bosun::proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use super::{cgroup, scratch, wait_until};

/// The binary under test.
pub const BOSUN: &str = env!("CARGO_BIN_EXE_bosun");
/// The unit file shipped in the repository.
pub const UNIT_FILE: &str = "contrib/systemd/bosun.service";
/// Where [`Daemon::start_unit`] installs units (runtime units: gone at reboot).
const UNIT_DIR: &str = "/run/systemd/system";

/// A running daemon owned by one test: a child process, or a systemd unit made from the
/// repository's `contrib/systemd/bosun.service` ([`Daemon::start_unit`]).
pub struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    unit: Option<String>,
    env: Vec<(String, String)>,
    config: String,
    net: super::network::TestNet,
    /// `BOSUN_FAILPOINTS` for the next start (see src/failpoint.rs).
    failpoints: Option<String>,
}

impl Daemon {
    /// Starts a daemon with `config` (TOML, `@DIR@` and `@CGROUP@` replaced) added to the test's
    /// paths, with the cgroup driver of [`cgroup::driver`] unless `config` names one.
    pub fn start(config: &str) -> anyhow::Result<Daemon> {
        Self::start_with_env(config, &[])
    }

    /// [`Daemon::start`] once `before` has prepared its scratch dir (e.g. mounted a small file
    /// system where the root goes: every mount below the scratch dir goes with the daemon).
    pub fn start_after(
        config: &str,
        before: impl FnOnce(&Path) -> anyhow::Result<()>,
    ) -> anyhow::Result<Daemon> {
        let mut d = Self::prepare(config)?;
        before(d.dir.path())?;
        d.spawn()?;
        Ok(d)
    }

    /// [`Daemon::start`] with `env` added to the daemon's environment.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> anyhow::Result<Daemon> {
        let mut d = Self::prepare(config)?;
        d.env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        d.spawn()?;
        Ok(d)
    }

    /// [`Daemon::start`] as a systemd service: the repository's unit file with only its
    /// ExecStart (this test's binary and paths) and output (the test's log) overridden;
    /// `systemctl start` returns when the daemon says READY. Needs systemd as PID 1.
    pub fn start_unit(config: &str) -> anyhow::Result<Daemon> {
        let mut d = Self::prepare(config)?;
        let name = d
            .dir
            .path()
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        d.unit = Some(format!("{name}.service"));
        d.install_unit()?;
        d.spawn()?;
        Ok(d)
    }

    fn prepare(config: &str) -> anyhow::Result<Daemon> {
        let dir = scratch()?;
        // Each daemon gets its own pod network; keys of a [network] section the test brings win.
        let net = super::network::TestNet::new(dir.path())?;
        // `@DIR@`: the daemon's scratch dir; `@CGROUP@`: its cgroup parent (see cgroup_parent).
        let name = dir.path().file_name().unwrap_or_default().to_string_lossy();
        let mut config = config
            .replace("@DIR@", &dir.path().to_string_lossy())
            .replace("@CGROUP@", &cgroup::daemon_parent(&name));
        if !config.contains("cgroup_driver") {
            config = format!("cgroup_driver = {:?}\n{config}", cgroup::driver().name());
        }
        let config = net.merge_into(&config);
        let d = Daemon {
            dir,
            child: None,
            unit: None,
            env: Vec::new(),
            config,
            net,
            failpoints: None,
        };
        std::fs::write(d.dir.path().join("config.toml"), &d.config)?;
        Ok(d)
    }

    /// The daemon's command line.
    fn argv(&self) -> Vec<std::ffi::OsString> {
        let mut v: Vec<std::ffi::OsString> = vec!["--socket".into(), self.socket().into()];
        v.push("daemon".into());
        v.push("--config".into());
        v.push(self.dir.path().join("config.toml").into());
        v.push("--root".into());
        v.push(self.root().into());
        v.push("--state".into());
        v.push(self.state().into());
        v.extend(["--log-level".into(), "debug".into()]);
        v
    }

    /// Writes `/run/systemd/system/<unit>` (the repository's unit file) and a drop-in with
    /// this daemon's command line and log file.
    fn install_unit(&self) -> anyhow::Result<()> {
        let unit = self.unit.as_deref().context("not a unit")?;
        let text = std::fs::read_to_string(super::repo_root().join(UNIT_FILE))
            .with_context(|| format!("read {UNIT_FILE}"))?;
        let dir = Path::new(UNIT_DIR);
        std::fs::write(dir.join(unit), text)?;
        let dropin = dir.join(format!("{unit}.d"));
        std::fs::create_dir_all(&dropin)?;
        let exec: Vec<String> = std::iter::once(BOSUN.into())
            .chain(self.argv().iter().map(|a| a.to_string_lossy().into_owned()))
            .collect();
        let log = self.log_path();
        std::fs::write(
            dropin.join("test.conf"),
            format!(
                "[Service]\nExecStart=\nExecStart={}\nStandardOutput=append:{}\n\
                 StandardError=append:{}\n",
                exec.join(" "),
                log.display(),
                log.display()
            ),
        )?;
        cgroup::systemctl(&["daemon-reload"])?;
        Ok(())
    }

    /// Removes the unit (stopped first) and its drop-in.
    fn uninstall_unit(&self) {
        let Some(unit) = self.unit.as_deref() else {
            return;
        };
        let _ = cgroup::systemctl(&["stop", unit]);
        let _ = cgroup::systemctl(&["reset-failed", unit]);
        let dir = Path::new(UNIT_DIR);
        let _ = std::fs::remove_dir_all(dir.join(format!("{unit}.d")));
        let _ = std::fs::remove_file(dir.join(unit));
        let _ = cgroup::systemctl(&["daemon-reload"]);
    }

    /// The systemd unit running this daemon, for [`Daemon::start_unit`] daemons.
    pub fn unit(&self) -> Option<&str> {
        self.unit.as_deref()
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        if let Some(unit) = self.unit.clone() {
            // Returns once the daemon sent READY=1 (Type=notify), or fails.
            return cgroup::systemctl(&["restart", &unit])
                .map(drop)
                .with_context(|| format!("start {unit}; log:\n{}", self.log()));
        }
        self.launch()?;
        self.wait_serving(20)
    }

    /// Starts the daemon process without waiting for its socket.
    pub fn launch(&mut self) -> anyhow::Result<()> {
        let log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let fail_dir = self.failpoint_dir();
        std::fs::create_dir_all(&fail_dir)?;
        let mut cmd = Command::new(BOSUN);
        match &self.failpoints {
            Some(spec) => cmd.env("BOSUN_FAILPOINTS", spec),
            None => cmd.env_remove("BOSUN_FAILPOINTS"),
        };
        let child = cmd
            .env("BOSUN_FAILPOINT_DIR", &fail_dir)
            .args(self.argv())
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawn bosun daemon")?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits up to `secs` for the daemon's socket to accept connections: a launched daemon's
    /// own listener, not the previous daemon's. That one can outlive its SIGKILL for a moment
    /// in a child forked just before and not yet exec'd, and accepts connections nobody serves.
    pub fn wait_serving(&self, secs: u64) -> anyhow::Result<()> {
        let socket = self.socket();
        let launched = self.child.as_ref().map(Child::id);
        if !wait_until(secs, || {
            std::os::unix::net::UnixStream::connect(&socket)
                .is_ok_and(|s| launched.is_none_or(|pid| listener_pid(&s) == Some(pid)))
        }) {
            bail!("daemon did not come up; log:\n{}", self.log());
        }
        Ok(())
    }

    /// Arms failpoints (`BOSUN_FAILPOINTS` syntax) for the next start; `None` disarms.
    pub fn set_failpoints(&mut self, spec: Option<&str>) {
        self.failpoints = spec.map(str::to_string);
    }

    /// Where the daemon logs the failpoints it acted on (`hits`) and creates pause files.
    pub fn failpoint_dir(&self) -> PathBuf {
        self.dir.path().join("failpoints")
    }

    /// The failpoints the daemon acted on so far, as `name hit action` lines.
    pub fn failpoint_hits(&self) -> Vec<String> {
        std::fs::read_to_string(self.failpoint_dir().join("hits"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }

    /// Arms `spec` (`point=[N@]kill`), restarts the daemon, runs `call` (the RPC the daemon
    /// must die in), checks that very failpoint SIGKILLed the daemon, and restarts it
    /// disarmed.
    pub fn crash_at(
        &mut self,
        spec: &str,
        call: impl FnOnce(&Daemon) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        use std::os::unix::process::ExitStatusExt;
        let point = spec.split('=').next().unwrap_or(spec);
        self.set_failpoints(Some(spec));
        self.restart()?;
        let before = self.failpoint_hits().len();
        let outcome = call(self);
        let status = self.wait_exit(30);
        self.set_failpoints(None);
        let hits = self.failpoint_hits();
        let fired = hits[before.min(hits.len())..]
            .iter()
            .any(|h| h.starts_with(&format!("{point} ")));
        anyhow::ensure!(
            fired && status.is_some_and(|s| s.signal() == Some(libc::SIGKILL)),
            "{spec}: the failpoint did not kill the daemon (exit {status:?}, hits {hits:?}); the call: {outcome:?}"
        );
        anyhow::ensure!(
            outcome.is_err(),
            "{spec}: the call succeeded, yet the daemon died in it"
        );
        self.restart()
            .with_context(|| format!("{spec}: restart after the crash"))
    }

    /// Waits up to `secs` for the daemon process to exit by itself (a failpoint's kill);
    /// its exit status, or `None` while it still runs.
    pub fn wait_exit(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        let mut status = None;
        wait_until(secs, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        });
        if status.is_some() {
            self.child = None;
        }
        status
    }

    /// The CRI socket.
    pub fn socket(&self) -> PathBuf {
        self.dir.path().join("bosun.sock")
    }
    /// The root dir.
    pub fn root(&self) -> PathBuf {
        self.dir.path().join("root")
    }
    /// The state dir.
    pub fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }
    /// The test's scratch dir.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
    fn log_path(&self) -> PathBuf {
        self.dir.path().join("daemon.log")
    }
    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// A gRPC channel to the daemon.
    pub async fn channel(&self) -> anyhow::Result<Channel> {
        bosun::cli::client::connect(&self.socket()).await
    }
    /// CRI ImageService client.
    pub async fn images(&self) -> anyhow::Result<ImageServiceClient<Channel>> {
        Ok(ImageServiceClient::new(self.channel().await?))
    }
    /// CRI RuntimeService client.
    pub async fn runtime(&self) -> anyhow::Result<RuntimeServiceClient<Channel>> {
        Ok(RuntimeServiceClient::new(self.channel().await?))
    }
    /// bosun.v1.Images client.
    pub async fn api(&self) -> anyhow::Result<ImagesClient<Channel>> {
        Ok(ImagesClient::new(self.channel().await?))
    }

    /// `bosun --socket <this daemon's> ARGS`.
    fn cli_command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(BOSUN);
        cmd.arg("--socket").arg(self.socket()).args(args);
        cmd
    }

    /// Runs the bosun CLI against this daemon.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Output> {
        Ok(self.cli_command(args).output()?)
    }

    /// Starts `bosun ARGS` against this daemon with stdout piped (a command that keeps running).
    pub fn cli_spawn(&self, args: &[&str]) -> anyhow::Result<std::process::Child> {
        Ok(self
            .cli_command(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()?)
    }

    /// The daemon's pod network (bridge, subnet, plugin call log).
    pub fn net(&self) -> &super::network::TestNet {
        &self.net
    }

    /// The daemon's pid (a unit's MainPID).
    pub fn pid(&self) -> Option<u32> {
        if let Some(unit) = &self.unit {
            return cgroup::unit_property(unit, "MainPID")
                .parse()
                .ok()
                .filter(|p| *p != 0);
        }
        self.child.as_ref().map(|c| c.id())
    }

    /// kill -9, as a crash would (a unit's main process only; systemd restarts it).
    pub fn kill9(&mut self) {
        if let Some(unit) = &self.unit {
            let _ = cgroup::systemctl(&["kill", "--kill-who=main", "--signal=SIGKILL", unit]);
            return;
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL without waiting for the process to go: its handle, to wait for it later.
    pub fn kill_nowait(&mut self) -> Option<Child> {
        let mut c = self.child.take()?;
        let _ = c.kill();
        Some(c)
    }

    /// Whether the daemon process runs (not exited).
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// SIGTERM and wait; returns the exit status (a unit: `systemctl stop`, its main status).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        if let Some(unit) = &self.unit {
            use std::os::unix::process::ExitStatusExt;
            cgroup::systemctl(&["stop", unit]).ok()?;
            let code: i32 = cgroup::unit_property(unit, "ExecMainStatus").parse().ok()?;
            return Some(std::process::ExitStatus::from_raw(code << 8));
        }
        let mut c = self.child.take()?;
        if let Some(pid) = rustix::process::Pid::from_raw(c.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        // Longer than the daemon's drain deadline (5 s), so a clean exit is seen as one.
        for _ in 0..1000 {
            if let Ok(Some(st)) = c.try_wait() {
                return Some(st);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let _ = c.kill();
        c.wait().ok()
    }

    /// The cgroup parent CRI tests give their pods, unique per daemon: `/<scratch dir name>`,
    /// or a slice of that name with the systemd driver; removed (with anything left below it)
    /// on drop.
    pub fn cgroup_parent(&self) -> String {
        let name = self.dir.path().file_name().unwrap_or_default();
        cgroup::daemon_parent(&name.to_string_lossy())
    }

    /// Starts the daemon again on the same root and state (after kill9 or terminate; a unit
    /// is restarted).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        if self.unit.is_none() {
            self.kill9();
        }
        self.spawn()
    }
}

impl Drop for Daemon {
    /// Leaves nothing behind, even after a failed test: a live daemon first stops and removes
    /// every pod (each call bounded), then gets SIGTERM; then every runc container, monitor,
    /// pod init and mount of this test's scratch dir and every cgroup under its cgroup parent
    /// go. Never panics.
    fn drop(&mut self) {
        let alive = self
            .child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
            || self.pid().is_some();
        if alive {
            super::cri::remove_all_pods(&self.socket(), std::time::Duration::from_secs(5));
        }
        let cleanup = std::panic::AssertUnwindSafe(|| {
            self.terminate();
            self.uninstall_unit();
            super::cri::scrub(self.dir.path(), &self.state(), &self.cgroup_parent());
            self.net.cleanup();
        });
        if std::panic::catch_unwind(cleanup).is_err() {
            eprintln!(
                "daemon cleanup panicked; {} may need manual cleanup",
                self.dir.path().display()
            );
        }
    }
}

/// The pid of the process that listens at the other end of `conn` (`SO_PEERCRED`).
pub fn listener_pid(conn: &std::os::unix::net::UnixStream) -> Option<u32> {
    let cred = rustix::net::sockopt::socket_peercred(conn).ok()?;
    u32::try_from(cred.pid.as_raw_nonzero().get()).ok()
}
