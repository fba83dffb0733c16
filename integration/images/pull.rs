//! PullImage from a real registry: by tag, digest and index; a layered image's merged view;
//! basic auth, a mirror, a TLS registry with a configured CA; concurrent pulls sharing one
//! download.

use anyhow::{ensure, Context};
use bosun::proto::runtime::v1 as pb;

use crate::support::images::{content_size, leftovers, pull, spec, status, ALL};
use crate::support::proxy::SlowProxy;
use crate::support::registry::USER;
use crate::support::{block_on, image_field, images_dir, images_manifest, trial, Daemon, Registry};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "images::pull_by_tag_digest_and_index",
            ALL,
            pull_by_tag_digest_and_index,
        ),
        trial(
            "images::layered_image_unpacks_to_the_expected_merged_view",
            ALL,
            layered_image_unpacks_to_the_expected_merged_view,
        ),
        trial("images::pull_with_basic_auth", ALL, pull_with_basic_auth),
        trial("images::pull_through_a_mirror", ALL, pull_through_a_mirror),
        trial(
            "images::concurrent_pulls_share_one_download",
            ALL,
            concurrent_pulls_share_one_download,
        ),
        trial(
            "images::tls_registry_with_a_configured_ca",
            ALL,
            tls_registry_with_a_configured_ca,
        ),
    ]
}

fn pull_by_tag_digest_and_index() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox", "index", "docker-list", "docker-schema2"])?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        let busybox_id = image_field("busybox", "image_id");
        let r = pull(&mut c, &reg.image("busybox"), None).await?;
        ensure!(r == busybox_id, "image_ref {r} != image id {busybox_id}");
        let img = status(&mut c, &reg.image("busybox"))
            .await?
            .context("pulled image not found")?;
        ensure!(
            img.repo_tags == vec![reg.image("busybox")],
            "{:?}",
            img.repo_tags
        );
        let digest_ref = format!(
            "{}/bosun/busybox@{}",
            reg.host(),
            image_field("busybox", "manifest_digest")
        );
        ensure!(
            img.repo_digests == vec![digest_ref.clone()],
            "{:?}",
            img.repo_digests
        );
        ensure!(
            img.size == content_size("busybox"),
            "size {} != {}",
            img.size,
            content_size("busybox")
        );
        ensure!(
            img.uid.is_none() && img.username.is_empty(),
            "busybox has no USER: {img:?}"
        );

        let r = pull(&mut c, &digest_ref, None).await?;
        ensure!(r == busybox_id, "pull by digest gave {r}");

        let r = pull(&mut c, &reg.image("index"), None).await?;
        ensure!(
            r == image_field("index", "native_config_digest"),
            "index picked {r}, not the host platform"
        );
        let img = status(&mut c, &reg.image("index"))
            .await?
            .context("index image")?;
        let want = format!(
            "{}/bosun/index@{}",
            reg.host(),
            image_field("index", "manifest_digest")
        );
        ensure!(
            img.repo_digests.contains(&want),
            "repo digest of an index pull is the index: {:?}",
            img.repo_digests
        );

        let r = pull(&mut c, &reg.image("docker-list"), None).await?;
        ensure!(
            r == image_field("docker-list", "native_config_digest"),
            "docker list picked {r}"
        );
        let r = pull(&mut c, &reg.image("docker-schema2"), None).await?;
        ensure!(
            r == image_field("docker-schema2", "image_id"),
            "docker schema2 gave {r}"
        );
        ensure!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
        Ok(())
    })
}

/// Mounts the image's snapshots as overlay lowerdirs (as container creation will) and checks
/// the merged tree: whiteouts, opaque dirs, hard links, symlinks, modes, owners and xattrs.
fn layered_image_unpacks_to_the_expected_merged_view() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["layered"])?;
    let d = Daemon::start("")?;
    let info = block_on(async {
        let mut c = d.images().await?;
        pull(&mut c, &reg.image("layered"), None).await?;
        let st = c
            .image_status(pb::ImageStatusRequest {
                image: spec(&reg.image("layered")),
                verbose: true,
            })
            .await?;
        let info = st
            .into_inner()
            .info
            .get("info")
            .cloned()
            .context("verbose info")?;
        Ok::<_, anyhow::Error>(serde_json::from_str::<serde_json::Value>(&info)?)
    })?;
    let chains: Vec<String> = info["chainIDs"]
        .as_array()
        .context("chainIDs")?
        .iter()
        .filter_map(|c| {
            c.as_str()
                .map(|s| s.trim_start_matches("sha256:").to_string())
        })
        .collect();
    ensure!(chains.len() == 3, "three layers: {chains:?}");
    let lower: Vec<String> = chains
        .iter()
        .rev()
        .map(|c| {
            d.root()
                .join("snapshots")
                .join(c)
                .join("fs")
                .display()
                .to_string()
        })
        .collect();
    let mnt = d.dir().join("merged");
    std::fs::create_dir_all(&mnt)?;
    let st = std::process::Command::new("mount")
        .args([
            "-t",
            "overlay",
            "overlay",
            "-o",
            &format!("lowerdir={}", lower.join(":")),
        ])
        .arg(&mnt)
        .status()?;
    ensure!(st.success(), "overlay mount failed");
    let _umount = Unmount(mnt.clone());
    check_merged(&mnt)
}

struct Unmount(std::path::PathBuf);

impl Drop for Unmount {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount").arg(&self.0).status();
    }
}

fn check_merged(mnt: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let exp = &images_manifest()["layered"]["expected_data"];
    for p in exp["paths"].as_array().context("paths")? {
        let p = p.as_str().context("path")?;
        ensure!(
            mnt.join(&p[1..]).symlink_metadata().is_ok(),
            "{p} missing in merged view"
        );
    }
    for p in exp["absent"].as_array().context("absent")? {
        let p = p.as_str().context("path")?;
        ensure!(
            mnt.join(&p[1..]).symlink_metadata().is_err(),
            "{p} must be whited out"
        );
    }
    let mut names: Vec<String> = std::fs::read_dir(mnt.join("data/sub"))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    ensure!(
        names == vec!["y".to_string()],
        "opaque dir must hide lower entries: {names:?}"
    );
    let a = mnt.join("data/a");
    ensure!(std::fs::read_to_string(&a)? == "a\n");
    ensure!(
        std::fs::metadata(&a)?.ino() == std::fs::metadata(mnt.join("data/hl"))?.ino(),
        "hard link must share the inode"
    );
    ensure!(std::fs::read_link(mnt.join("data/link"))?.to_str() == Some("a"));
    let suid = std::fs::metadata(mnt.join("data/suid"))?;
    ensure!(
        suid.mode() & 0o7777 == 0o4755,
        "setuid lost: {:o}",
        suid.mode()
    );
    let owned = std::fs::metadata(mnt.join("data/owned"))?;
    ensure!(owned.uid() == 1000 && owned.gid() == 1000, "owner lost");
    let out = std::process::Command::new("getfattr")
        .args(["--only-values", "-n", "user.bosun"])
        .arg(&a)
        .output();
    if let Ok(out) = out {
        if out.status.success() {
            ensure!(
                out.stdout == b"yes",
                "xattr lost: {:?}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    ensure!(
        std::fs::metadata(mnt.join("bin/busybox")).is_ok() || mnt.join("usr/bin/busybox").exists(),
        "base layer missing"
    );
    Ok(())
}

fn pull_with_basic_auth() -> anyhow::Result<()> {
    let reg = Registry::start(true)?;
    reg.push(&["busybox"])?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        let image = reg.image("busybox");
        let err = pull(&mut c, &image, None)
            .await
            .expect_err("no credentials must fail");
        ensure!(
            matches!(
                err.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ),
            "{err:?}"
        );
        ensure!(
            err.message().contains(&reg.host()),
            "error must name the registry: {err:?}"
        );
        let wrong = pb::AuthConfig {
            username: USER.0.into(),
            password: "nope".into(),
            ..Default::default()
        };
        let err = pull(&mut c, &image, Some(wrong))
            .await
            .expect_err("wrong password must fail");
        ensure!(
            matches!(
                err.code(),
                tonic::Code::PermissionDenied | tonic::Code::Unauthenticated
            ),
            "{err:?}"
        );

        let good = pb::AuthConfig {
            username: USER.0.into(),
            password: USER.1.into(),
            ..Default::default()
        };
        ensure!(pull(&mut c, &image, Some(good)).await? == image_field("busybox", "image_id"));
        c.remove_image(pb::RemoveImageRequest {
            image: spec(&image),
        })
        .await?;

        use base64::Engine as _;
        let auth =
            base64::engine::general_purpose::STANDARD.encode(format!("{}:{}", USER.0, USER.1));
        let b64 = pb::AuthConfig {
            auth,
            ..Default::default()
        };
        ensure!(pull(&mut c, &image, Some(b64)).await? == image_field("busybox", "image_id"));
        Ok(())
    })
}

fn pull_through_a_mirror() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    // The origin name does not resolve: only the mirror can serve the pull.
    let d = Daemon::start(&format!(
        "[registry.hosts.\"mirror-origin.invalid\"]\nmirrors = [\"http://127.0.0.1:1\", \"http://{}\"]\n",
        reg.host()
    ))?;
    block_on(async {
        let mut c = d.images().await?;
        let r = pull(&mut c, "mirror-origin.invalid/bosun/busybox:latest", None).await?;
        ensure!(r == image_field("busybox", "image_id"));
        let img = status(&mut c, "mirror-origin.invalid/bosun/busybox:latest")
            .await?
            .context("mirrored image")?;
        ensure!(
            img.repo_tags == vec!["mirror-origin.invalid/bosun/busybox:latest".to_string()],
            "{:?}",
            img.repo_tags
        );
        Ok(())
    })
}

fn concurrent_pulls_share_one_download() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["big"])?;
    let proxy = SlowProxy::start(reg.host(), 32 << 20)?;
    let d = Daemon::start("")?;
    let image = format!("{}/bosun/big:latest", proxy.host());
    block_on(async {
        let mut a = d.images().await?;
        let mut b = d.images().await?;
        let (ra, rb) = tokio::join!(pull(&mut a, &image, None), pull(&mut b, &image, None));
        ensure!(ra? == rb?, "both pulls give the same image");
        Ok(())
    })?;
    let sent = proxy.sent.load(std::sync::atomic::Ordering::Relaxed);
    let total = content_size("big");
    ensure!(
        sent < total + total / 2,
        "two pulls moved {sent} bytes for a {total}-byte image: not shared"
    );
    Ok(())
}

fn tls_registry_with_a_configured_ca() -> anyhow::Result<()> {
    let reg = Registry::start_tls()?;
    // The registry only speaks HTTPS; the push trusts the throwaway CA explicitly.
    let out = std::process::Command::new("python3")
        .arg(crate::support::repo_root().join("hack/testimages.py"))
        .args(["push", "--dir"])
        .arg(images_dir())
        .args(["--registry", &reg.host(), "--only", "busybox", "--tls-ca"])
        .arg(reg.ca_file())
        .output()?;
    ensure!(
        out.status.success(),
        "push over TLS: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let untrusted = Daemon::start("")?;
    let trusted = Daemon::start(&format!(
        "[registry.hosts.\"{}\"]\nca_file = \"{}\"\n",
        reg.host(),
        reg.ca_file().display()
    ))?;
    block_on(async {
        let err = pull(&mut untrusted.images().await?, &reg.image("busybox"), None)
            .await
            .expect_err("an unknown CA must not be trusted");
        ensure!(err.message().contains(&reg.host()), "{err:?}");
        let r = pull(&mut trusted.images().await?, &reg.image("busybox"), None).await?;
        ensure!(r == image_field("busybox", "image_id"));
        Ok(())
    })
}
