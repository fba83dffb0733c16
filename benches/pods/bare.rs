//! The baseline: `runc run --detach` of a hand-written bundle on an unpacked busybox, timed, then deleted.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context};
use serde_json::json;

use crate::cri::SLEEP;
use crate::daemons::MARK;
use crate::images_dir;

/// A bundle dir with `rootfs/` (the busybox test image's layer, unpacked) and a runc root.
pub struct Bundle {
    dir: PathBuf,
    /// Containers created and not yet deleted, deleted on drop.
    live: Vec<String>,
    seq: usize,
}

/// The busybox test image's single layer blob (gzip).
fn busybox_layer() -> anyhow::Result<PathBuf> {
    let layout = images_dir().join("busybox");
    let blob = |digest: &str| {
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let read = |p: PathBuf| -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_slice(
            &std::fs::read(&p).with_context(|| format!("read {}", p.display()))?,
        )?)
    };
    let index = read(layout.join("index.json"))?;
    let manifest = read(blob(
        index["manifests"][0]["digest"]
            .as_str()
            .context("index.json")?,
    ))?;
    let layer = manifest["layers"][0]["digest"]
        .as_str()
        .context("busybox manifest layers")?;
    Ok(blob(layer))
}

/// The runtime spec: busybox `sleep 3600` as root, new pid/mount/ipc/uts namespaces (host
/// network: a CRI container joins its pod's existing netns, which costs about as little), its
/// own top-level cgroup, Docker's default capabilities, masked and read-only paths.
fn spec(id: &str) -> serde_json::Value {
    let caps: Vec<String> = "CHOWN DAC_OVERRIDE FSETID FOWNER MKNOD NET_RAW SETGID SETUID SETFCAP \
         SETPCAP NET_BIND_SERVICE SYS_CHROOT KILL AUDIT_WRITE"
        .split_whitespace()
        .map(|c| format!("CAP_{c}"))
        .collect();
    let mount = |dest: &str, typ: &str, opts: &[&str]| json!({"destination": dest, "type": typ, "source": typ, "options": opts});
    json!({
        "ociVersion": "1.0.2",
        "process": {
            "terminal": false, "user": {"uid": 0, "gid": 0}, "args": SLEEP, "cwd": "/",
            "env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],
            "capabilities": {"bounding": caps, "effective": caps, "permitted": caps},
            "noNewPrivileges": false
        },
        "root": {"path": "rootfs"},
        "hostname": "bench",
        "mounts": [
            mount("/proc", "proc", &["nosuid", "noexec", "nodev"]),
            mount("/dev", "tmpfs", &["nosuid", "strictatime", "mode=755", "size=65536k"]),
            mount("/dev/pts", "devpts", &["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"]),
            mount("/dev/mqueue", "mqueue", &["nosuid", "noexec", "nodev"]),
            mount("/dev/shm", "tmpfs", &["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]),
            mount("/sys", "sysfs", &["nosuid", "noexec", "nodev", "ro"]),
        ],
        "linux": {
            "cgroupsPath": format!("/{id}"),
            "resources": {"devices": [{"allow": false, "access": "rwm"}]},
            "namespaces": [{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}],
            "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
                "/sys/firmware"],
            "readonlyPaths": ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
                "/proc/sysrq-trigger"]
        }
    })
}

impl Bundle {
    /// Unpacks busybox into `dir/bundle/rootfs`.
    pub fn new(dir: &Path) -> anyhow::Result<Bundle> {
        let dir = dir.join("bundle");
        let rootfs = dir.join("rootfs");
        std::fs::create_dir_all(&rootfs)?;
        std::fs::create_dir_all(dir.join("runc-root"))?;
        let layer = std::fs::File::open(busybox_layer()?)?;
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(layer));
        tar.set_preserve_permissions(true);
        tar.set_preserve_ownerships(true);
        tar.unpack(&rootfs).context("unpack the busybox layer")?;
        Ok(Bundle {
            dir,
            live: Vec::new(),
            seq: 0,
        })
    }

    /// runc with stdio on /dev/null and a file: `run --detach` hands its stdio to the
    /// container, so a pipe would stay open as long as the container runs.
    fn runc(&self) -> anyhow::Result<Command> {
        let mut c = Command::new("runc");
        c.arg("--root")
            .arg(self.dir.join("runc-root"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(self.stderr())?);
        Ok(c)
    }

    fn stderr(&self) -> PathBuf {
        self.dir.join("runc.stderr")
    }

    /// What the last runc call wrote to stderr.
    fn err_text(&self) -> String {
        std::fs::read_to_string(self.stderr())
            .unwrap_or_default()
            .trim()
            .to_string()
    }

    /// Times `runc run --detach` of the hand-written spec under a fresh container id, then
    /// kills and deletes it, untimed.
    pub fn run_once(&mut self) -> anyhow::Result<Duration> {
        self.run_timed(spec)
    }

    /// Times `runc run --detach` of `config` (a runtime's own config.json, e.g. bosun's for a
    /// container of a live pod: it joins that pod's pinned namespaces) with only the root
    /// (this bundle's unpacked busybox), the cgroups path and the command changed; then kills
    /// and deletes it, untimed. This is "a bare runc run of the same bundle".
    pub fn run_config_once(&mut self, config: &serde_json::Value) -> anyhow::Result<Duration> {
        self.run_timed(|id| {
            let mut spec = config.clone();
            spec["root"] = json!({"path": "rootfs", "readonly": false});
            spec["linux"]["cgroupsPath"] = json!(format!("/{id}"));
            spec["process"]["args"] = json!(SLEEP);
            spec["process"]["terminal"] = json!(false);
            spec
        })
    }

    /// Writes `spec_for(id)` as config.json for a fresh id (before the clock starts), times
    /// `runc run --detach`, then deletes the container, untimed.
    fn run_timed(
        &mut self,
        spec_for: impl FnOnce(&str) -> serde_json::Value,
    ) -> anyhow::Result<Duration> {
        self.seq += 1;
        let id = format!("{MARK}-runc-{}-{}", std::process::id(), self.seq);
        std::fs::write(
            self.dir.join("config.json"),
            serde_json::to_vec_pretty(&spec_for(&id))?,
        )?;
        let mut cmd = self.runc()?;
        cmd.args(["run", "--detach", "--bundle"])
            .arg(&self.dir)
            .arg(&id);
        self.live.push(id.clone());
        let t = Instant::now();
        let status = cmd.status().context("run runc run --detach")?;
        let took = t.elapsed();
        ensure!(
            status.success(),
            "runc run --detach {id}: {}",
            self.err_text()
        );
        self.delete(&id)?;
        Ok(took)
    }

    fn delete(&mut self, id: &str) -> anyhow::Result<()> {
        let status = self
            .runc()?
            .args(["delete", "--force", id])
            .status()
            .context("run runc delete")?;
        ensure!(
            status.success(),
            "runc delete --force {id}: {}",
            self.err_text()
        );
        self.live.retain(|l| l != id);
        Ok(())
    }
}

impl Drop for Bundle {
    fn drop(&mut self) {
        for id in self.live.clone() {
            if let Err(e) = self.delete(&id) {
                eprintln!("pods bench: {e:#}");
            }
        }
    }
}
