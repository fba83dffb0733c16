//! bosun vs containerd on this machine: pod and container lifecycle latency, stop exactness, memory per pod, ListContainers at scale.

mod bare;
mod burst;
mod cri;
mod daemons;
mod leftovers;
#[path = "../images/measure.rs"]
#[allow(dead_code)] // shared with the images bench, which uses more of it
mod measure;
mod pause;
mod phases;
mod procs;
mod report;
mod streams;
mod supervised;

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context};

use bare::Bundle;
use cri::{Cri, BUSYBOX};
use daemons::{Daemon, Kind, Scratch, CNI_PLUGINS, KINDS};
use report::{Report, Unit, MIB};

const USAGE: &str = "\
usage: cargo bench --bench pods -- [--only bosun|containerd] [--pods N] [--quick]
           [--mem-pods A,B] [--list-containers N] [--list-calls N] [--host-network]
           [--supervised N] [--burst N] [--lifecycles N]

  --only KIND           run one runtime only
  --pods N              pods per latency series (default 20; --quick: 5)
  --quick               fewer rounds: 5 pods, memory at 5 and 10 pods, 100 containers, 50 calls
  --mem-pods A,B        running pods at which memory is read (default 10,50)
  --list-containers N   containers created for ListContainers (default 1000, 50 per pod)
  --list-calls N        timed ListContainers calls (default 200)
  --supervised N        bosun only: pods run by the standalone supervisor, each probed
                        every second (default 200; --quick: 50; 0: skip)
  --burst N             pods started at once from N clients, then removed (default 50)
  --lifecycles N        pod lifecycles before the daemon's RSS is read again (default 1000;
                        --quick: 100; 0: skip)
  --host-network        every pod on the host's network (default: own netns; containerd
                        then needs a CNI network, see the notes)

  BOSUN_BENCH_LOG_LEVEL=debug keeps bosun's log (per-step timings) in target/bench-pods-bosun.log";

/// What to run; see [`USAGE`].
pub struct Opts {
    pub only: Option<Kind>,
    pub pods: usize,
    pub mem_pods: Vec<usize>,
    pub list_pods: usize,
    pub list_per_pod: usize,
    pub list_calls: usize,
    pub host_network: bool,
    pub quick: bool,
    pub supervised: usize,
    pub burst: usize,
    pub lifecycles: usize,
}

impl Opts {
    fn parse(args: impl Iterator<Item = String>) -> anyhow::Result<Opts> {
        let args: Vec<String> = args.collect();
        let quick = args.iter().any(|a| a == "--quick");
        let mut o = Opts {
            only: None,
            pods: if quick { 5 } else { 20 },
            mem_pods: if quick { vec![5, 10] } else { vec![10, 50] },
            list_pods: 0,
            list_per_pod: 0,
            list_calls: if quick { 50 } else { 200 },
            host_network: false,
            quick,
            supervised: if quick { 50 } else { 200 },
            burst: 50,
            lifecycles: if quick { 100 } else { 1000 },
        };
        let mut containers = if quick { 100 } else { 1000 };
        let mut it = args.into_iter();
        while let Some(a) = it.next() {
            let mut value = || it.next().with_context(|| format!("{a} needs a value"));
            match a.as_str() {
                // `cargo bench` passes --bench to harness = false benches.
                "--bench" | "--quick" => {}
                "--only" => {
                    o.only = Some(match value()?.as_str() {
                        "bosun" => Kind::Bosun,
                        "containerd" => Kind::Containerd,
                        other => bail!("--only {other}: bosun or containerd"),
                    })
                }
                "--pods" => o.pods = value()?.parse().context("--pods")?,
                "--supervised" => o.supervised = value()?.parse().context("--supervised")?,
                "--burst" => o.burst = value()?.parse().context("--burst")?,
                "--lifecycles" => o.lifecycles = value()?.parse().context("--lifecycles")?,
                "--mem-pods" => {
                    o.mem_pods = value()?
                        .split(',')
                        .map(|n| n.trim().parse::<usize>())
                        .collect::<Result<_, _>>()
                        .context("--mem-pods")?;
                    o.mem_pods.sort_unstable();
                }
                "--list-containers" => {
                    containers = value()?.parse().context("--list-containers")?
                }
                "--list-calls" => o.list_calls = value()?.parse().context("--list-calls")?,
                "--host-network" => o.host_network = true,
                "-h" | "--help" => {
                    println!("{USAGE}");
                    std::process::exit(0);
                }
                other => bail!("unknown argument {other:?}\n{USAGE}"),
            }
        }
        if o.pods == 0 || o.list_calls == 0 || o.mem_pods.contains(&0) {
            bail!("--pods, --list-calls and --mem-pods need numbers above 0");
        }
        o.list_per_pod = containers.clamp(1, 50);
        o.list_pods = containers.div_ceil(o.list_per_pod);
        Ok(o)
    }

    fn kinds(&self) -> Vec<Kind> {
        KINDS
            .into_iter()
            .filter(|k| self.only.is_none_or(|o| o == *k))
            .collect()
    }
}

fn main() {
    let opts = match Opts::parse(std::env::args().skip(1)) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("pods bench: {e:#}");
            std::process::exit(2);
        }
    };
    // The client's connection tasks run on a worker thread, so they keep answering while the
    // main thread blocks in a guard's drop (which removes pods over CRI).
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("pods bench: tokio runtime: {e}");
            std::process::exit(1);
        }
    };
    let before = leftovers::Before::take();
    // Ctrl-C drops `run`'s future, so every guard in it cleans up.
    let outcome = rt.block_on(async {
        tokio::select! {
            r = run(&opts) => r,
            _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        }
    });
    let left = before.check();
    if left.is_empty() {
        println!("Leftovers: none (mounts, /run/netns, containerd shim sockets and runc state, cgroups under /sys/fs/cgroup/*/{}-*, processes, CNI bridge and cache).", daemons::MARK);
    } else {
        println!("Leftovers ({}):", left.len());
        for l in &left {
            println!("  {l}");
        }
    }
    match outcome {
        Ok(failed) if failed.is_empty() => {}
        Ok(failed) => {
            let names: Vec<&str> = failed.iter().map(|k| k.name()).collect();
            eprintln!("pods bench: no full figures for {}", names.join(", "));
            std::process::exit(1);
        }
        Err(e) => {
            eprintln!("pods bench failed: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The whole bench; returns the runtimes that failed (their rows are partial or missing).
async fn run(opts: &Opts) -> anyhow::Result<Vec<Kind>> {
    if let Some(reason) = unmet_needs(opts) {
        println!("SKIP pods bench: {reason}");
        return Ok(Vec::new());
    }
    let mut failed = Vec::new();
    let started = Instant::now();
    let cni = !opts.host_network && cni_available();
    let mut report = Report::new();
    let work = Scratch::new("work")?;
    let mut bundle = Bundle::new(work.path())?;
    for kind in opts.kinds() {
        eprintln!("pods bench: {}", kind.name());
        let t = Instant::now();
        if let Err(e) = run_kind(kind, opts, cni, work.path(), &mut bundle, &mut report).await {
            eprintln!("pods bench: {} failed: {e:#}", kind.name());
            report.failed(kind, format!("{e:#}"));
            failed.push(kind);
        }
        report.note(format!(
            "{} phases took {:.0} s.",
            kind.name(),
            t.elapsed().as_secs_f64()
        ));
    }
    report.note(format!(
        "Bench wall time: {:.0} s.",
        started.elapsed().as_secs_f64()
    ));
    let text = report.render(&header(opts, cni))?;
    println!("{text}");
    let out = target_dir().join("bench-pods.md");
    std::fs::write(&out, &text).with_context(|| format!("write {}", out.display()))?;
    eprintln!("pods bench: table written to {}", out.display());
    Ok(failed)
}

/// One runtime's daemon, images and phases; everything it made is removed on return.
async fn run_kind(
    kind: Kind,
    opts: &Opts,
    cni: bool,
    work: &Path,
    bundle: &mut Bundle,
    report: &mut Report,
) -> anyhow::Result<()> {
    // Without the bench's CNI network both runtimes run host-network pods (same conditions;
    // bosun would otherwise fall back to its embedded default network, with masquerade).
    let host_net = opts.host_network || !cni;
    let d = Daemon::start(kind, cni).await?;
    let idle = d.idle_mem().await?;
    report.record(
        "daemon idle, 2 s after start: RSS (VmRSS)",
        Unit::MiB,
        kind,
        idle.rss / MIB,
    );
    report.record(
        "daemon idle, 2 s after start: PSS",
        Unit::MiB,
        kind,
        idle.pss / MIB,
    );
    let archive = images_dir().join("busybox.oci.tar");
    d.import(&archive, "bench.test/busybox", BUSYBOX).await?;
    if kind == Kind::Containerd {
        let sandbox = daemons::containerd_sandbox_image()?;
        let dir = work.join("pause");
        std::fs::create_dir_all(&dir)?;
        let archive = pause::archive(&dir, &sandbox)?;
        d.import(&archive, "", &sandbox).await?;
    }
    let mut cri = Cri::new(&d, &work.join("logs"));
    let phases = async {
        phases::warm_up(&mut cri, host_net).await?;
        eprintln!("pods bench: {}: latency, {} pods", kind.name(), opts.pods);
        phases::latency(&d, &mut cri, bundle, opts, host_net, report).await?;
        eprintln!(
            "pods bench: {}: memory at {:?} pods",
            kind.name(),
            opts.mem_pods
        );
        phases::memory(&d, &mut cri, opts, host_net, report).await?;
        eprintln!(
            "pods bench: {}: {} × {} containers, ListContainers",
            kind.name(),
            opts.list_pods,
            opts.list_per_pod
        );
        phases::list(&d, &mut cri, opts, host_net, report).await?;
        if opts.burst > 0 {
            eprintln!("pods bench: {}: {} pods at once", kind.name(), opts.burst);
            burst::burst(&d, &mut cri, opts.burst, host_net, report).await?;
        }
        if opts.lifecycles > 0 {
            eprintln!(
                "pods bench: {}: RSS over {} pod lifecycles",
                kind.name(),
                opts.lifecycles
            );
            burst::lifecycles(&d, &mut cri, opts.lifecycles, host_net, report).await?;
        }
        eprintln!(
            "pods bench: {}: exec, throughput and stats over 100 containers",
            kind.name()
        );
        streams::run(&d, &mut cri, host_net, report).await?;
        if kind == Kind::Bosun && opts.supervised > 0 {
            eprintln!(
                "pods bench: bosun: {} supervised pods probed every second",
                opts.supervised
            );
            supervised::run(&d, opts.supervised, work, report).await?;
        }
        Ok(())
    };
    let r = phases.await;
    let log = target_dir().join(format!("bench-pods-{}.log", kind.name()));
    if d.keep_log(&log)? {
        eprintln!("pods bench: {} log kept in {}", kind.name(), log.display());
    }
    if r.is_err() {
        eprintln!("pods bench: {} log tail:\n{}", kind.name(), d.log_tail());
    }
    drop(cri);
    r
}

/// The lines above the table: what was run and what differs between the two sides.
fn header(opts: &Opts, cni: bool) -> String {
    let net = if opts.host_network {
        "Every pod uses the host's network on both sides (--host-network).".to_string()
    } else if cni {
        format!(
            "Pods have their own network namespace and a veth and an address each (checked in \
             PodSandboxStatus after each timed call). bosun uses its embedded network (no CNI \
             config: bridge, veth, addresses over netlink, its lease journal, its nftables \
             table; no masquerade, no default route); containerd a CNI conflist of Debian's \
             containernetworking-plugins ({CNI_PLUGINS}: bridge + host-local + portmap, no \
             gateway, no NAT; leases in its temp dir). containerd also runs a pause container \
             per pod. The `host network` rows compare both without netns and network set-up."
        )
    } else {
        format!(
            "No CNI plugins in {CNI_PLUGINS} (apt-get install containernetworking-plugins): \
             every pod uses the host's network on both sides."
        )
    };
    [
        format!(
            "Latency rows: p50/p95 over {} pods per series (each runtime in a fresh daemon on \
             its own temp root and socket, its state dir on a tmpfs of its own as /run is on a \
             node, busybox imported; one untimed warm-up pod). \
             Memory at {:?} running pods (one `sleep 3600` each). ListContainers over {} \
             calls with {} × {} created containers.{}",
            opts.pods,
            opts.mem_pods,
            opts.list_calls,
            opts.list_pods,
            opts.list_per_pod,
            if opts.quick { " --quick run." } else { "" }
        ),
        net,
        "Requests are kubelet-shaped: PID namespace per container, IPC per pod, cgroup parent \
         `/bosun-bench-pods-<pid>-<runtime>/<pod>` (cgroupfs), no seccomp profile, no resources. \
         containerd runs a `pause` sandbox container per pod (a static build of Kubernetes' \
         pause.c by this bench, imported as containerd's default sandbox image) under one \
         containerd-shim-runc-v2 per pod; bosun pins namespaces without a process and runs one \
         `bosun monitor` per container."
            .to_string(),
        "Create+Start is CreateContainer + StartContainer of busybox `sleep 3600`; the bare runc \
         baseline is `runc run --detach` of a hand-written bundle (busybox unpacked in a plain \
         directory, no overlay; new pid/mount/ipc/uts namespaces, host network; own cgroup), \
         interleaved with each runtime's Create+Start: every sample of it is followed by one bare \
         run (for bosun also one of its own config.json), so changes of load hit the series \
         alike, and each sample starts after a sync and 0.5 s of quiet. The paired rows take \
         each Create+Start with the run of its own config.json right after it: the difference \
         is what bosun adds, without runc's spread between samples."
            .to_string(),
        "KILL lateness (TERM-ignoring container, StopContainer timeout 1 s): how far past call \
         start + 1 s StopContainer returned / ContainerStatus first showed EXITED (polled \
         back-to-back after the return) / the status's finished_at lies. Per-pod memory: \
         (daemon growth since before the pods + all per-pod helper processes) ÷ pods, from \
         /proc/PID/smaps_rollup; container processes themselves are not counted. bosun's spare \
         monitor (one per daemon, spawned by a StartContainer to serve the next one) has a row of \
         its own."
            .to_string(),
    ]
    .join("\n\n")
}

/// Why the bench cannot run here, if it cannot.
fn unmet_needs(opts: &Opts) -> Option<String> {
    if !rustix::process::geteuid().is_root() {
        return Some("needs root (namespaces, mounts, cgroups)".into());
    }
    let mut bins = vec!["runc"];
    if opts.kinds().contains(&Kind::Containerd) {
        bins.extend(["containerd", "ctr", "gcc"]);
    }
    for bin in bins {
        if which(bin).is_none() {
            return Some(format!("needs {bin} in PATH (hack/setup.sh installs it)"));
        }
    }
    if !images_dir().join("busybox.oci.tar").exists() {
        return Some(format!(
            "needs test images in {} (run hack/setup.sh)",
            images_dir().display()
        ));
    }
    None
}

fn cni_available() -> bool {
    ["loopback", "bridge", "host-local"]
        .iter()
        .all(|b| Path::new(CNI_PLUGINS).join(b).is_file())
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
