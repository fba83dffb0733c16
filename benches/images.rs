//! bosun vs containerd on this machine: image pull/import time, daemon memory, CRI list latency.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bosun::proto::bosun::v1 as api;
use bosun::proto::runtime::v1 as pb;
use sha2::{Digest as _, Sha256};
use tonic::transport::Channel;

/// The daemon under test, built by cargo for this bench.
const BOSUN: &str = env!("CARGO_BIN_EXE_bosun");
/// Debian's registry binary.
const REGISTRY_BIN: &str = "/usr/bin/docker-registry";
/// containerd's config; `@DIR@` and `@REGISTRY@` are filled in per daemon.
const CONTAINERD_TOML: &str = include_str!("../hack/bench/containerd.toml");
/// The test images pulled and imported, in this order.
const IMAGES: [&str; 3] = ["busybox", "layered", "big"];
/// How many tiny images ListImages and ImageStatus see.
const TINY_IMAGES: usize = 100;
/// Calls per latency series.
const QUERIES: usize = 1000;
/// The tiny image ImageStatus asks for.
const STATUS_REF: &str = "bench.test/img-50:1";
/// When idle memory is read, counted from the daemon's spawn.
const IDLE_AFTER: Duration = Duration::from_secs(2);
/// Pause between "socket answers" and a timed call, so start-up work does not overlap it.
const SETTLE: Duration = Duration::from_millis(500);
const MIB: f64 = 1024.0 * 1024.0;
/// The memory rows of a daemon at rest.
const IDLE: &str = "idle, 2 s after start";

fn main() {
    // The client's connection tasks run on a worker thread, so they keep answering (e.g. a
    // server's GOAWAY at shutdown) while the main thread blocks in a guard's drop.
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("images bench: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    // Ctrl-C drops `run`'s future, so every guard in it cleans up.
    let outcome = rt.block_on(async {
        tokio::select! {
            r = run() => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    if let Err(e) = outcome {
        eprintln!("images bench failed: {e:#}");
        std::process::exit(1);
    }
}

/// The whole bench; `BENCH_ROUNDS` (default 3) sets the rounds of cold pulls and imports.
async fn run() -> anyhow::Result<()> {
    if let Some(reason) = unmet_needs() {
        println!("SKIP images bench: {reason}");
        return Ok(());
    }
    let rounds: usize = match std::env::var("BENCH_ROUNDS") {
        Ok(v) => v.parse().with_context(|| format!("BENCH_ROUNDS={v:?}"))?,
        Err(_) => 3,
    };
    ensure!(rounds > 0, "BENCH_ROUNDS must be at least 1");
    let started = Instant::now();
    let registry = Registry::start()?;
    registry.push(&IMAGES)?;
    let mut report = Report::new(rounds);
    warm_up(&registry).await?;
    for round in 0..rounds {
        eprintln!("images bench: round {}/{rounds}", round + 1);
        // Alternate who goes first so neither runtime always meets the colder page cache.
        let order = if round % 2 == 0 {
            KINDS
        } else {
            [KINDS[1], KINDS[0]]
        };
        for kind in order {
            pull_round(kind, &registry, &mut report).await?;
            import_round(kind, &registry, &mut report).await?;
        }
    }
    eprintln!("images bench: {TINY_IMAGES} images, {QUERIES} ListImages + ImageStatus each");
    many_images(&registry, &mut report).await?;
    let text = report.render(started.elapsed())?;
    println!("{text}");
    let out = target_dir().join("bench-images.md");
    std::fs::write(&out, &text).with_context(|| format!("write {}", out.display()))?;
    eprintln!("images bench: table written to {}", out.display());
    Ok(())
}

/// Why the bench cannot run here, if it cannot.
fn unmet_needs() -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (overlay mounts, chown)".into());
    }
    for bin in ["containerd", "ctr", "python3"] {
        if which(bin).is_none() {
            return Some(format!("needs {bin} in PATH (hack/setup.sh installs it)"));
        }
    }
    if !Path::new(REGISTRY_BIN).exists() {
        return Some(format!(
            "needs {REGISTRY_BIN} (apt-get install docker-registry)"
        ));
    }
    if !images_dir().join("manifest.json").exists() {
        return Some(format!(
            "needs test images in {} (run hack/setup.sh)",
            images_dir().display()
        ));
    }
    None
}

fn which(bin: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(bin))
        .find(|p| p.is_file())
}

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn images_dir() -> PathBuf {
    std::env::var_os("BOSUN_TEST_IMAGES")
        .map_or_else(|| repo_root().join("test-images"), PathBuf::from)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(|| repo_root().join("target"), PathBuf::from)
}

/// The image id (config digest) test-images/manifest.json records for `name`.
fn expected_id(name: &str) -> anyhow::Result<String> {
    let path = images_dir().join("manifest.json");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("read {}", path.display()))?;
    let v: serde_json::Value = serde_json::from_str(&text).context("parse manifest.json")?;
    v["images"][name]["image_id"]
        .as_str()
        .map(str::to_string)
        .with_context(|| format!("no image_id for {name} in manifest.json"))
}

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
struct Scratch(tempfile::TempDir);

impl Scratch {
    fn new(what: &str) -> anyhow::Result<Scratch> {
        let dir = tempfile::Builder::new()
            .prefix(&format!("bosun-bench-{what}-"))
            .tempdir_in("/var/tmp")
            .context("create scratch dir in /var/tmp")?;
        Ok(Scratch(dir))
    }

    fn path(&self) -> &Path {
        self.0.path()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
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
struct Registry {
    // Fields drop in order: the process stops before its storage goes.
    _proc: Proc,
    port: u16,
    _dir: Scratch,
}

impl Registry {
    fn start() -> anyhow::Result<Registry> {
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
    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Where hack/testimages.py pushes `name`.
    fn image(&self, name: &str) -> String {
        format!("{}/bosun/{name}:latest", self.host())
    }

    fn push(&self, names: &[&str]) -> anyhow::Result<()> {
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
enum Kind {
    Bosun,
    Containerd,
}

const KINDS: [Kind; 2] = [Kind::Bosun, Kind::Containerd];

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Bosun => "bosun",
            Kind::Containerd => "containerd",
        }
    }

    /// The import rows one import fills: containerd's one `ctr` figure stands in both.
    fn import_rows(self, via: Via) -> &'static [Via] {
        match (self, via) {
            (Kind::Containerd, _) => &[Via::Rpc, Via::Cli],
            (Kind::Bosun, Via::Rpc) => &[Via::Rpc],
            (Kind::Bosun, Via::Cli) => &[Via::Cli],
        }
    }
}

/// How an archive reaches a daemon: bosun's Import RPC, or a CLI process (`bosun` or `ctr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Rpc,
    Cli,
}

impl Via {
    /// The methods `kind` offers.
    fn of(kind: Kind) -> &'static [Via] {
        match kind {
            Kind::Bosun => &[Via::Rpc, Via::Cli],
            Kind::Containerd => &[Via::Cli],
        }
    }

    /// The row for importing `what` this way.
    fn row(self, what: &str) -> String {
        match self {
            Via::Rpc => format!("import {what} (bosun: Import RPC)"),
            Via::Cli => format!("import {what} (bosun: CLI)"),
        }
    }
}

/// Memory of a process, in bytes.
#[derive(Debug, Clone, Copy)]
struct Mem {
    rss: f64,
    pss: f64,
    hwm: f64,
}

/// A `Key:   1234 kB` field of a /proc file, in bytes.
fn proc_kb(text: &str, key: &str) -> anyhow::Result<f64> {
    let line = text
        .lines()
        .find(|l| l.starts_with(key))
        .with_context(|| format!("no {key}"))?;
    let kb: f64 = line[key.len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()?;
    Ok(kb * 1024.0)
}

fn mem_of(pid: u32) -> anyhow::Result<Mem> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let rollup = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup"))?;
    Ok(Mem {
        rss: proc_kb(&status, "VmRSS:")?,
        hwm: proc_kb(&status, "VmHWM:")?,
        pss: proc_kb(&rollup, "Pss:")?,
    })
}

/// A fresh daemon of either kind on its own temp root, state and socket.
struct Daemon {
    kind: Kind,
    // Fields drop in order: the client hangs up, the process stops, then its dirs are unmounted
    // and removed.
    channel: Channel,
    proc: Proc,
    dir: Scratch,
    spawned: Instant,
}

impl Daemon {
    async fn start(kind: Kind, registry: &str) -> anyhow::Result<Daemon> {
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

    fn cri(&self) -> pb::image_service_client::ImageServiceClient<Channel> {
        pb::image_service_client::ImageServiceClient::new(self.channel.clone())
    }

    fn mem(&self) -> anyhow::Result<Mem> {
        mem_of(self.proc.pid()).with_context(|| format!("read memory of {:?}", self.kind))
    }

    /// Memory once `IDLE_AFTER` has passed since spawn.
    async fn idle_mem(&self) -> anyhow::Result<Mem> {
        tokio::time::sleep(IDLE_AFTER.saturating_sub(self.spawned.elapsed())).await;
        self.mem()
    }

    /// CRI PullImage; returns its duration.
    async fn pull(&self, image: &str) -> anyhow::Result<Duration> {
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
    async fn image_id(&self, image: &str) -> anyhow::Result<String> {
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
    async fn import(&self, archive: &Path, base_name: &str, via: Via) -> anyhow::Result<Duration> {
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
    // An empty config file keeps a host /etc/bosun/config.toml out of the measurement.
    let config = dir.join("config.toml");
    std::fs::write(&config, "")?;
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

/// Flushes dirty pages (earlier daemons' writes and removals) and pauses, before a timed call.
async fn settle() {
    rustix::fs::sync();
    tokio::time::sleep(SETTLE).await;
}

fn spec(image: &str) -> pb::ImageSpec {
    pb::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// One bosun pull of every image, discarded: warms the registry and the page cache for both.
async fn warm_up(registry: &Registry) -> anyhow::Result<()> {
    let d = Daemon::start(Kind::Bosun, &registry.host()).await?;
    for name in IMAGES {
        d.pull(&registry.image(name)).await?;
    }
    Ok(())
}

/// Cold CRI pulls: each image into a fresh daemon; idle memory from the first one.
async fn pull_round(kind: Kind, registry: &Registry, report: &mut Report) -> anyhow::Result<()> {
    for (i, name) in IMAGES.into_iter().enumerate() {
        let d = Daemon::start(kind, &registry.host()).await?;
        if i == 0 {
            let idle = d.idle_mem().await?;
            report.memory(IDLE, kind, idle, false);
        }
        settle().await;
        let image = registry.image(name);
        let took = d.pull(&image).await?;
        report.record(&format!("cold PullImage {name}"), Unit::Ms, kind, ms(took));
        let id = d.image_id(&image).await?;
        ensure!(id == expected_id(name)?, "{kind:?} pulled {name} as {id}");
        if name == "big" {
            report.memory("after pulling big", kind, d.mem()?, true);
        }
    }
    Ok(())
}

/// Imports of each OCI archive, each into a fresh daemon: bosun by RPC and by CLI, containerd by
/// ctr.
async fn import_round(kind: Kind, registry: &Registry, report: &mut Report) -> anyhow::Result<()> {
    for name in IMAGES {
        let archive = images_dir().join(format!("{name}.oci.tar"));
        let base = format!("bench.test/{name}");
        for &via in Via::of(kind) {
            let d = Daemon::start(kind, &registry.host()).await?;
            settle().await;
            let took = d.import(&archive, &base, via).await?;
            for row in kind.import_rows(via) {
                report.record(&row.row(name), Unit::Ms, kind, ms(took));
            }
            let id = d.image_id(&format!("{base}:latest")).await?;
            ensure!(id == expected_id(name)?, "{kind:?} imported {name} as {id}");
        }
    }
    Ok(())
}

/// 100 tiny images in both daemons, then ListImages and ImageStatus latency and memory after.
async fn many_images(registry: &Registry, report: &mut Report) -> anyhow::Result<()> {
    let dir = Scratch::new("tiny")?;
    let archives = (0..TINY_IMAGES)
        .map(|n| tiny_archive(dir.path(), n))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let daemons = [
        Daemon::start(Kind::Bosun, &registry.host()).await?,
        Daemon::start(Kind::Containerd, &registry.host()).await?,
    ];
    for d in &daemons {
        let idle = d.idle_mem().await?;
        report.memory(IDLE, d.kind, idle, false);
    }
    let what = format!("{TINY_IMAGES} tiny images, total");
    for d in &daemons {
        for (i, &via) in Via::of(d.kind).iter().enumerate() {
            // bosun's second method needs a fresh daemon: the first one holds the images now.
            let fresh = match i {
                0 => None,
                _ => Some(Daemon::start(d.kind, &registry.host()).await?),
            };
            let into = fresh.as_ref().unwrap_or(d);
            let took = import_all(into, &archives, via).await?;
            for row in d.kind.import_rows(via) {
                report.record(&row.row(&what), Unit::S, d.kind, took.as_secs_f64());
            }
        }
    }
    for d in &daemons {
        settle().await;
        latency(d, report).await?;
        let when = format!("after {TINY_IMAGES} imports and {} queries", 2 * QUERIES);
        report.memory(&when, d.kind, d.mem()?, false);
    }
    Ok(())
}

/// Imports every archive into `d` `via` the RPC or the CLI; returns the time taken (then checks
/// that CRI lists the last image).
async fn import_all(d: &Daemon, archives: &[PathBuf], via: Via) -> anyhow::Result<Duration> {
    settle().await;
    let t = Instant::now();
    for archive in archives {
        d.import(archive, "", via).await?;
    }
    let took = t.elapsed();
    d.image_id(&format!("bench.test/img-{}:1", archives.len() - 1))
        .await?;
    Ok(took)
}

/// `QUERIES` sequential ListImages, then ImageStatus, over one connected channel.
async fn latency(d: &Daemon, report: &mut Report) -> anyhow::Result<()> {
    let mut cri = d.cri();
    let listed = cri
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images;
    ensure!(
        listed.len() >= TINY_IMAGES,
        "{:?} lists {} images",
        d.kind,
        listed.len()
    );
    let mut list = Vec::with_capacity(QUERIES);
    let mut status = Vec::with_capacity(QUERIES);
    for i in 0..QUERIES + QUERIES / 10 {
        let t = Instant::now();
        cri.list_images(pb::ListImagesRequest::default()).await?;
        // The first tenth warms connection and caches and is not counted.
        if i >= QUERIES / 10 {
            list.push(t.elapsed());
        }
    }
    for i in 0..QUERIES + QUERIES / 10 {
        let req = pb::ImageStatusRequest {
            image: Some(spec(STATUS_REF)),
            verbose: false,
        };
        let t = Instant::now();
        let r = cri.image_status(req).await?.into_inner();
        if i >= QUERIES / 10 {
            status.push(t.elapsed());
        }
        ensure!(
            r.image.is_some(),
            "{:?} ImageStatus({STATUS_REF}) is empty",
            d.kind
        );
    }
    for (rpc, samples) in [("ListImages", list), ("ImageStatus", status)] {
        let us: Vec<f64> = samples.iter().map(|t| t.as_secs_f64() * 1e6).collect();
        for (p, label) in [(0.50, "p50"), (0.95, "p95"), (0.99, "p99")] {
            let row = format!("{rpc} {label}, {TINY_IMAGES} images");
            report.record(&row, Unit::Us, d.kind, percentile(&us, p));
        }
    }
    Ok(())
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The middle value of `v`, or the mean of the two middle ones.
fn median(v: &[f64]) -> f64 {
    let n = v.len();
    if n % 2 == 1 {
        return percentile(v, 0.5);
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.get(n / 2) {
        Some(hi) => (s[n / 2 - 1] + hi) / 2.0,
        None => f64::NAN,
    }
}

/// Nearest-rank percentile of `v` (0 < p ≤ 1).
fn percentile(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let rank = ((p * s.len() as f64).ceil() as usize).clamp(1, s.len().max(1));
    s.get(rank - 1).copied().unwrap_or(f64::NAN)
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// A tar of `(name, bytes)` files.
fn tar_of(files: &[(String, &[u8])]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append_data(&mut h, name, *data)?;
    }
    Ok(b.into_inner()?)
}

/// An OCI layout tar, `img-N.oci.tar`, holding `bench.test/img-N:1`: one uncompressed layer with
/// one file of its own.
fn tiny_archive(dir: &Path, n: usize) -> anyhow::Result<PathBuf> {
    let content = format!("bench image {n}\n");
    let layer = tar_of(&[(format!("img-{n}.txt"), content.as_bytes())])?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::json!({
        "architecture": arch, "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [sha256(&layer)]},
    })
    .to_string();
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
            "digest": sha256(config.as_bytes()), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
            "digest": sha256(&layer), "size": layer.len()}],
    })
    .to_string();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha256(manifest.as_bytes()), "size": manifest.len(),
            "annotations": {"org.opencontainers.image.ref.name": format!("bench.test/img-{n}:1")}}],
    })
    .to_string();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha256(b).trim_start_matches("sha256:"));
    let outer = tar_of(&[
        (
            "oci-layout".to_string(),
            br#"{"imageLayoutVersion":"1.0.0"}"#.as_slice(),
        ),
        ("index.json".to_string(), index.as_bytes()),
        (blob(manifest.as_bytes()), manifest.as_bytes()),
        (blob(config.as_bytes()), config.as_bytes()),
        (blob(&layer), &layer),
    ])?;
    let path = dir.join(format!("img-{n}.oci.tar"));
    std::fs::write(&path, outer)?;
    Ok(path)
}

/// How a metric's values are shown.
#[derive(Debug, Clone, Copy)]
enum Unit {
    Ms,
    Us,
    MiB,
    S,
}

impl Unit {
    /// The number alone.
    fn num(self, v: f64) -> String {
        match self {
            Unit::Ms if v < 10.0 => format!("{v:.2}"),
            Unit::Ms | Unit::MiB => format!("{v:.1}"),
            Unit::Us => format!("{v:.0}"),
            Unit::S => format!("{v:.2}"),
        }
    }

    fn suffix(self) -> &'static str {
        match self {
            Unit::Ms => "ms",
            Unit::Us => "µs",
            Unit::MiB => "MiB",
            Unit::S => "s",
        }
    }

    /// The median of `samples` with its unit, and their range when there are several.
    fn show(self, samples: &[f64]) -> String {
        let med = format!("{} {}", self.num(median(samples)), self.suffix());
        if samples.len() < 2 {
            return med;
        }
        let (lo, hi) = (percentile(samples, 0.0), percentile(samples, 1.0));
        format!("{med} [{}–{}]", self.num(lo), self.num(hi))
    }
}

/// One row: samples per runtime, shown as their median.
struct Metric {
    name: String,
    unit: Unit,
    samples: BTreeMap<Kind, Vec<f64>>,
}

/// The rows, in the order first recorded.
struct Report {
    rounds: usize,
    /// The 1-minute load average when the bench started.
    load_before: String,
    metrics: Vec<Metric>,
}

/// The issue's goals for bosun's figures, by row name prefix: (prefix, limit, shown as).
const GOALS: [(&str, f64, &str); 3] = [
    ("idle, 2 s after start: RSS", 15.0, "≤ 15 MiB"),
    ("ListImages p50", 1000.0, "≤ 1 ms"),
    ("ImageStatus p50", 1000.0, "≤ 1 ms"),
];

impl Report {
    fn new(rounds: usize) -> Report {
        Report {
            rounds,
            load_before: load_average(),
            metrics: Vec::new(),
        }
    }

    /// RSS and PSS (and peak RSS with `peak`) rows for memory taken `when`.
    fn memory(&mut self, when: &str, kind: Kind, m: Mem, peak: bool) {
        self.record(
            &format!("{when}: RSS (VmRSS)"),
            Unit::MiB,
            kind,
            m.rss / MIB,
        );
        self.record(
            &format!("{when}: PSS (smaps_rollup)"),
            Unit::MiB,
            kind,
            m.pss / MIB,
        );
        if peak {
            self.record(
                &format!("{when}: peak RSS (VmHWM)"),
                Unit::MiB,
                kind,
                m.hwm / MIB,
            );
        }
    }

    fn record(&mut self, name: &str, unit: Unit, kind: Kind, v: f64) {
        let i = match self.metrics.iter().position(|m| m.name == name) {
            Some(i) => i,
            None => {
                let m = Metric {
                    name: name.to_string(),
                    unit,
                    samples: BTreeMap::new(),
                };
                self.metrics.push(m);
                self.metrics.len() - 1
            }
        };
        self.metrics[i].samples.entry(kind).or_default().push(v);
    }

    fn render(&self, took: Duration) -> anyhow::Result<String> {
        let mut s = String::new();
        writeln!(s, "## bosun vs containerd: images (issue \"Foundation\")\n")?;
        writeln!(s, "{}", machine())?;
        writeln!(
            s,
            "1-minute load average {} before, {} after: other work on the machine widens the \
             [min–max] ranges.\n",
            self.load_before,
            load_average()
        )?;
        writeln!(
            s,
            "| metric | bosun | goal (bosun) | containerd | ratio (containerd/bosun) |"
        )?;
        writeln!(s, "| --- | --- | --- | --- | --- |")?;
        for m in &self.metrics {
            let med = |k: Kind| m.samples.get(&k).map(|v| median(v));
            let (b, c) = (med(Kind::Bosun), med(Kind::Containerd));
            let show = |k: Kind| {
                m.samples
                    .get(&k)
                    .map_or_else(|| "—".into(), |v| m.unit.show(v))
            };
            let ratio = match (b, c) {
                (Some(b), Some(c)) if b > 0.0 => format!("{:.2}×", c / b),
                _ => "—".to_string(),
            };
            let goal = match (GOALS.iter().find(|g| m.name.starts_with(g.0)), b) {
                (Some((_, limit, text)), Some(b)) => {
                    format!("{text} {}", if b <= *limit { "✓" } else { "✗" })
                }
                _ => "—".to_string(),
            };
            writeln!(
                s,
                "| {} | {} | {goal} | {} | {ratio} |",
                m.name,
                show(Kind::Bosun),
                show(Kind::Containerd)
            )?;
        }
        writeln!(s, "\n{}", self.notes(took))?;
        Ok(s)
    }

    fn notes(&self, took: Duration) -> String {
        [
            format!(
                "- Figures are medians, [min–max] over rounds or samples. Pull and import rows: \
                 {} round(s); every pull and import runs in a fresh \
                 daemon on a new temp root (nothing cached), runtimes alternate going first; \
                 one discarded warm-up pull per image first.",
                self.rounds
            ),
            "- Pulls: CRI PullImage through the same tonic client, registry on 127.0.0.1 over \
             plain HTTP (containerd via a registry mirror entry)."
                .to_string(),
            "- Imports: containerd's figure is `ctr -n k8s.io images import` wall time in both \
             rows (ctr start included, archive streamed to containerd over gRPC); `Import RPC` \
             gives bosun the path and excludes process start, `CLI` is `bosun image import` \
             wall time (like for like)."
                .to_string(),
            format!(
                "- Idle memory: {} samples per runtime (first daemon of each round, and the \
                 daemon of the {}-image phase). Latency: {QUERIES} sequential calls after {} \
                 warm-up calls, ImageStatus of `{STATUS_REF}` by tag.",
                self.rounds + 1,
                TINY_IMAGES,
                QUERIES / 10
            ),
            "- containerd runs with its default plugins (aufs, btrfs, zfs and devmapper \
             snapshotters skip themselves here) and an empty CNI dir; ratios above 1 favour bosun."
                .to_string(),
            format!("- Bench wall time: {:.0} s.", took.as_secs_f64()),
        ]
        .join("\n")
    }
}

/// The first field of /proc/loadavg.
fn load_average() -> String {
    let text = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    text.split(' ').next().unwrap_or("?").to_string()
}

/// nproc, kernel, CPU, memory and the two versions.
fn machine() -> String {
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("?")
        .trim()
        .to_string();
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let mem = proc_kb(&meminfo, "MemTotal:").map_or(0.0, |b| b / MIB / 1024.0);
    let version = |bin: &str| {
        Command::new(bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    format!(
        "Machine: {nproc} CPUs ({cpu}), {mem:.1} GiB RAM, kernel {}. {}; {}.",
        kernel.trim(),
        version(BOSUN),
        version("containerd")
    )
}
