//! The OCI runtime's own start without bosun (`<runtime> run --detach` of a bare busybox bundle), to set bosun's pod start latency against.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::support::images_dir;

/// The busybox test image's layers unpacked into `dir/rootfs`.
pub fn busybox_rootfs(dir: &Path) -> Result<PathBuf> {
    let image = images_dir().join("busybox");
    let blob = |digest: &str| {
        image
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:"))
    };
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(image.join("index.json"))?)?;
    let manifest = index["manifests"][0]["digest"]
        .as_str()
        .context("no manifest in the busybox image's index")?;
    let manifest: serde_json::Value = serde_json::from_slice(&std::fs::read(blob(manifest))?)?;
    let rootfs = dir.join("rootfs");
    std::fs::create_dir_all(&rootfs)?;
    for layer in manifest["layers"].as_array().context("no layers")? {
        let digest = layer["digest"].as_str().context("a layer without digest")?;
        let gz = flate2::read::GzDecoder::new(std::fs::File::open(blob(digest))?);
        let mut tar = tar::Archive::new(gz);
        tar.set_preserve_permissions(true);
        tar.unpack(&rootfs)
            .with_context(|| format!("unpack layer {digest}"))?;
    }
    Ok(rootfs)
}

/// `n` starts of `sleep 60` by runtime `bin` itself (`run --detach` of a bundle made by its
/// own `spec`, rootfs shared read-only, state under `dir`), each killed and deleted after;
/// the start times, sorted.
pub fn bare_starts(bin: &Path, rootfs: &Path, dir: &Path, n: usize) -> Result<Vec<Duration>> {
    let name = bin
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    let bundle = dir.join(format!("bundle-{name}"));
    let state = dir.join(format!("state-{name}"));
    std::fs::create_dir_all(&bundle)?;
    let out = Command::new(bin)
        .arg("spec")
        .current_dir(&bundle)
        .output()
        .with_context(|| format!("{} spec", bin.display()))?;
    ensure!(
        out.status.success(),
        "{name} spec: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let path = bundle.join("config.json");
    let mut spec: serde_json::Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    spec["process"]["args"] = serde_json::json!(["/bin/sh", "-c", "sleep 60"]);
    spec["process"]["terminal"] = false.into();
    spec["root"] = serde_json::json!({"path": rootfs, "readonly": true});
    std::fs::write(&path, serde_json::to_vec(&spec)?)?;
    // Its stderr into a file: the detached container inherits runc's stdio, and a pipe would
    // not reach EOF before the container ends.
    let errors = dir.join(format!("{name}.err"));
    let runtime = |args: &[&str]| -> Result<Command> {
        let mut c = Command::new(bin);
        c.arg("--root").arg(&state).args(args);
        c.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&errors)?);
        Ok(c)
    };
    let mut times = Vec::new();
    for i in 0..n {
        let id = format!("bosun-bare-{name}-{}-{i}", std::process::id());
        let t = Instant::now();
        let status = runtime(&["run", "--detach", "--bundle"])?
            .arg(&bundle)
            .arg(&id)
            .status()?;
        times.push(t.elapsed());
        let why = std::fs::read_to_string(&errors).unwrap_or_default();
        let _ = runtime(&["delete", "--force", &id])?.status();
        ensure!(status.success(), "{name} run: {status}: {why}");
    }
    times.sort();
    Ok(times)
}
