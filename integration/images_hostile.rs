//! Hostile layers imported through the real daemon: nothing may be written outside the snapshot.

use std::path::Path;

use anyhow::{ensure, Context};
use sha2::{Digest as _, Sha256};

use crate::support::{scratch, trial, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "images_hostile::dotdot_entries_are_rejected",
            &[Need::Root],
            dotdot_entries_are_rejected,
        ),
        trial(
            "images_hostile::symlink_then_file_stays_inside",
            &[Need::Root],
            symlink_then_file_stays_inside,
        ),
        trial(
            "images_hostile::hardlink_out_of_the_layer_is_rejected",
            &[Need::Root],
            hardlink_out_of_the_layer_is_rejected,
        ),
        trial(
            "images_hostile::device_nodes_are_not_created",
            &[Need::Root],
            device_nodes_are_not_created,
        ),
    ]
}

/// One raw ustar entry: the name is written as given, so `..` and absolute names get through.
fn entry(name: &str, kind: u8, data: &[u8], link: &str, mode: u32) -> Vec<u8> {
    let mut h = [0u8; 512];
    h[..name.len()].copy_from_slice(name.as_bytes());
    let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
        let s = format!("{:0width$o}\0", v, width = len - 1);
        h[at..at + len].copy_from_slice(s.as_bytes());
    };
    octal(&mut h, 100, 8, mode as u64);
    octal(&mut h, 108, 8, 0);
    octal(&mut h, 116, 8, 0);
    octal(&mut h, 124, 12, data.len() as u64);
    octal(&mut h, 136, 12, 1_700_000_000);
    h[156] = kind;
    h[157..157 + link.len()].copy_from_slice(link.as_bytes());
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    if kind == b'3' || kind == b'4' {
        octal(&mut h, 329, 8, 1);
        octal(&mut h, 337, 8, 3);
    }
    h[148..156].copy_from_slice(b"        ");
    let sum: u32 = h.iter().map(|b| *b as u32).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    let mut out = h.to_vec();
    out.extend_from_slice(data);
    out.resize(out.len().div_ceil(512) * 512, 0);
    out
}

fn file(name: &str, data: &[u8]) -> Vec<u8> {
    entry(name, b'0', data, "", 0o644)
}

fn finish(entries: Vec<Vec<u8>>) -> Vec<u8> {
    let mut t: Vec<u8> = entries.concat();
    t.extend_from_slice(&[0u8; 1024]);
    t
}

fn sha(b: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(b)))
}

/// Writes an OCI layout tar holding one image made of `layer` (uncompressed) and returns its path.
fn oci_archive(dir: &Path, layer: &[u8]) -> anyhow::Result<std::path::PathBuf> {
    let layer_digest = sha(layer);
    let config = serde_json::json!({
        "architecture": "amd64", "os": "linux", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
    })
    .to_string();
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": sha(config.as_bytes()), "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_digest, "size": layer.len()}],
    })
    .to_string();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": sha(manifest.as_bytes()),
            "size": manifest.len(), "annotations": {"org.opencontainers.image.ref.name": "hostile.test/evil:1"}}],
    })
    .to_string();
    let blob = |b: &[u8]| format!("blobs/sha256/{}", sha(b).trim_start_matches("sha256:"));
    let outer = finish(vec![
        file("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#),
        file("index.json", index.as_bytes()),
        file(&blob(manifest.as_bytes()), manifest.as_bytes()),
        file(&blob(config.as_bytes()), config.as_bytes()),
        file(&blob(layer), layer),
    ]);
    let path = dir.join("hostile.oci.tar");
    std::fs::write(&path, outer)?;
    Ok(path)
}

/// Imports `layer` and returns the CLI's result; checks the store has no partial state afterwards.
fn import(d: &Daemon, layer: Vec<u8>) -> anyhow::Result<Result<String, String>> {
    let path = oci_archive(d.dir(), &layer)?;
    let out = d.cli(&["image", "import", &path.display().to_string()])?;
    let snaps: Vec<String> = std::fs::read_dir(d.root().join("snapshots"))
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    if !out.status.success() {
        ensure!(
            snaps.is_empty(),
            "a rejected layer must leave nothing: {snaps:?}"
        );
        let listed = d.cli(&["image", "ls", "-q"])?;
        ensure!(
            String::from_utf8_lossy(&listed.stdout).trim().is_empty(),
            "no image from a rejected layer"
        );
        return Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// A directory outside the daemon's root that must stay exactly as it is.
struct Sentinel {
    dir: tempfile::TempDir,
}

impl Sentinel {
    fn new() -> anyhow::Result<Sentinel> {
        let dir = scratch()?;
        std::fs::write(dir.path().join("secret"), b"host secret")?;
        Ok(Sentinel { dir })
    }
    fn path(&self) -> &Path {
        self.dir.path()
    }
    fn untouched(&self) -> anyhow::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let names: Vec<_> = std::fs::read_dir(self.path())?
            .flatten()
            .map(|e| e.file_name())
            .collect();
        ensure!(
            names.len() == 1,
            "something was written outside the layer: {names:?}"
        );
        let m = std::fs::metadata(self.path().join("secret"))?;
        ensure!(m.nlink() == 1, "the host file gained a hard link");
        ensure!(std::fs::read(self.path().join("secret"))? == b"host secret");
        Ok(())
    }
}

/// `../` climbs back up to the sentinel from the snapshot dir, however deep the root is.
fn climb(to: &Path) -> String {
    format!(
        "{}{}",
        "../".repeat(16),
        to.display().to_string().trim_start_matches('/')
    )
}

fn dotdot_entries_are_rejected() -> anyhow::Result<()> {
    let s = Sentinel::new()?;
    let d = Daemon::start("")?;
    for name in [
        climb(&s.path().join("pwned")),
        "a/../../escape".to_string(),
        "../escape".to_string(),
    ] {
        let res = import(&d, finish(vec![file(&name, b"x")]))?;
        let err = res
            .err()
            .with_context(|| format!("{name} must be rejected"))?;
        ensure!(
            err.contains(&name),
            "error must name the entry {name:?}: {err}"
        );
        s.untouched()?;
    }
    ensure!(!d
        .root()
        .parent()
        .map(|p| p.join("escape").exists())
        .unwrap_or(false));
    Ok(())
}

fn symlink_then_file_stays_inside() -> anyhow::Result<()> {
    let s = Sentinel::new()?;
    let d = Daemon::start("")?;
    let abs = s.path().display().to_string();
    let cases = [
        vec![
            entry("evil", b'2', b"", &abs, 0o777),
            file("evil/pwned", b"x"),
        ],
        vec![
            entry("up", b'2', b"", &climb(s.path()), 0o777),
            file("up/pwned", b"x"),
        ],
        vec![
            entry("dir", b'5', b"", "", 0o755),
            entry("dir/l", b'2', b"", "../../../../../../../../", 0o777),
            file("dir/l/tmp/pwned", b"x"),
        ],
    ];
    for (i, layer) in cases.into_iter().enumerate() {
        let res = import(&d, finish(layer))?;
        // Rejecting the entry or resolving the link inside the layer are both safe; writing
        // through it is not.
        s.untouched()
            .with_context(|| format!("case {i}: {res:?}"))?;
        if let Ok(out) = &res {
            let id = out
                .split_whitespace()
                .nth(1)
                .unwrap_or_default()
                .to_string();
            let _ = d.cli(&["image", "rm", &id]);
        }
    }
    Ok(())
}

fn hardlink_out_of_the_layer_is_rejected() -> anyhow::Result<()> {
    let s = Sentinel::new()?;
    let d = Daemon::start("")?;
    let secret = s.path().join("secret");
    for target in [climb(&secret), secret.display().to_string()] {
        let res = import(&d, finish(vec![entry("hl", b'1', b"", &target, 0o644)]))?;
        let err = res
            .err()
            .with_context(|| format!("hard link to {target} must be rejected"))?;
        ensure!(err.contains("hl"), "error must name the entry: {err}");
        s.untouched()?;
    }
    Ok(())
}

fn device_nodes_are_not_created() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    let layer = finish(vec![
        entry("dev/sda", b'4', b"", "", 0o600),
        entry("dev/mem", b'3', b"", "", 0o600),
        file("ok", b"fine"),
    ]);
    let out = import(&d, layer)?
        .map_err(|e| anyhow::anyhow!("device nodes are skipped, not fatal: {e}"))?;
    ensure!(out.contains("imported"), "{out}");
    let snaps: Vec<_> = std::fs::read_dir(d.root().join("snapshots"))?
        .flatten()
        .collect();
    ensure!(snaps.len() == 1, "{snaps:?}");
    let fs = snaps[0].path().join("fs");
    ensure!(fs.join("ok").exists(), "regular file unpacked");
    ensure!(
        fs.join("dev/sda").symlink_metadata().is_err()
            && fs.join("dev/mem").symlink_metadata().is_err(),
        "device nodes must not be created"
    );
    Ok(())
}
