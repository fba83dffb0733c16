//! The real kubelet drives checkpointing (issue 29): its `POST /checkpoint/{ns}/{pod}/{container}` makes bosun write the archive in the kubelet's checkpoints directory while the static pod keeps running, and a second static pod whose image is a checkpoint image built from that archive (on a registry on 127.0.0.1) is restored by bosun and counts on from the checkpointed value. VM lane only (CRIU); the POST needs a kubelet that serves its port (../shared/bin's does not).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, Rt};
use crate::support::podnet::free_port;
use crate::support::{cgroup, kubelet_bin, scaled, scratch, trial, Need, Registry, Scenario};

const NEEDS: &[Need] = &[
    Need::Root,
    Need::Runc,
    Need::Images,
    Need::Criu,
    Need::Kubelet,
    Need::KubeletServer,
];
const NEEDS_RESTORE: &[Need] = &[
    Need::Root,
    Need::Runc,
    Need::Images,
    Need::Criu,
    Need::Kubelet,
    Need::Registry,
];

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::checkpoint::kubelet_post_checkpoint_archives_a_running_static_pod",
            NEEDS,
            kubelet_post_checkpoint,
        ),
        trial(
            "cri::checkpoint::kubelet_static_pod_restored_from_a_checkpoint_image_counts_on",
            NEEDS_RESTORE,
            kubelet_restore,
        ),
    ]
}

/// The node name the kubelet registers its static pods under (`<pod>-<node>`).
const NODE: &str = "bosun-ck";
/// A shell counter: `n=<i>` every 0.2 s.
const COUNTER: &str = "i=0; while :; do i=$((i+1)); echo n=$i; sleep 0.2; done";

/// A standalone kubelet on the test daemon's socket: static pods from `dir/manifests`, its
/// root in `dir/root` (checkpoints in `dir/root/checkpoints`), its serving certificate in
/// `dir/pki`, every port on 127.0.0.1, authentication off for the checkpoint endpoint (its
/// secured server on: this build's default is off); killed on drop.
struct Kubelet {
    child: Child,
    dir: PathBuf,
    port: u16,
    read_only: u16,
    http: reqwest::Client,
}

impl Kubelet {
    fn start(socket: &Path, dir: &Path) -> Result<Kubelet> {
        let bin = kubelet_bin().context("no kubelet")?;
        let (port, read_only, healthz) = (free_port()?, free_port()?, free_port()?);
        std::fs::create_dir_all(dir.join("manifests"))?;
        // No QoS cgroups (cgroupsPerQOS off): pods go under the test daemon's own cgroup
        // parent, which its clean-up check covers; the driver is the daemon's.
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: {manifests}
fileCheckFrequency: 1s
enableServer: true
address: 127.0.0.1
port: {port}
readOnlyPort: {read_only}
healthzBindAddress: 127.0.0.1
healthzPort: {healthz}
cgroupDriver: {driver}
cgroupsPerQOS: false
enforceNodeAllocatable: []
failSwapOn: false
containerRuntimeEndpoint: unix://{socket}
authentication: {{anonymous: {{enabled: true}}, webhook: {{enabled: false}}}}
authorization: {{mode: AlwaysAllow}}
featureGates: {{ContainerCheckpoint: true}}
",
            manifests = dir.join("manifests").display(),
            driver = cgroup::driver().name(),
            socket = socket.display(),
        );
        std::fs::write(dir.join("config.yaml"), config)?;
        let log = std::fs::File::create(dir.join("kubelet.log"))?;
        let child = Command::new(&bin)
            .arg("--config")
            .arg(dir.join("config.yaml"))
            .arg("--root-dir")
            .arg(dir.join("root"))
            .arg("--cert-dir")
            .arg(dir.join("pki"))
            .args(["--hostname-override", NODE, "-v", "2"])
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("spawn {}", bin.display()))?;
        let http = reqwest::Client::builder()
            .no_proxy()
            // The kubelet serves a self-signed certificate it made at start (curl -k).
            .danger_accept_invalid_certs(true)
            .build()?;
        Ok(Kubelet {
            child,
            dir: dir.to_path_buf(),
            port,
            read_only,
            http,
        })
    }

    /// Writes static pod manifest `name.yaml`.
    fn manifest(&self, name: &str, yaml: &str) -> Result<()> {
        Ok(std::fs::write(
            self.dir.join("manifests").join(format!("{name}.yaml")),
            yaml,
        )?)
    }

    /// Where the kubelet writes checkpoint archives.
    fn checkpoints(&self) -> PathBuf {
        self.dir.join("root/checkpoints")
    }

    /// The kubelet's last log lines (for failures).
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("kubelet.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(25)..].join("\n")
    }

    /// `POST /checkpoint/{ns}/{pod}/{container}`: (HTTP status, body).
    async fn checkpoint(&self, ns: &str, pod: &str, container: &str) -> Result<(u16, String)> {
        let url = format!(
            "https://127.0.0.1:{}/checkpoint/{ns}/{pod}/{container}",
            self.port
        );
        let r = match self.http.post(&url).send().await {
            Ok(r) => r,
            Err(e) => bail!("POST {url}: {e:#}; kubelet log:\n{}", self.log_tail()),
        };
        Ok((r.status().as_u16(), r.text().await?))
    }

    /// Waits until the kubelet's read-only `/pods` lists static pod `pod` with `container`
    /// running.
    async fn wait_running(&self, pod: &str, container: &str, secs: u64) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/pods", self.read_only);
        let deadline = Instant::now() + scaled(Duration::from_secs(secs));
        loop {
            if let Ok(r) = self.http.get(&url).send().await {
                let body = r.bytes().await.unwrap_or_default();
                let pods: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                let running = pods["items"].as_array().into_iter().flatten().any(|p| {
                    p["metadata"]["name"] == pod
                        && p["status"]["containerStatuses"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .any(|c| c["name"] == container && c["state"]["running"].is_object())
                });
                if running {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "the kubelet's /pods has no running {pod}/{container} after {secs} s; kubelet log:\n{}",
                    self.log_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        let _ = rustix::process::kill_process(
            rustix::process::Pid::from_child(&self.child),
            rustix::process::Signal::TERM,
        );
        let stopped =
            crate::support::wait_until(10, || matches!(self.child.try_wait(), Ok(Some(_))));
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        // The kubelet bind-mounts its root dir onto itself (to make it shared).
        let _ = rustix::mount::unmount(self.dir.join("root"), rustix::mount::UnmountFlags::DETACH);
    }
}

/// A static pod `name` running the counter as container `counter` from `image`.
fn counter_pod(name: &str, image: &str) -> String {
    format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: default}}
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: counter
    image: {image}
    imagePullPolicy: IfNotPresent
    command: [\"sh\", \"-c\", \"{COUNTER}\"]
"
    )
}

/// The container `counter` of the kubelet's static pod `pod` (its full name): (id, log path).
async fn counter_of(rt: &mut Rt, pod: &str) -> Result<(String, PathBuf)> {
    let list = rt
        .list_containers(pb::ListContainersRequest::default())
        .await?
        .into_inner()
        .containers;
    let c = list
        .iter()
        .filter(|c| c.state == pb::ContainerState::ContainerRunning as i32)
        .find(|c| {
            c.labels.get("io.kubernetes.pod.name").map(String::as_str) == Some(pod)
                && c.labels
                    .get("io.kubernetes.container.name")
                    .map(String::as_str)
                    == Some("counter")
        })
        .with_context(|| format!("no running counter of {pod} in {list:?}"))?;
    let st = cri::status(rt, &c.id).await?;
    Ok((c.id.clone(), PathBuf::from(st.log_path)))
}

/// The highest `n=` among `lines`.
fn last_count(lines: &[String]) -> u64 {
    counts(lines).max().unwrap_or(0)
}

fn counts(lines: &[String]) -> impl Iterator<Item = u64> + '_ {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("n=")?.parse().ok())
}

/// The member names of a tar archive.
fn members(archive: &Path) -> Result<Vec<String>> {
    let mut tar = tar::Archive::new(std::fs::File::open(archive)?);
    tar.entries()?
        .map(|e| Ok(e?.path()?.display().to_string()))
        .collect()
}

/// How the checkpoint is asked for.
#[derive(Clone, Copy)]
enum How {
    /// The kubelet's `POST /checkpoint/{ns}/{pod}/{container}` on its authenticated port.
    Post,
    /// The CRI request the kubelet's checkpoint handler sends, sent by the test, for a kubelet
    /// that serves no authenticated port (../shared/bin's: see `kubelet::server_unmet`).
    KubeletsRequest,
}

impl How {
    /// The POST where this kubelet serves it, else its request.
    fn best() -> How {
        match crate::support::kubelet::server_unmet() {
            None => How::Post,
            Some(why) => {
                println!("checkpoint as the kubelet's CRI request, not its POST: {why}");
                How::KubeletsRequest
            }
        }
    }
}

/// Now as Go's `time.RFC3339` in UTC (what the kubelet puts in the archive's name).
fn rfc3339_now() -> Result<String> {
    let out = Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
        .output()?;
    ensure!(out.status.success(), "date: {}", out.status);
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// What one kubelet checkpoint gave: the archive, the counter's last value before it was
/// asked for and the last one the archive's copy of the log has (the dump holds one between
/// the two: the container kept running while the archive was written), the time taken.
struct Taken {
    archive: PathBuf,
    before: u64,
    /// How many counter lines the archived log holds (the restored log starts with them).
    logged_lines: usize,
    logged_max: u64,
    took: Duration,
}

/// Runs static pod `counter`, has it checkpointed `how`, and checks the archive and that the
/// pod keeps running and counting.
async fn checkpoint_through_the_kubelet(
    rt: &mut Rt,
    kubelet: &Kubelet,
    busybox: &str,
    how: How,
) -> Result<Taken> {
    kubelet.manifest("counter", &counter_pod("counter", busybox))?;
    let pod = format!("counter-{NODE}");
    kubelet.wait_running(&pod, "counter", 120).await?;
    let (id, log) = counter_of(rt, &pod).await?;
    cri::wait_log(&log, 30, |l| last_count(l) >= 3).await?;
    // The count when the checkpoint is asked for: the dump holds this or a later one.
    let before = last_count(&cri::lines_of(
        &cri::wait_log(&log, 5, |_| true).await?,
        "stdout",
    ));
    let t = Instant::now();
    let archive = match how {
        How::Post => {
            let (code, body) = kubelet.checkpoint("default", &pod, "counter").await?;
            ensure!(
                code == 200,
                "POST /checkpoint: HTTP {code}: {body}; kubelet log:\n{}",
                kubelet.log_tail()
            );
            let answer: serde_json::Value = serde_json::from_str(&body)
                .with_context(|| format!("kubelet's answer {body:?}"))?;
            PathBuf::from(
                answer["items"][0]
                    .as_str()
                    .with_context(|| format!("no archive path in {body}"))?,
            )
        }
        How::KubeletsRequest => {
            // What the kubelet's checkpoint handler sends its runtime (pkg/kubelet's
            // CheckpointContainer through its CRI client): the container it runs, an archive
            // in its checkpoints directory named with the pod's full name and an RFC 3339
            // time, and its runtimeRequestTimeout (2 minutes) as the timeout.
            std::fs::create_dir_all(kubelet.checkpoints())?;
            let archive = kubelet.checkpoints().join(format!(
                "checkpoint-{pod}_default-counter-{}.tar",
                rfc3339_now()?
            ));
            rt.checkpoint_container(pb::CheckpointContainerRequest {
                container_id: id.clone(),
                location: archive.display().to_string(),
                timeout: 120,
            })
            .await
            .context("CheckpointContainer as the kubelet sends it")?;
            archive
        }
    };
    let took = t.elapsed();
    let name = archive
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    ensure!(
        archive.parent() == Some(kubelet.checkpoints().as_path())
            && name.starts_with(&format!("checkpoint-{pod}_default-counter-"))
            && name.ends_with(".tar"),
        "archive {}",
        archive.display()
    );
    let names = members(&archive)?;
    for want in [
        "config.dump",
        "spec.dump",
        "status.dump",
        "container.log",
        "rootfs-diff.tar",
        "checkpoint/inventory.img",
    ] {
        ensure!(names.iter().any(|n| n == want), "no {want} in {names:?}");
    }
    let left: Vec<_> = std::fs::read_dir(kubelet.checkpoints())?
        .filter_map(|e| e.ok().map(|e| e.file_name()))
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    ensure!(left.is_empty(), "staging left behind: {left:?}");
    // The count the archive holds: the log the container had written by then.
    let logged = {
        use std::io::Read;
        let mut tar = tar::Archive::new(std::fs::File::open(&archive)?);
        let mut text = String::new();
        for e in tar.entries()? {
            let mut e = e?;
            if e.path()?.as_os_str() == "container.log" {
                e.read_to_string(&mut text)?;
            }
        }
        text
    };
    let logged_lines = logged
        .lines()
        .filter(|l| l.rsplit(' ').next().is_some_and(|m| m.starts_with("n=")))
        .count();
    let logged_max = logged
        .lines()
        .filter_map(|l| {
            l.rsplit(' ')
                .next()?
                .strip_prefix("n=")?
                .parse::<u64>()
                .ok()
        })
        .max()
        .context("no count in the archive's container.log")?;
    ensure!(
        logged_max >= before,
        "container.log up to n={logged_max}, asked at n={before}"
    );
    // The pod keeps running and counting, the same container.
    cri::wait_log(&log, 30, |l| last_count(l) >= logged_max + 5).await?;
    let st = cri::status(rt, &id).await?;
    ensure!(
        st.state == pb::ContainerState::ContainerRunning as i32,
        "{st:?}"
    );
    println!(
        "kubelet checkpoint: {took:?}, archive {} bytes, asked at n={before}, container.log up to n={logged_max}",
        std::fs::metadata(&archive)?.len()
    );
    Ok(Taken {
        archive,
        before,
        logged_lines,
        logged_max,
        took,
    })
}

/// Removes the kubelet's pods after it is gone (their sandboxes, containers, cgroups).
fn remove_pods(d: &crate::support::Daemon) {
    cri::remove_all_pods(&d.socket(), scaled(Duration::from_secs(60)));
}

fn kubelet_post_checkpoint() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let mut rt = s.rt.clone();
        let kubelet = Kubelet::start(&s.daemon.socket(), dir.path())?;
        let r =
            checkpoint_through_the_kubelet(&mut rt, &kubelet, &s.image("busybox"), How::Post).await;
        drop(kubelet);
        remove_pods(&s.daemon);
        let taken = r?;
        ensure!(taken.took > Duration::ZERO);
        Ok(())
    })
}

fn kubelet_restore() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let registry = Registry::start(false)?;
        let mut rt = s.rt.clone();
        let kubelet = Kubelet::start(&s.daemon.socket(), dir.path())?;
        let r = async {
            // The kubelet's POST /checkpoint (or, where it serves no port, the CRI request
            // its handler sends), then its pull and create of the image: all the kubelet's.
            let taken =
                checkpoint_through_the_kubelet(&mut rt, &kubelet, &s.image("busybox"), How::best())
                    .await?;
            // The checkpoint image (what `buildah add` + `buildah config --annotation` make),
            // pushed to the registry on 127.0.0.1; a second static pod names it.
            let image = crate::support::checkpoint_image::push_checkpoint_image(
                &registry.host(),
                "bosun/counter-checkpoint",
                "latest",
                &taken.archive,
                "counter",
            )
            .await?;
            kubelet.manifest("restored", &counter_pod("restored", &image))?;
            let pod = format!("restored-{NODE}");
            let t = Instant::now();
            kubelet.wait_running(&pod, "counter", 180).await?;
            let (_, log) = counter_of(&mut rt, &pod).await?;
            // It counts on from the checkpointed value, not from 1.
            // The restored log starts with the archived one (as CRI-O restores logs), then the
            // restored process writes on.
            let skip = taken.logged_lines;
            let lines = cri::wait_log(&log, 30, |l| counts(l).count() >= skip + 3).await?;
            let lines = cri::lines_of(&lines, "stdout");
            let first = counts(&lines).nth(skip).unwrap_or(0);
            ensure!(
                first > taken.before && first <= taken.logged_max + 1,
                "the restored counter started at {first}; the checkpoint was asked at n={} and \
                 its log copy ends at n={}: {lines:?}",
                taken.before,
                taken.logged_max
            );
            println!(
                "kubelet restore from {image}: running after {:?}, counting on from n={first} \
                 (asked at n={}, archived log up to n={})",
                t.elapsed(),
                taken.before,
                taken.logged_max
            );
            anyhow::Ok(())
        }
        .await;
        drop(kubelet);
        remove_pods(&s.daemon);
        r
    })
}
