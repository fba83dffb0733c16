//! ImageService over the socket: pulls (tag, digest, index, auth, mirror), import, list/status/remove, errors, crashes.

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context};
use bosun::proto::bosun::v1 as api;
use bosun::proto::runtime::v1 as pb;
use tonic::transport::Channel;

use crate::support::proxy::SlowProxy;
use crate::support::registry::USER;
use crate::support::{
    block_on, du, image_field, images_dir, images_manifest, trial, Daemon, Need, Registry,
};

const ALL: &[Need] = &[Need::Root, Need::Registry, Need::Images];

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
            "images::import_oci_and_docker_archives_with_the_cli",
            ALL,
            import_oci_and_docker_archives_with_the_cli,
        ),
        trial(
            "images::list_status_and_remove_semantics",
            ALL,
            list_status_and_remove_semantics,
        ),
        trial(
            "images::bad_references_unknown_images_and_unreachable_registries",
            ALL,
            bad_references_unknown_images_and_unreachable_registries,
        ),
        trial(
            "images::tampered_blob_is_rejected_and_nothing_is_stored",
            ALL,
            tampered_blob_is_rejected_and_nothing_is_stored,
        ),
        trial(
            "images::kill9_mid_pull_then_pull_again",
            ALL,
            kill9_mid_pull_then_pull_again,
        ),
        trial(
            "images::image_fs_info_follows_pull_and_remove",
            ALL,
            image_fs_info_follows_pull_and_remove,
        ),
        trial(
            "images::concurrent_pulls_share_one_download",
            ALL,
            concurrent_pulls_share_one_download,
        ),
        trial(
            "images::startup_gc_takes_stale_orphans_and_keeps_fresh_ones",
            &[Need::Root],
            startup_gc_takes_stale_orphans_and_keeps_fresh_ones,
        ),
        trial(
            "images::tls_registry_with_a_configured_ca",
            ALL,
            tls_registry_with_a_configured_ca,
        ),
    ]
}

fn spec(image: &str) -> Option<pb::ImageSpec> {
    Some(pb::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    })
}

async fn pull(
    c: &mut pb::image_service_client::ImageServiceClient<Channel>,
    image: &str,
    auth: Option<pb::AuthConfig>,
) -> Result<String, tonic::Status> {
    c.pull_image(pb::PullImageRequest {
        image: spec(image),
        auth,
        sandbox_config: None,
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn status(
    c: &mut pb::image_service_client::ImageServiceClient<Channel>,
    image: &str,
) -> anyhow::Result<Option<pb::Image>> {
    Ok(c.image_status(pb::ImageStatusRequest {
        image: spec(image),
        verbose: false,
    })
    .await?
    .into_inner()
    .image)
}

fn content_size(name: &str) -> u64 {
    let m = &images_manifest()[name];
    let layers: u64 = m["layers"]
        .as_array()
        .map(|ls| ls.iter().filter_map(|l| l["size"].as_u64()).sum())
        .unwrap_or(0);
    m["manifest_size"].as_u64().unwrap_or(0) + m["config_size"].as_u64().unwrap_or(0) + layers
}

/// Files in the store that only a crash or a failed write could leave.
fn leftovers(d: &Daemon) -> Vec<String> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(d.root().join("content/ingest")) {
        out.extend(
            rd.flatten()
                .map(|e| format!("ingest/{}", e.file_name().to_string_lossy())),
        );
    }
    if let Ok(rd) = std::fs::read_dir(d.root().join("snapshots")) {
        out.extend(
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.'))
                .map(|n| format!("snapshots/{n}")),
        );
    }
    out
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

fn cli_ok(d: &Daemon, args: &[&str]) -> anyhow::Result<String> {
    let out = d.cli(args)?;
    if !out.status.success() {
        bail!(
            "bosun {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn import_oci_and_docker_archives_with_the_cli() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    let dir = images_dir();
    let oci = dir.join("busybox.oci.tar").display().to_string();
    let out = cli_ok(
        &d,
        &[
            "image",
            "import",
            "--base-name",
            "docker.io/library/busybox",
            &oci,
        ],
    )?;
    ensure!(out.contains(&image_field("busybox", "image_id")), "{out}");
    let docker = dir.join("entrypoint.docker.tar").display().to_string();
    cli_ok(&d, &["image", "import", &docker])?;
    let index = dir.join("index.oci.tar").display().to_string();
    cli_ok(
        &d,
        &[
            "image",
            "import",
            "--base-name",
            "example.test/multi",
            &index,
        ],
    )?;
    block_on(async {
        let mut c = d.images().await?;
        let img = status(&mut c, "busybox")
            .await?
            .context("busybox imported")?;
        ensure!(img.id == image_field("busybox", "image_id"));
        ensure!(
            img.repo_tags
                .contains(&"docker.io/library/busybox:latest".to_string()),
            "{:?}",
            img.repo_tags
        );
        let img = status(&mut c, "bosun.test/entrypoint:latest")
            .await?
            .context("docker archive imported")?;
        ensure!(
            img.id == image_field("entrypoint", "image_id"),
            "docker archive id {}",
            img.id
        );
        let img = status(&mut c, "example.test/multi:latest")
            .await?
            .context("index imported")?;
        ensure!(
            img.id == image_field("index", "native_config_digest"),
            "index import picked {}",
            img.id
        );
        // The index's native manifest is the busybox image: one image, both names.
        ensure!(img.repo_tags.len() == 2, "{:?}", img.repo_tags);
        Ok(())
    })?;
    let ls = cli_ok(&d, &["image", "ls"])?;
    ensure!(
        ls.contains("docker.io/library/busybox") && ls.contains("bosun.test/entrypoint"),
        "{ls}"
    );
    let inspect = cli_ok(&d, &["image", "inspect", "bosun.test/entrypoint"])?;
    ensure!(
        inspect.contains("\"Entrypoint\"") && inspect.contains("FOO=bar"),
        "{inspect}"
    );
    cli_ok(&d, &["image", "rm", "bosun.test/entrypoint"])?;
    let ls = cli_ok(&d, &["image", "ls"])?;
    ensure!(!ls.contains("bosun.test/entrypoint"), "{ls}");
    Ok(())
}

fn list_status_and_remove_semantics() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    let dir = images_dir();
    let oci = dir.join("busybox.oci.tar").display().to_string();
    cli_ok(
        &d,
        &[
            "image",
            "import",
            "--tag",
            "example.test/a:1",
            "--tag",
            "example.test/b:2",
            &oci,
        ],
    )?;
    let nonroot = dir.join("nonroot.oci.tar").display().to_string();
    cli_ok(
        &d,
        &[
            "image",
            "import",
            "--tag",
            "example.test/nonroot:1",
            &nonroot,
        ],
    )?;
    let numeric = dir.join("numeric-user.oci.tar").display().to_string();
    cli_ok(
        &d,
        &[
            "image",
            "import",
            "--tag",
            "example.test/numeric:1",
            &numeric,
        ],
    )?;
    block_on(async {
        let mut c = d.images().await?;
        let all = c
            .list_images(pb::ListImagesRequest::default())
            .await?
            .into_inner()
            .images;
        ensure!(all.len() == 3, "{all:?}");
        let img = all
            .iter()
            .find(|i| i.id == image_field("busybox", "image_id"))
            .context("busybox listed")?;
        ensure!(
            img.repo_tags
                == vec![
                    "example.test/a:1".to_string(),
                    "example.test/b:2".to_string()
                ]
        );
        let f = |s: &str| Some(pb::ImageFilter { image: spec(s) });
        let one = c
            .list_images(pb::ListImagesRequest {
                filter: f("example.test/b:2"),
            })
            .await?
            .into_inner()
            .images;
        ensure!(one.len() == 1 && one[0].id == img.id, "{one:?}");
        let none = c
            .list_images(pb::ListImagesRequest {
                filter: f("example.test/zzz:1"),
            })
            .await?
            .into_inner()
            .images;
        ensure!(none.is_empty());
        let streamed = c
            .stream_images(pb::StreamImagesRequest::default())
            .await?
            .into_inner()
            .message()
            .await?;
        ensure!(streamed.map(|m| m.images.len()) == Some(3), "StreamImages");

        let nr = status(&mut c, "example.test/nonroot:1")
            .await?
            .context("nonroot")?;
        ensure!(nr.username == "app" && nr.uid.is_none(), "{nr:?}");
        let nu = status(&mut c, "example.test/numeric:1")
            .await?
            .context("numeric")?;
        ensure!(
            nu.uid.map(|u| u.value) == Some(1000) && nu.username.is_empty(),
            "{nu:?}"
        );

        let absent = c
            .image_status(pb::ImageStatusRequest {
                image: spec("example.test/nope:1"),
                verbose: true,
            })
            .await?;
        ensure!(
            absent.into_inner().image.is_none(),
            "absent image → empty response"
        );

        // Removing by one tag removes the image with every tag; layers shared with another image stay.
        c.remove_image(pb::RemoveImageRequest {
            image: spec("example.test/a:1"),
        })
        .await?;
        ensure!(
            status(&mut c, "example.test/b:2").await?.is_none(),
            "every tag goes"
        );
        ensure!(status(&mut c, &img.id).await?.is_none());
        c.remove_image(pb::RemoveImageRequest {
            image: spec("example.test/a:1"),
        })
        .await?;
        c.remove_image(pb::RemoveImageRequest {
            image: spec(&img.id),
        })
        .await?;
        c.remove_image(pb::RemoveImageRequest {
            image: spec("never.test/x:1"),
        })
        .await?;
        ensure!(status(&mut c, "example.test/nonroot:1").await?.is_some());
        let snaps = std::fs::read_dir(d.root().join("snapshots"))?.count();
        ensure!(
            snaps >= 1,
            "nonroot's layer (shared with busybox) must survive"
        );
        let err = c
            .remove_image(pb::RemoveImageRequest { image: None })
            .await
            .expect_err("missing spec");
        ensure!(err.code() == tonic::Code::InvalidArgument);
        Ok(())
    })
}

fn bad_references_unknown_images_and_unreachable_registries() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        for bad in ["Foo:Bar", "busybox@sha256:zz", "a b", "busybox:"] {
            let err = pull(&mut c, bad, None).await.expect_err("bad reference");
            ensure!(err.code() == tonic::Code::InvalidArgument, "{bad}: {err:?}");
            ensure!(
                err.message().contains(bad),
                "error must name {bad:?}: {}",
                err.message()
            );
        }
        let err = pull(&mut c, "", None).await.expect_err("empty");
        ensure!(err.code() == tonic::Code::InvalidArgument, "{err:?}");

        let missing = reg.image("does-not-exist");
        let err = pull(&mut c, &missing, None)
            .await
            .expect_err("unknown image");
        ensure!(err.code() == tonic::Code::NotFound, "{err:?}");
        ensure!(err.message().contains("does-not-exist"), "{err:?}");

        let t = Instant::now();
        let err = pull(&mut c, "127.0.0.1:1/x/y:z", None)
            .await
            .expect_err("unreachable");
        ensure!(err.code() == tonic::Code::Unavailable, "{err:?}");
        ensure!(
            err.message().contains("127.0.0.1:1"),
            "must name the host: {err:?}"
        );
        ensure!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
        Ok(())
    })
}

fn tampered_blob_is_rejected_and_nothing_is_stored() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["layered"])?;
    let layer = images_manifest()["layered"]["layers"][1]["digest"]
        .as_str()
        .context("layer")?
        .to_string();
    let path = reg.blob_path(&layer);
    let mut bytes = std::fs::read(&path).with_context(|| format!("{}", path.display()))?;
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, bytes)?;
    let d = Daemon::start("")?;
    block_on(async {
        let mut c = d.images().await?;
        let err = pull(&mut c, &reg.image("layered"), None)
            .await
            .expect_err("tampered blob");
        ensure!(
            err.message().contains(&layer),
            "error must name the blob: {err:?}"
        );
        ensure!(
            status(&mut c, &reg.image("layered")).await?.is_none(),
            "no image from a tampered pull"
        );
        let hex = layer.trim_start_matches("sha256:");
        ensure!(
            !d.root().join("content/blobs/sha256").join(hex).exists(),
            "tampered blob stored"
        );
        // The other layers keep downloading after the failure (a retry reuses them); once they
        // settle, no partial file may remain and the good layers are stored verified.
        ensure!(
            crate::support::wait_until(20, || leftovers(&d).is_empty()),
            "{:?}",
            leftovers(&d)
        );
        let good = images_manifest()["layered"]["layers"][0]["digest"]
            .as_str()
            .context("layer 0")?;
        ensure!(d
            .root()
            .join("content/blobs/sha256")
            .join(good.trim_start_matches("sha256:"))
            .exists());
        Ok(())
    })
}

fn kill9_mid_pull_then_pull_again() -> anyhow::Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["big"])?;
    let proxy = SlowProxy::start(reg.host(), 4 << 20)?;
    let mut d = Daemon::start("")?;
    let slow_ref = format!("{}/bosun/big:latest", proxy.host());
    let socket = d.socket();
    let puller = std::thread::spawn(move || {
        let _ = block_on(async {
            let ch = bosun::cli::client::connect(&socket).await?;
            let mut c = pb::image_service_client::ImageServiceClient::new(ch);
            let _ = pull(&mut c, &slow_ref, None).await;
            Ok::<_, anyhow::Error>(())
        });
    });
    // Killed mid-pull once the small base layer is stored (verified): on a slow machine the
    // bytes the proxy sent can be ahead of what the daemon has written.
    let base_blob = images_manifest()["big"]["layers"][0]["digest"]
        .as_str()
        .map(|digest| {
            d.root()
                .join("content/blobs/sha256")
                .join(digest.trim_start_matches("sha256:"))
        })
        .context("base layer")?;
    ensure!(
        crate::support::wait_until(30, || proxy.sent.load(std::sync::atomic::Ordering::Relaxed)
            > 8 << 20
            && base_blob.exists()),
        "pull did not start, or the base layer was not stored"
    );
    d.kill9();
    let _ = puller.join();
    d.restart()?;
    ensure!(
        leftovers(&d).is_empty(),
        "restart must discard partial state: {:?}",
        leftovers(&d)
    );
    block_on(async {
        let mut c = d.images().await?;
        ensure!(
            c.list_images(pb::ListImagesRequest::default())
                .await?
                .into_inner()
                .images
                .is_empty(),
            "no half image"
        );
        // The small base layer finished before the kill: the next pull must reuse it.
        let base = images_manifest()["big"]["layers"][0]["digest"]
            .as_str()
            .context("base layer")?
            .to_string();
        let mut api = d.api().await?;
        let mut s = api
            .pull(api::PullRequest {
                image: reg.image("big"),
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut cached = Vec::new();
        let mut done = None;
        while let Some(p) = s.message().await? {
            if p.status == "cached" {
                cached.push(p.digest.clone());
            }
            if let Some(img) = p.image {
                done = Some(img.id);
            }
        }
        ensure!(
            done == Some(image_field("big", "image_id")),
            "second pull: {done:?}"
        );
        ensure!(
            cached.contains(&base),
            "verified blobs must be reused: cached {cached:?}"
        );
        ensure!(leftovers(&d).is_empty(), "{:?}", leftovers(&d));
        Ok(())
    })
}

fn image_fs_info_follows_pull_and_remove() -> anyhow::Result<()> {
    let d = Daemon::start("")?;
    let read = || -> anyhow::Result<(u64, u64)> {
        block_on(async {
            let r = d
                .images()
                .await?
                .image_fs_info(pb::ImageFsInfoRequest {})
                .await?
                .into_inner();
            let fs = r
                .image_filesystems
                .first()
                .context("image filesystem")?
                .clone();
            ensure!(fs.fs_id.map(|f| f.mountpoint) == Some(d.root().display().to_string()));
            Ok((
                fs.used_bytes.context("bytes")?.value,
                fs.inodes_used.context("inodes")?.value,
            ))
        })
    };
    let disk = || {
        let (b1, i1) = du(&d.root().join("content/blobs"));
        let (b2, i2) = du(&d.root().join("snapshots"));
        (b1 + b2, i1 + i2)
    };
    let (b0, i0) = read()?;
    let (db0, di0) = disk();
    let oci = images_dir().join("layered.oci.tar").display().to_string();
    cli_ok(
        &d,
        &["image", "import", "--tag", "example.test/layered:1", &oci],
    )?;
    let (b1, i1) = read()?;
    let (db1, di1) = disk();
    let (grew, disk_grew) = (b1 - b0, db1 - db0);
    // The store's bookkeeping (snapshot dirs, usage files) is a few blocks per layer.
    let slack = 64 * 1024;
    ensure!(grew > 3_000_000, "a 3 MB image must show: grew {grew}");
    ensure!(
        grew.abs_diff(disk_grew) <= slack,
        "reported growth {grew} vs du growth {disk_grew}"
    );
    ensure!(
        (i1 - i0).abs_diff(di1 - di0) <= 16,
        "inodes {} vs {}",
        i1 - i0,
        di1 - di0
    );
    cli_ok(&d, &["image", "rm", "example.test/layered:1"])?;
    // Removal is immediate; its blobs and snapshots are collected in the background.
    let mut last = (0, 0);
    let back = crate::support::wait_until(10, || {
        last = read().unwrap_or_default();
        last == (b0, i0)
    });
    ensure!(back, "after remove: {last:?} != {:?}", (b0, i0));
    block_on(async {
        let r = d
            .images()
            .await?
            .image_fs_info(pb::ImageFsInfoRequest {})
            .await?
            .into_inner();
        let cfs = r
            .container_filesystems
            .first()
            .context("container filesystem")?;
        ensure!(
            cfs.fs_id.as_ref().map(|f| f.mountpoint.clone())
                == Some(d.root().display().to_string())
        );
        Ok(())
    })?;
    let _ = (db0, di0);
    Ok(())
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

fn startup_gc_takes_stale_orphans_and_keeps_fresh_ones() -> anyhow::Result<()> {
    let mut d = Daemon::start("")?;
    d.terminate();
    let blobs = d.root().join("content/blobs/sha256");
    let put = |data: &[u8], age: Duration| -> anyhow::Result<std::path::PathBuf> {
        use sha2::Digest as _;
        let p = blobs.join(hex::encode(sha2::Sha256::digest(data)));
        std::fs::write(&p, data)?;
        std::fs::File::options()
            .write(true)
            .open(&p)?
            .set_modified(std::time::SystemTime::now() - age)?;
        Ok(p)
    };
    // An interrupted pull's verified layer: kept for a retry. One from two hours ago: collected.
    let fresh = put(b"fresh orphan", Duration::from_secs(60))?;
    let stale = put(b"stale orphan", Duration::from_secs(7200))?;
    d.restart()?;
    ensure!(
        crate::support::wait_until(10, || !stale.exists()),
        "stale orphan blob must be collected"
    );
    ensure!(
        fresh.exists(),
        "a fresh orphan must survive for a retried pull"
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
