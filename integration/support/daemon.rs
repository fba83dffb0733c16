//! A bosun daemon on a temp socket, root and state dir; SIGTERM (then KILL) and removal on drop.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use anyhow::{bail, Context};
use bosun::proto::bosun::v1::images_client::ImagesClient;
use bosun::proto::runtime::v1::image_service_client::ImageServiceClient;
use bosun::proto::runtime::v1::runtime_service_client::RuntimeServiceClient;
use tonic::transport::Channel;

use super::{scratch, wait_until};

/// The binary under test.
pub const BOSUN: &str = env!("CARGO_BIN_EXE_bosun");

/// A running daemon owned by one test.
pub struct Daemon {
    dir: tempfile::TempDir,
    child: Option<Child>,
    config: String,
    net: super::network::TestNet,
    /// `BOSUN_FAILPOINTS` for the next start (see src/failpoint.rs).
    failpoints: Option<String>,
}

impl Daemon {
    /// Starts a daemon with `config` (TOML, `@DIR@` and `@CGROUP@` replaced) added to the test's
    /// paths.
    pub fn start(config: &str) -> anyhow::Result<Daemon> {
        let dir = scratch()?;
        // Each daemon gets its own pod network; keys of a [network] section the test brings win.
        let net = super::network::TestNet::new(dir.path())?;
        // `@DIR@`: the daemon's scratch dir; `@CGROUP@`: its cgroup parent (see cgroup_parent).
        let name = dir.path().file_name().unwrap_or_default().to_string_lossy();
        let config = config
            .replace("@DIR@", &dir.path().to_string_lossy())
            .replace("@CGROUP@", &format!("/{name}"));
        let config = net.merge_into(&config);
        let mut d = Daemon {
            dir,
            child: None,
            config,
            net,
            failpoints: None,
        };
        std::fs::write(d.dir.path().join("config.toml"), &d.config)?;
        d.spawn()?;
        Ok(d)
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
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
            .arg("--socket")
            .arg(self.socket())
            .arg("daemon")
            .arg("--config")
            .arg(self.dir.path().join("config.toml"))
            .arg("--root")
            .arg(self.root())
            .arg("--state")
            .arg(self.state())
            .arg("--log-level")
            .arg("debug")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("spawn bosun daemon")?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits up to `secs` for the daemon's socket to accept connections.
    pub fn wait_serving(&self, secs: u64) -> anyhow::Result<()> {
        let socket = self.socket();
        if !wait_until(secs, || {
            std::os::unix::net::UnixStream::connect(&socket).is_ok()
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

    /// The daemon's pid.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// kill -9, as a crash would.
    pub fn kill9(&mut self) {
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

    /// SIGTERM and wait; returns the exit status.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
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

    /// The cgroup parent CRI tests give their pods: `/<scratch dir name>`, unique per daemon;
    /// removed (with anything left below it) on drop.
    pub fn cgroup_parent(&self) -> String {
        let name = self.dir.path().file_name().unwrap_or_default();
        format!("/{}", name.to_string_lossy())
    }

    /// Starts the daemon again on the same root and state (after kill9 or terminate).
    pub fn restart(&mut self) -> anyhow::Result<()> {
        self.kill9();
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
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)));
        if alive {
            super::cri::remove_all_pods(&self.socket(), std::time::Duration::from_secs(5));
        }
        let cleanup = std::panic::AssertUnwindSafe(|| {
            self.terminate();
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
