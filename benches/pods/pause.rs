//! containerd's sandbox image, built offline: a static `pause` (as Kubernetes' pause.c) in an OCI archive.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{ensure, Context};
use sha2::{Digest as _, Sha256};

/// What Kubernetes' pause does: sleep in pause(), exit 0 on SIGINT/SIGTERM, reap children.
const PAUSE_C: &str = r#"
#include <signal.h>
#include <stddef.h>
#include <sys/wait.h>
#include <unistd.h>

static void sigdown(int signo) { (void)signo; _exit(0); }

static void sigreap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction down = {0}, reap = {0};
  down.sa_handler = sigdown;
  reap.sa_handler = sigreap;
  reap.sa_flags = SA_NOCLDSTOP;
  if (sigaction(SIGINT, &down, NULL) < 0 || sigaction(SIGTERM, &down, NULL) < 0 ||
      sigaction(SIGCHLD, &reap, NULL) < 0)
    return 1;
  for (;;)
    pause();
  return 42;
}
"#;

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// A tar of `(name, mode, bytes)` files.
fn tar_of(files: &[(&str, u32, &[u8])]) -> anyhow::Result<Vec<u8>> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, mode, data) in files {
        let mut h = tar::Header::new_ustar();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(1_700_000_000);
        h.set_cksum();
        b.append_data(&mut h, name, *data)?;
    }
    Ok(b.into_inner()?)
}

/// Compiles pause.c statically with the host's gcc into `dir/pause`.
fn compile(dir: &Path) -> anyhow::Result<Vec<u8>> {
    let src = dir.join("pause.c");
    let bin = dir.join("pause");
    std::fs::write(&src, PAUSE_C)?;
    let out = Command::new("gcc")
        .args(["-static", "-Os", "-s", "-o"])
        .arg(&bin)
        .arg(&src)
        .stdin(Stdio::null())
        .output()
        .context("run gcc (build-essential) for the pause binary")?;
    ensure!(
        out.status.success(),
        "gcc pause.c: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(std::fs::read(&bin)?)
}

/// `dir/pause.oci.tar`: an OCI layout holding `reference` (a full image reference), one
/// uncompressed layer with `/pause`, entrypoint `/pause`.
pub fn archive(dir: &Path, reference: &str) -> anyhow::Result<PathBuf> {
    let pause = compile(dir)?;
    let layer = tar_of(&[("pause", 0o755, &pause)])?;
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let config = serde_json::json!({
        "architecture": arch, "os": "linux",
        "config": {"Entrypoint": ["/pause"], "WorkingDir": "/", "User": "65535:65535"},
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
            "annotations": {"org.opencontainers.image.ref.name": reference}}],
    })
    .to_string();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha256(b).trim_start_matches("sha256:"));
    let (mblob, cblob, lblob) = (
        blob(manifest.as_bytes()),
        blob(config.as_bytes()),
        blob(&layer),
    );
    let outer = tar_of(&[
        ("oci-layout", 0o644, br#"{"imageLayoutVersion":"1.0.0"}"#),
        ("index.json", 0o644, index.as_bytes()),
        (&mblob, 0o644, manifest.as_bytes()),
        (&cblob, 0o644, config.as_bytes()),
        (&lblob, 0o644, &layer),
    ])?;
    let path = dir.join("pause.oci.tar");
    std::fs::write(&path, outer)?;
    Ok(path)
}
