//! Starting and stopping the registry and bosun/containerd daemons, with their drop guards.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bosun::proto::bosun::v1 as api;
use bosun::proto::runtime::v1 as pb;
use tonic::transport::Channel;

use crate::measure::{mem_of, Mem};
use crate::{images_dir, repo_root};

/// The daemon under test, built by cargo for this bench.
pub const BOSUN: &str = env!("CARGO_BIN_EXE_bosun");
/// Debian's registry binary.
pub const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// containerd's config; `@DIR@` and `@REGISTRY@` are filled in per daemon.
const CONTAINERD_TOML: &str = include_str!("../../hack/bench/containerd.toml");
/// When idle memory is read, counted from the daemon's spawn.
const IDLE_AFTER: Duration = Duration::from_secs(2);

/// Polls `f` every 20 ms until it is true or `limit` passes.
fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A temp dir under /var/tmp (ext4, so overlay works); on drop, whatever is mounted below it is
/// unmounted, then it is removed.
pub struct Scratch(tempfile::TempDir);

impl Scratch {
    pub fn new(what: &str) -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bosun-bench-{what}-"))
            .tempdir_in("/var/tmp")
            .context("create scratch dir in /var/tmp")?;
        Ok(Scratch(dir))
    }

    pub fn path(&self) -> &Path {
        self.0.path()
    }
}

/// The cgroup a bosun daemon of this scratch dir uses as its node root: the dir's name.
fn cgroup_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "bosun-bench-images".to_string())
}

/// Removes the empty cgroups named `name` at the top of every hierarchy (v1 and v2), deepest
/// first; one that still holds a process is reported and kept.
fn remove_cgroups(name: &str) {
    let mut tops = vec![PathBuf::from("/sys/fs/cgroup").join(name)];
    if let Ok(hs) = std::fs::read_dir("/sys/fs/cgroup") {
        tops.extend(hs.flatten().map(|h| h.path().join(name)));
    }
    for top in tops.into_iter().filter(|t| t.is_dir()) {
        let mut dirs = vec![top.clone()];
        let mut i = 0;
        while i < dirs.len() {
            if let Ok(rd) = std::fs::read_dir(&dirs[i]) {
                dirs.extend(
                    rd.flatten()
                        .filter(|c| c.file_type().is_ok_and(|t| t.is_dir()))
                        .map(|c| c.path()),
                );
            }
            i += 1;
        }
        for d in dirs.iter().rev() {
            if std::fs::remove_dir(d).is_err() {
                eprintln!("images bench: cgroup {} left (not empty)", d.display());
            }
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        remove_cgroups(&cgroup_name(self.path()));
        for mnt in mounts_below(self.path()) {
            eprintln!("images bench: unmounting leftover {}", mnt.display());
            let ok = Command::new("umount")
                .arg("-R")
                .arg(&mnt)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            }
        }
    }
}

/// Mount points at or below `dir`, deepest first (from /proc/self/mountinfo).
fn mounts_below(dir: &Path) -> Vec<PathBuf> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut found: Vec<PathBuf> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|m| PathBuf::from(m.replace("\\040", " ")))
        .filter(|m| m.starts_with(dir))
        .collect();
    found.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    found.dedup();
    found
}

/// A child process: SIGTERM, then SIGKILL after 10 s, on drop.
struct Proc(Child);

impl Proc {
    fn pid(&self) -> u32 {
        self.0.id()
    }

    fn exited(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(Some(_)))
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.exited() {
            return;
        }
        if let Some(pid) = rustix::process::Pid::from_raw(self.0.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        if !wait_until(Duration::from_secs(10), || self.exited()) {
            eprintln!(
                "images bench: pid {} ignored SIGTERM for 10 s; killing it",
                self.pid()
            );
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// Debian's registry on 127.0.0.1 with the test images pushed.
pub struct Registry {
    // Fields drop in order: the process stops before its storage goes.
    _proc: Proc,
    port: u16,
    _dir: Scratch,
}

impl Registry {
    pub fn start() -> anyhow::Result<Registry> {
        let dir = Scratch::new("registry")?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let cfg = format!(
            "version: 0.1\nlog:\n  level: error\n  accesslog:\n    disabled: true\nstorage:\n  \
             filesystem:\n    rootdirectory: {}\nhttp:\n  addr: 127.0.0.1:{port}\n",
            dir.path().join("data").display()
        );
        let cfg_path = dir.path().join("config.yml");
        std::fs::write(&cfg_path, cfg)?;
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&cfg_path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log"))?)
            .spawn()
            .context("spawn docker-registry")?;
        let reg = Registry {
            _proc: Proc(child),
            port,
            _dir: dir,
        };
        let up = || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        ensure!(
            wait_until(Duration::from_secs(15), up),
            "registry did not come up on {port}"
        );
        Ok(reg)
    }

    /// `127.0.0.1:PORT`.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where hack/testimages.py pushes `name`.
    pub fn image(&self, name: &str) -> String {
        format!("{}/bosun/{name}:latest", self.host())
    }

    pub fn push(&self, names: &[&str]) -> anyhow::Result<()> {
        let out = Command::new("python3")
            .arg(repo_root().join("hack/testimages.py"))
            .args(["push", "--dir"])
            .arg(images_dir())
            .args(["--registry", &self.host(), "--only", &names.join(",")])
            .output()
            .context("run hack/testimages.py push")?;
        if !out.status.success() {
            bail!("push failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        Ok(())
    }
}

/// Which runtime a daemon is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Bosun,
    Containerd,
}

pub const KINDS: [Kind; 2] = [Kind::Bosun, Kind::Containerd];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Bosun => "bosun",
            Kind::Containerd => "containerd",
        }
    }

    /// The import rows one import fills: containerd's one `ctr` figure stands in both.
    pub fn import_rows(self, via: Via) -> &'static [Via] {
        match (self, via) {
            (Kind::Containerd, _) => &[Via::Rpc, Via::Cli],
            (Kind::Bosun, Via::Rpc) => &[Via::Rpc],
            (Kind::Bosun, Via::Cli) => &[Via::Cli],
        }
    }
}

/// How an archive reaches a daemon: bosun's Import RPC, or a CLI process (`bosun` or `ctr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    Rpc,
    Cli,
}

impl Via {
    /// The methods `kind` offers.
    pub fn of(kind: Kind) -> &'static [Via] {
        match kind {
            Kind::Bosun => &[Via::Rpc, Via::Cli],
            Kind::Containerd => &[Via::Cli],
        }
    }

    /// The row for importing `what` this way.
    pub fn row(self, what: &str) -> String {
        match self {
            Via::Rpc => format!("import {what} (bosun: Import RPC)"),
            Via::Cli => format!("import {what} (bosun: CLI)"),
        }
    }
}

/// A fresh daemon of either kind on its own temp root, state and socket.
pub struct Daemon {
    pub kind: Kind,
    // Fields drop in order: the client hangs up, the process stops, then its dirs are unmounted
    // and removed.
    channel: Channel,
    proc: Proc,
    dir: Scratch,
    spawned: Instant,
}

impl Daemon {
    pub async fn start(kind: Kind, registry: &str) -> anyhow::Result<Daemon> {
        let dir = Scratch::new(kind.name())?;
        let log = std::fs::File::create(dir.path().join("daemon.log"))?;
        let mut cmd = match kind {
            Kind::Bosun => bosun_command(dir.path())?,
            Kind::Containerd => containerd_command(dir.path(), registry)?,
        };
        let spawned = Instant::now();
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {kind:?}"))?;
        let mut proc = Proc(child);
        let socket = socket_of(kind, dir.path());
        let up = wait_until(Duration::from_secs(30), || {
            proc.exited() || std::os::unix::net::UnixStream::connect(&socket).is_ok()
        });
        if !up || proc.exited() {
            bail!(
                "{kind:?} did not come up; log:\n{}",
                tail(&dir.path().join("daemon.log"))
            );
        }
        let channel = bosun::cli::client::connect(&socket).await?;
        let d = Daemon {
            kind,
            proc,
            dir,
            spawned,
            channel,
        };
        d.wait_ready().await?;
        Ok(d)
    }

    /// Waits until the CRI ImageService answers (containerd's CRI plugin starts after its socket).
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self
                .cri()
                .list_images(pb::ListImagesRequest::default())
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if Instant::now() > deadline => {
                    bail!("{:?} ImageService not ready: {}", self.kind, e.message())
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    fn socket(&self) -> PathBuf {
        socket_of(self.kind, self.dir.path())
    }

    pub fn cri(&self) -> pb::image_service_client::ImageServiceClient<Channel> {
        pb::image_service_client::ImageServiceClient::new(self.channel.clone())
    }

    pub fn mem(&self) -> anyhow::Result<Mem> {
        mem_of(self.proc.pid()).with_context(|| format!("read memory of {:?}", self.kind))
    }

    /// Memory once `IDLE_AFTER` has passed since spawn.
    pub async fn idle_mem(&self) -> anyhow::Result<Mem> {
        tokio::time::sleep(IDLE_AFTER.saturating_sub(self.spawned.elapsed())).await;
        self.mem()
    }

    /// CRI PullImage; returns its duration.
    pub async fn pull(&self, image: &str) -> anyhow::Result<Duration> {
        let req = pb::PullImageRequest {
            image: Some(spec(image)),
            ..Default::default()
        };
        let t = Instant::now();
        self.cri()
            .pull_image(req)
            .await
            .with_context(|| format!("{:?} pull {image}", self.kind))?;
        Ok(t.elapsed())
    }

    /// The id CRI ImageStatus gives `image`; containerd's CRI learns of `ctr` imports from events,
    /// so this waits a little for the image to appear.
    pub async fn image_id(&self, image: &str) -> anyhow::Result<String> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let req = pb::ImageStatusRequest {
                image: Some(spec(image)),
                verbose: false,
            };
            let r = self.cri().image_status(req).await?.into_inner();
            match r.image {
                Some(img) => return Ok(img.id),
                None if Instant::now() > deadline => bail!("{:?} has no image {image}", self.kind),
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }

    /// Imports `archive` `via` the RPC or the CLI; returns the time taken.
    pub async fn import(
        &self,
        archive: &Path,
        base_name: &str,
        via: Via,
    ) -> anyhow::Result<Duration> {
        match via {
            Via::Rpc => self.import_rpc(archive, base_name).await,
            Via::Cli => self.import_cli(archive, base_name),
        }
    }

    /// bosun's Import RPC (the daemon reads the archive itself).
    async fn import_rpc(&self, archive: &Path, base_name: &str) -> anyhow::Result<Duration> {
        ensure!(self.kind == Kind::Bosun, "the Import RPC is bosun's");
        let req = api::ImportRequest {
            path: archive.display().to_string(),
            base_name: base_name.to_string(),
            tags: Vec::new(),
            ctr: None,
        };
        let mut client = api::images_client::ImagesClient::new(self.channel.clone());
        let t = Instant::now();
        client
            .import(req)
            .await
            .with_context(|| format!("import {}", archive.display()))?;
        Ok(t.elapsed())
    }

    /// `bosun image import` or `ctr images import`, process start included.
    fn import_cli(&self, archive: &Path, base_name: &str) -> anyhow::Result<Duration> {
        let mut cmd = match self.kind {
            Kind::Bosun => {
                let mut c = Command::new(BOSUN);
                c.arg("--socket")
                    .arg(self.socket())
                    .args(["image", "import"]);
                c
            }
            Kind::Containerd => {
                let mut c = Command::new("ctr");
                c.arg("-a")
                    .arg(self.socket())
                    .args(["-n", "k8s.io", "images", "import"]);
                c
            }
        };
        if !base_name.is_empty() {
            cmd.args(["--base-name", base_name]);
        }
        cmd.arg(archive).stdin(Stdio::null());
        let t = Instant::now();
        let out = cmd
            .output()
            .with_context(|| format!("run {:?} import", self.kind))?;
        let took = t.elapsed();
        if !out.status.success() {
            bail!(
                "{:?} import {}: {}",
                self.kind,
                archive.display(),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(took)
    }
}

fn socket_of(kind: Kind, dir: &Path) -> PathBuf {
    match kind {
        Kind::Bosun => dir.join("bosun.sock"),
        Kind::Containerd => dir.join("containerd.sock"),
    }
}

fn bosun_command(dir: &Path) -> anyhow::Result<Command> {
    // A config of our own keeps a host /etc/bosun/config.toml out of the measurement; the node
    // cgroup root (where the daemon makes its QoS levels at start) is named after the scratch
    // dir, whose drop removes it. No pod runs here: a loopback-only CNI config keeps the
    // daemon off the embedded network, which is one daemon's (a second bosun daemon started
    // beside the first, as many_images does, would be refused) and would leave its bridge and
    // lease directory on the host.
    let conf_dir = dir.join("cni-conf");
    std::fs::create_dir_all(&conf_dir)?;
    std::fs::write(
        conf_dir.join("10-loopback.conflist"),
        r#"{"cniVersion": "1.0.0", "name": "bench-lo", "plugins": [{"type": "loopback"}]}"#,
    )?;
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\nconf_dir = {:?}\n\n[node]\ncgroup_root = \"/{}\"\n",
            conf_dir.display().to_string(),
            cgroup_name(dir)
        ),
    )?;
    let mut cmd = Command::new(BOSUN);
    cmd.arg("--socket")
        .arg(dir.join("bosun.sock"))
        .arg("daemon");
    cmd.arg("--config")
        .arg(config)
        .arg("--root")
        .arg(dir.join("root"));
    cmd.arg("--state").arg(dir.join("state"));
    Ok(cmd)
}

fn containerd_command(dir: &Path, registry: &str) -> anyhow::Result<Command> {
    std::fs::create_dir_all(dir.join("cni/conf"))?;
    let text = CONTAINERD_TOML
        .replace("@DIR@", &dir.display().to_string())
        .replace("@REGISTRY@", registry);
    let config = dir.join("config.toml");
    std::fs::write(&config, text)?;
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(config);
    Ok(cmd)
}

pub fn spec(image: &str) -> pb::ImageSpec {
    pb::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}
