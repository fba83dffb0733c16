//! Starting and stopping bosun and containerd for the pods bench, with drop guards that sweep up.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bosun::proto::bosun::v1 as api;
use bosun::proto::runtime::v1 as pb;
use tonic::transport::Channel;

use crate::measure::{mem_of, Mem};
use crate::procs;

/// The daemon under test, built by cargo for this bench.
pub const BOSUN: &str = env!("CARGO_BIN_EXE_bosun");
/// containerd's config; `@DIR@` and `@REGISTRY@` are filled in per daemon.
const CONTAINERD_TOML: &str = include_str!("../../hack/bench/containerd.toml");
/// Where Debian's containernetworking-plugins package puts the CNI plugins.
pub const CNI_PLUGINS: &str = "/usr/lib/cni";
/// The CNI plugins containerd's pods use: its own loopback setup, plus a bridge network.
const CNI_BINS: [&str; 4] = ["loopback", "bridge", "host-local", "portmap"];
/// Environment variable: bosun's log level in the bench (its log is then kept).
pub const LOG_LEVEL_ENV: &str = "BOSUN_BENCH_LOG_LEVEL";
/// bosun's embedded network in the bench: its name (and nftables table) and bridge.
pub const BOSUN_NETWORK: &str = "bosun-bench-pods";
/// The bridge of bosun's embedded network in the bench.
pub const BOSUN_BRIDGE: &str = "bosunbench1";
/// The host bridge the containerd pods' veths join (no address, no NAT, no forwarding).
pub const CNI_BRIDGE: &str = "bosunbench0";
/// The CNI network name, also the prefix of libcni's cache entries in /var/lib/cni/results.
pub const CNI_NETWORK: &str = "bosun-bench-pods";
/// The runc root the containerd shims use (containerd's default for namespace k8s.io).
pub const CONTAINERD_RUNC_ROOT: &str = "/run/containerd/runc/k8s.io";
/// When idle memory is read, counted from the daemon's spawn.
const IDLE_AFTER: Duration = Duration::from_secs(2);
/// Every temp dir of this bench starts with this, so leftovers can be found by name.
pub const MARK: &str = "bosun-bench-pods";

/// The bosun daemon's node cgroup root (`[node] cgroup_root`): the daemon makes its QoS
/// hierarchy (`kubepods`, `burstable`, `besteffort`) there at start, as a kubelet does, and
/// leaves it for the next start; below `/MARK-*`, the leftover pass removes it.
pub const NODE_CGROUP: &str = "bosun-bench-pods-node";

/// Polls `f` every 20 ms until it is true or `limit` passes.
pub fn wait_until(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
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
pub struct Scratch {
    dir: tempfile::TempDir,
    /// `<dir>/state` when it is a tmpfs of the scratch's own (unmounted last, not a leftover).
    tmpfs: Option<PathBuf>,
}

impl Scratch {
    pub fn new(what: &str) -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("{MARK}-{what}-"))
            .tempdir_in("/var/tmp")
            .context("create scratch dir in /var/tmp")?;
        Ok(Scratch { dir, tmpfs: None })
    }

    /// A runtime's scratch dir whose `state` dir is a tmpfs: both runtimes keep their volatile
    /// state under /run by default (/run/bosun, /run/containerd, and containerd's runc root is
    /// /run/containerd/runc whatever its config says), a tmpfs on every node they run on.
    pub fn with_volatile_state(what: &str) -> anyhow::Result<Scratch> {
        let mut scratch = Scratch::new(what)?;
        let state = scratch.path().join("state");
        std::fs::create_dir(&state)?;
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1g,mode=0711", "tmpfs"])
            .arg(&state)
            .status()
            .is_ok_and(|s| s.success());
        anyhow::ensure!(ok, "mount a tmpfs on {}", state.display());
        scratch.tmpfs = Some(state);
        Ok(scratch)
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        for mnt in procs::mounts_below(self.path()) {
            if Some(&mnt) != self.tmpfs.as_ref() {
                eprintln!("pods bench: unmounting leftover {}", mnt.display());
            }
            let ok = Command::new("umount")
                .arg(&mnt)
                .status()
                .is_ok_and(|s| s.success());
            if !ok {
                let _ = Command::new("umount").arg("-l").arg(&mnt).status();
            }
        }
    }
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
        procs::signal(self.0.id(), rustix::process::Signal::TERM);
        if !wait_until(Duration::from_secs(10), || self.exited()) {
            eprintln!(
                "pods bench: pid {} ignored SIGTERM for 10 s; killing it",
                self.pid()
            );
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// After the daemon is gone: deletes runc containers and kills helper processes that belong to
/// its directory (only ever finds something when the CRI clean-up failed).
struct Sweep {
    kind: Kind,
    dir: PathBuf,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        let mut roots = procs::runc_roots_below(&self.dir);
        if self.kind == Kind::Containerd {
            roots.push(PathBuf::from(CONTAINERD_RUNC_ROOT));
        }
        for root in roots {
            for id in procs::runc_containers(&root, &self.dir) {
                eprintln!(
                    "pods bench: {:?} left runc container {id} in {}; deleting it",
                    self.kind,
                    root.display()
                );
                let _ = Command::new("runc")
                    .arg("--root")
                    .arg(&root)
                    .args(["delete", "--force", &id])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .status();
            }
        }
        let marker = self.dir.display().to_string();
        let left = || procs::pids_with_cmdline(&marker);
        if !wait_until(Duration::from_secs(2), || left().is_empty()) {
            for pid in left() {
                eprintln!(
                    "pods bench: {:?} left process {pid} ({}); killing it",
                    self.kind,
                    procs::cmdline(pid).join(" ")
                );
                procs::signal(pid, rustix::process::Signal::KILL);
            }
            wait_until(Duration::from_secs(5), || left().is_empty());
        }
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
    pub fn name(self) -> &'static str {
        match self {
            Kind::Bosun => "bosun",
            Kind::Containerd => "containerd",
        }
    }
}

/// A fresh daemon of either kind on its own temp root and socket, its state on a tmpfs.
pub struct Daemon {
    pub kind: Kind,
    // Fields drop in order: the client hangs up, the process stops, leftovers are swept, then
    // its dirs are unmounted and removed.
    channel: Channel,
    proc: Proc,
    _sweep: Sweep,
    dir: Scratch,
    spawned: Instant,
}

impl Daemon {
    /// Starts `kind`; `cni` gives containerd a bridge network for pods with their own netns.
    pub async fn start(kind: Kind, cni: bool) -> anyhow::Result<Daemon> {
        let dir = Scratch::with_volatile_state(kind.name())?;
        let log = std::fs::File::create(dir.path().join("daemon.log"))?;
        let mut cmd = match kind {
            Kind::Bosun => bosun_command(dir.path())?,
            Kind::Containerd => containerd_command(dir.path(), cni)?,
        };
        let sweep = Sweep {
            kind,
            dir: dir.path().to_path_buf(),
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
            channel,
            proc,
            _sweep: sweep,
            dir,
            spawned,
        };
        d.wait_ready().await?;
        Ok(d)
    }

    /// Waits until the CRI answers (containerd's CRI plugin starts after its socket).
    async fn wait_ready(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match self
                .images()
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

    /// The daemon's CRI socket.
    pub fn socket(&self) -> PathBuf {
        socket_of(self.kind, self.dir.path())
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn pid(&self) -> u32 {
        self.proc.pid()
    }

    /// With [`LOG_LEVEL_ENV`] set: copies the daemon's log to `to` (for its per-step timings).
    pub fn keep_log(&self, to: &Path) -> anyhow::Result<bool> {
        if std::env::var_os(LOG_LEVEL_ENV).is_none() {
            return Ok(false);
        }
        std::fs::copy(self.dir.path().join("daemon.log"), to)
            .with_context(|| format!("copy the daemon log to {}", to.display()))?;
        Ok(true)
    }

    pub fn log_tail(&self) -> String {
        tail(&self.dir.path().join("daemon.log"))
    }

    pub fn images(&self) -> pb::image_service_client::ImageServiceClient<Channel> {
        pb::image_service_client::ImageServiceClient::new(self.channel.clone())
    }

    pub fn runtime(&self) -> pb::runtime_service_client::RuntimeServiceClient<Channel> {
        pb::runtime_service_client::RuntimeServiceClient::new(self.channel.clone())
    }

    pub fn mem(&self) -> anyhow::Result<Mem> {
        mem_of(self.proc.pid()).with_context(|| format!("read memory of {:?}", self.kind))
    }

    /// Memory once `IDLE_AFTER` has passed since spawn.
    pub async fn idle_mem(&self) -> anyhow::Result<Mem> {
        tokio::time::sleep(IDLE_AFTER.saturating_sub(self.spawned.elapsed())).await;
        self.mem()
    }

    /// Imports an OCI archive (bosun: Import RPC; containerd: `ctr images import`, which
    /// unpacks for overlayfs) and waits until CRI ImageStatus knows `reference`.
    pub async fn import(
        &self,
        archive: &Path,
        base_name: &str,
        reference: &str,
    ) -> anyhow::Result<()> {
        match self.kind {
            Kind::Bosun => {
                let req = api::ImportRequest {
                    path: archive.display().to_string(),
                    base_name: base_name.to_string(),
                    tags: Vec::new(),
                    ctr: None,
                };
                api::images_client::ImagesClient::new(self.channel.clone())
                    .import(req)
                    .await
                    .with_context(|| format!("bosun import {}", archive.display()))?;
            }
            Kind::Containerd => {
                let mut cmd = Command::new("ctr");
                cmd.arg("-a")
                    .arg(socket_of(self.kind, self.dir.path()))
                    .args(["-n", "k8s.io", "images", "import"]);
                if !base_name.is_empty() {
                    cmd.args(["--base-name", base_name]);
                }
                let out = cmd
                    .arg(archive)
                    .stdin(Stdio::null())
                    .output()
                    .context("run ctr images import")?;
                ensure!(
                    out.status.success(),
                    "ctr import {}: {}",
                    archive.display(),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
        // containerd's CRI learns of `ctr` imports from events: wait a little.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let req = pb::ImageStatusRequest {
                image: Some(pb::ImageSpec {
                    image: reference.to_string(),
                    ..Default::default()
                }),
                verbose: false,
            };
            let r = self.images().image_status(req).await?.into_inner();
            match r.image {
                Some(_) => return Ok(()),
                None if Instant::now() > deadline => {
                    bail!("{:?} has no image {reference} after import", self.kind)
                }
                None => tokio::time::sleep(Duration::from_millis(20)).await,
            }
        }
    }
}

fn socket_of(kind: Kind, dir: &Path) -> PathBuf {
    match kind {
        Kind::Bosun => dir.join("bosun.sock"),
        Kind::Containerd => dir.join("containerd.sock"),
    }
}

fn bosun_command(dir: &Path) -> anyhow::Result<Command> {
    // A config of our own keeps a host /etc/bosun/config.toml out of the measurement. The conf
    // dir stays empty: with `cni` pods get bosun's embedded network (its own bridge, subnet,
    // lease journal in this dir and table, no masquerade, no default route: what the issue
    // measures); without it every pod is on the host network. Hard eviction is off: the
    // kubelet's default `imagefs.available<15%` counts only the space unprivileged users may
    // take, so a build machine whose disk is merely well used is under DiskPressure and the
    // supervised phase's pods would be refused (its monitoring loop still runs).
    let (conf_dir, bin_dir) = write_cni(dir, false)?;
    let config = dir.join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[network]\nconf_dir = {:?}\nbin_dirs = [{:?}]\nname = {BOSUN_NETWORK:?}\nbridge = {BOSUN_BRIDGE:?}\nsubnet = \"10.252.0.0/16\"\ndata_dir = {:?}\nmasquerade = false\ndefault_route = false\n\n[pod]\nlog_dir = {:?}\nconfigmap_dir = {:?}\nsecret_dir = {:?}\n\n[node]\neviction_hard = {{}}\ncgroup_root = \"/{NODE_CGROUP}\"\n",
            conf_dir.display().to_string(),
            bin_dir.display().to_string(),
            dir.join("ipam").display().to_string(),
            dir.join("pod-logs").display().to_string(),
            dir.join("configmaps").display().to_string(),
            dir.join("secrets").display().to_string(),
        ),
    )?;
    let mut cmd = Command::new(BOSUN);
    cmd.arg("--socket")
        .arg(dir.join("bosun.sock"))
        .arg("daemon")
        .arg("--config")
        .arg(config)
        .arg("--root")
        .arg(dir.join("root"))
        .arg("--state")
        .arg(dir.join("state"));
    // BOSUN_BENCH_LOG_LEVEL=debug: the daemon's per-step timings end up in its log, which the
    // bench keeps (see `Daemon::keep_log`).
    if let Some(level) = std::env::var_os(LOG_LEVEL_ENV) {
        cmd.arg("--log-level").arg(level);
    }
    Ok(cmd)
}

/// containerd with hack/bench/containerd.toml (its own root, state and socket; the sandbox image
/// is containerd's default, which the bench imports under that name) and, with `cni`, a bridge
/// network whose IPAM state stays in `dir`.
fn containerd_command(dir: &Path, cni: bool) -> anyhow::Result<Command> {
    write_cni(dir, cni)?;
    // The registry mirror entry is unused here: nothing is pulled.
    let text = CONTAINERD_TOML
        .replace("@DIR@", &dir.display().to_string())
        .replace("@REGISTRY@", "127.0.0.1:9");
    let config = dir.join("config.toml");
    std::fs::write(&config, text)?;
    let mut cmd = Command::new("containerd");
    cmd.arg("--config").arg(config);
    Ok(cmd)
}

/// The bench's CNI conf and bin dirs under `dir`; with `cni`, a bridge network (no gateway, no
/// NAT) whose IPAM state stays in `dir`, the same for both runtimes.
fn write_cni(dir: &Path, cni: bool) -> anyhow::Result<(PathBuf, PathBuf)> {
    let conf_dir = dir.join("cni/conf");
    let bin_dir = dir.join("cni/bin");
    std::fs::create_dir_all(&conf_dir)?;
    std::fs::create_dir_all(&bin_dir)?;
    if cni {
        for bin in CNI_BINS {
            std::os::unix::fs::symlink(Path::new(CNI_PLUGINS).join(bin), bin_dir.join(bin))?;
        }
        let conf = serde_json::json!({
            "cniVersion": "1.0.0",
            "name": CNI_NETWORK,
            "plugins": [{
                "type": "bridge",
                "bridge": CNI_BRIDGE,
                "isGateway": false,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": "10.251.0.0/16"}]],
                    "dataDir": dir.join("cni/ipam"),
                },
            }, {
                "type": "portmap",
                "capabilities": {"portMappings": true},
            }],
        });
        std::fs::write(
            conf_dir.join("10-bench.conflist"),
            serde_json::to_vec_pretty(&conf)?,
        )?;
    }
    Ok((conf_dir, bin_dir))
}

/// The sandbox image containerd uses when its config names none (`containerd config default`).
pub fn containerd_sandbox_image() -> anyhow::Result<String> {
    let out = Command::new("containerd")
        .args(["config", "default"])
        .stdin(Stdio::null())
        .output()
        .context("run containerd config default")?;
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .find(|l| l.trim_start().starts_with("sandbox_image"))
        .context("no sandbox_image in `containerd config default`")?;
    let image = line
        .split('"')
        .nth(1)
        .context("unquoted sandbox_image in `containerd config default`")?;
    ensure!(
        !CONTAINERD_TOML.contains("sandbox_image"),
        "hack/bench/containerd.toml sets sandbox_image now: teach benches/pods to read it"
    );
    Ok(image.to_string())
}
