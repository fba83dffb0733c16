//! The image store: OCI and Docker archives imported with the CLI, ListImages/ImageStatus/
//! RemoveImage semantics, ImageFsInfo following pulls and removals, the startup GC of stale
//! orphans.

use std::time::Duration;

use anyhow::{ensure, Context};
use bosun::proto::runtime::v1 as pb;

use crate::support::images::{cli_ok, spec, status, ALL};
use crate::support::{block_on, du, image_field, images_dir, trial, Daemon, Need};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
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
            "images::image_fs_info_follows_pull_and_remove",
            ALL,
            image_fs_info_follows_pull_and_remove,
        ),
        trial(
            "images::startup_gc_takes_stale_orphans_and_keeps_fresh_ones",
            &[Need::Root],
            startup_gc_takes_stale_orphans_and_keeps_fresh_ones,
        ),
    ]
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
