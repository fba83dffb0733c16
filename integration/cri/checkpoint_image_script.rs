//! hack/checkpoint-image.sh (a checkpoint OCI image from an archive without buildah, for nodes that have bosun but no buildah): its OCI layout tar imports with `bosun image import`, and a CreateContainer naming the image takes the restore path (here: refused for CRIU's reason, not created as a plain image).

use std::path::Path;
use std::process::Command;

use anyhow::{ensure, Context, Result};
use tonic::Code;

use crate::support::cri::{self, NEEDS};
use crate::support::images::cli_ok;
use crate::support::{repo_root, scratch, trial, Scenario};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::checkpoint::checkpoint_image_script_builds_an_image_bosun_takes_for_a_checkpoint",
        NEEDS,
        script_image,
    )]
}

/// A checkpoint archive's members, hand-made (no CRIU): what CreateContainer checks first.
fn hand_archive(path: &Path, image: &str) -> Result<()> {
    let config = serde_json::to_vec(&serde_json::json!({
        "id": "0123456789abcdef", "name": "counter", "rootfsImage": image,
        "rootfsImageName": image, "rootfsImageRef": "", "runtime": "runc",
    }))?;
    let spec = serde_json::to_vec(&serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"terminal": false, "cwd": "/", "args": ["sh", "-c", "sleep 1"],
            "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "mounts": [{"destination": "/proc", "type": "proc", "source": "proc"}],
    }))?;
    let mut tar = tar::Builder::new(std::fs::File::create(path)?);
    for (name, data) in [
        ("config.dump", &config[..]),
        ("spec.dump", &spec[..]),
        ("checkpoint/inventory.img", &b"inventory"[..]),
    ] {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_uid(0);
        h.set_gid(0);
        h.set_mtime(0);
        tar.append_data(&mut h, name, data)?;
    }
    tar.finish()?;
    Ok(())
}

fn script_image() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let archive = dir.path().join("counter.tar");
        hand_archive(&archive, &s.image("busybox"))?;
        let out = dir.path().join("counter-checkpoint.oci.tar");
        let run = Command::new("sh")
            .arg(repo_root().join("hack/checkpoint-image.sh"))
            .arg(&archive)
            .arg("counter")
            .arg(&out)
            .output()
            .context("run hack/checkpoint-image.sh")?;
        ensure!(
            run.status.success(),
            "checkpoint-image.sh: {}",
            String::from_utf8_lossy(&run.stderr)
        );
        let image = "localhost/counter-checkpoint:latest";
        cli_ok(
            &s.daemon,
            &[
                "image",
                "import",
                &out.display().to_string(),
                "--tag",
                image,
            ],
        )?;
        let pod = s.pod(s.pod_config("ck-script")).await?;
        let c = pod.container("counter", image).build();
        let before = s.list_containers(None).await?.len();
        let info = cri::status_info(&mut s.rt.clone(), "checkpoint").await?;
        let r = cri::try_create(&mut s.rt.clone(), &pod, &c).await;
        if info["available"] == true {
            // The lane: CRIU would restore this hand-made archive's nothing; that the image is
            // taken for a checkpoint is what matters here (a plain image creates).
            ensure!(
                r.as_ref().err().is_none_or(|e| e.code() != Code::NotFound),
                "{r:?}"
            );
        } else {
            let why = info["message"].as_str().unwrap_or_default();
            let err = r
                .err()
                .context("created from a checkpoint image without CRIU")?;
            ensure!(
                err.code() == Code::FailedPrecondition && err.message().contains(why),
                "the script's image was not taken for a checkpoint: {err:?}"
            );
            ensure!(
                s.list_containers(None).await?.len() == before,
                "a container was created"
            );
        }
        Ok(())
    })
}
