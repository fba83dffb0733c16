//! containerd's `ctr` as kind and CI scripts run it, through a link named `ctr` to the bosun under test: import (file, stdin, docker and OCI archives, several images), ls, tag, rm, pull, version; then CRI sees the result. And containerd's socket path served beside bosun's.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::ctr::Ctr;
use crate::support::daemon::BOSUN;
use crate::support::registry::Registry;
use crate::support::{
    block_on, crictl_bin, image_field, images_dir, repo_root, trial, Daemon, Need,
};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "ctr::import_ls_tag_rm_from_files_and_stdin_then_cri_runs_it",
            NEEDS,
            import_ls_tag_rm,
        ),
        trial(
            "ctr::a_multi_image_archive_imports_every_image",
            &[Need::Root, Need::Images],
            multi_image_archive,
        ),
        trial(
            "ctr::archives_skopeo_writes_import_by_their_names",
            &[Need::Root, Need::Images, Need::Skopeo],
            skopeo_archives,
        ),
        trial(
            "ctr::pull_with_plain_http_from_a_local_registry",
            &[Need::Root, Need::Images, Need::Registry],
            pull_plain_http,
        ),
        trial(
            "ctr::refusals_and_version",
            &[Need::Root, Need::Images],
            refusals_and_version,
        ),
        trial(
            "ctr::kubeadm_preflight_offline_on_containerds_socket_with_contrib_crictl_yaml",
            &[Need::Root, Need::Images, Need::Crictl],
            kubeadm_preflight_offline,
        ),
        trial(
            "ctr::extra_sockets_serve_cri_and_ctr_on_containerds_path",
            &[Need::Root, Need::Images],
            extra_sockets,
        ),
    ]
}

fn archive(name: &str) -> PathBuf {
    images_dir().join(name)
}

/// CRI ImageStatus's image id for `name`, if it exists.
fn cri_id(d: &Daemon, name: &str) -> Result<Option<String>> {
    block_on(async {
        let r = d
            .images()
            .await?
            .image_status(pb::ImageStatusRequest {
                image: Some(pb::ImageSpec {
                    image: name.into(),
                    ..Default::default()
                }),
                verbose: false,
            })
            .await?
            .into_inner();
        Ok(r.image.map(|i| i.id))
    })
}

fn import_ls_tag_rm() -> Result<()> {
    let d = cri::daemon()?;
    let ctr = Ctr::new(&d)?;
    let busybox_id = image_field("busybox", "image_id");
    // kind's `kind load docker-image`, verbatim: a docker-archive on stdin.
    let out = ctr.ok(
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        Some(&archive("busybox.docker.tar")),
    )?;
    ensure!(
        out.contains("unpacking bosun.test/busybox:latest (sha256:") && out.contains("...done"),
        "{out}"
    );
    ensure!(
        out.lines().any(|l| l.starts_with("unpacking docker.io/library/import-")
            && l.contains("@sha256:")),
        "--digests names the image import-<date>@<digest>: {out}"
    );
    ensure!(cri_id(&d, "bosun.test/busybox:latest")?.as_deref() == Some(busybox_id.as_str()));
    // An OCI archive from a file: a bare ref name under --base-name.
    let out = ctr.ok(
        &format!(
            "-n k8s.io images import --base-name example.test/entry {}",
            archive("entrypoint.oci.tar").display()
        ),
        None,
    )?;
    ensure!(
        out.contains("unpacking example.test/entry:latest (sha256:"),
        "{out}"
    );
    // An OCI archive on stdin, with an index: this node's platform is kept.
    let out = ctr.ok(
        "-n k8s.io images import --base-name example.test/multi -",
        Some(&archive("index.oci.tar")),
    )?;
    ensure!(
        out.contains(&format!(
            "unpacking example.test/multi:latest ({})",
            image_field("index", "manifest_digest")
        )),
        "the name points at the index: {out}"
    );
    ensure!(
        cri_id(&d, "example.test/multi:latest")?.as_deref()
            == Some(image_field("index", "native_config_digest").as_str())
    );
    // A docker archive from a file, in the default namespace (the same store).
    ctr.ok(
        &format!(
            "images import {}",
            archive("entrypoint.docker.tar").display()
        ),
        None,
    )?;
    let names = ctr.names()?;
    for want in [
        "bosun.test/busybox:latest",
        "bosun.test/entrypoint:latest",
        "example.test/entry:latest",
        "example.test/multi:latest",
    ] {
        ensure!(names.iter().any(|n| n == want), "{want} not in {names:?}");
    }
    let table = ctr.ok("-n k8s.io images ls", None)?;
    let header = table.lines().next().unwrap_or_default();
    ensure!(
        header.split_whitespace().collect::<Vec<_>>()
            == ["REF", "TYPE", "DIGEST", "SIZE", "PLATFORMS", "LABELS"],
        "{table}"
    );
    ensure!(
        table.contains("application/vnd.oci.image.index.v1+json") && table.contains("linux/"),
        "{table}"
    );
    // tag: a second name; a name another image holds needs --force.
    let out = ctr.ok(
        "-n k8s.io images tag bosun.test/busybox:latest example.test/copy:1",
        None,
    )?;
    ensure!(out.trim() == "example.test/copy:1", "{out}");
    ensure!(cri_id(&d, "example.test/copy:1")?.as_deref() == Some(busybox_id.as_str()));
    let e = ctr.refused("-n k8s.io images tag bosun.test/entrypoint:latest example.test/copy:1")?;
    ensure!(e.contains("already exists"), "{e}");
    ctr.ok(
        "-n k8s.io images tag --force bosun.test/entrypoint:latest example.test/copy:1",
        None,
    )?;
    ensure!(
        cri_id(&d, "example.test/copy:1")?.as_deref()
            == Some(image_field("entrypoint", "image_id").as_str())
    );
    // A container from an image ctr imported.
    cri::with_log(
        &d,
        block_on(async {
            let mut rt = cri::client(&d).await?;
            let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "ctr")).await?;
            let c = cri::sh_config(&pod, "c", "bosun.test/busybox:latest", "echo from-ctr");
            let id = cri::create_start(&mut rt, &pod, &c).await?;
            let s = cri::wait_exited(&mut rt, &id, 20).await?;
            cri::check_exit(&s, 0, "Completed")?;
            let log = cri::read_log(&pod.log_of(&c))?;
            ensure!(cri::lines_of(&log, "stdout") == ["from-ctr"], "{log:?}");
            cri::remove_pod(&mut rt, &pod.id).await
        }),
    )?;
    // rm: one name at a time; the last name takes the image; a missing name is a warning.
    // Like a CRI pull, the import named the image by tag and by `repo@digest` (plus the
    // `import-<date>@digest` name of --digests): each is a name of its own.
    let out = ctr.ok("-n k8s.io images rm bosun.test/busybox:latest", None)?;
    ensure!(out.trim() == "bosun.test/busybox:latest", "{out}");
    ensure!(cri_id(&d, "bosun.test/busybox:latest")?.is_none());
    // The image (busybox's config) is also example.test/multi's: the index archive's image for
    // this node. It goes with the last of all those names, not before.
    let last_names: Vec<String> = ctr
        .names()?
        .into_iter()
        .filter(|n| {
            (n.contains("/import-") || n.contains("/busybox")) && n.contains('@')
                || n.starts_with("example.test/multi")
        })
        .collect();
    ensure!(last_names.len() == 4, "{last_names:?}");
    for (i, name) in last_names.iter().enumerate() {
        ensure!(
            cri_id(&d, name)?.as_deref() == Some(busybox_id.as_str()),
            "{name} names the image"
        );
        ctr.ok(&format!("-n k8s.io images remove {name}"), None)?;
        let left = cri_id(&d, &busybox_id)?;
        ensure!(
            left.is_some() == (i + 1 < last_names.len()),
            "the image goes with its last name, not before: {left:?} after {name}; left: {:?}",
            ctr.names()?
        );
    }
    let out = ctr.run("-n k8s.io images del example.test/never:1", None)?;
    ensure!(
        out.status.success() && String::from_utf8_lossy(&out.stderr).contains("image not found"),
        "{out:?}"
    );
    ensure!(!ctr.names()?.iter().any(|n| n.contains("busybox")));
    cri::assert_clean(&d)
}

/// A docker-archive holding `parts`' images: their files, and one manifest.json listing all.
fn combined_archive(parts: &[&str], out: &Path) -> Result<()> {
    let mut manifest: Vec<serde_json::Value> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut b = tar::Builder::new(std::fs::File::create(out)?);
    for part in parts {
        let mut ar = tar::Archive::new(std::fs::File::open(archive(part))?);
        for e in ar.entries()? {
            let mut e = e?;
            let name = e.path()?.to_string_lossy().into_owned();
            if name == "manifest.json" {
                let entries: Vec<serde_json::Value> = serde_json::from_reader(&mut e)?;
                manifest.extend(entries);
                continue;
            }
            if name == "repositories" || !seen.insert(name.clone()) {
                continue;
            }
            let mut h = e.header().clone();
            b.append_data(&mut h, &name, &mut e)?;
        }
    }
    let bytes = serde_json::to_vec(&manifest)?;
    let mut h = tar::Header::new_gnu();
    h.set_size(bytes.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    b.append_data(&mut h, "manifest.json", &bytes[..])?;
    b.into_inner()?.flush()?;
    Ok(())
}

fn multi_image_archive() -> Result<()> {
    let d = Daemon::start("")?;
    let ctr = Ctr::new(&d)?;
    let both = d.dir().join("both.docker.tar");
    combined_archive(&["busybox.docker.tar", "entrypoint.docker.tar"], &both)?;
    let out = ctr.ok(
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        Some(&both),
    )?;
    for name in ["bosun.test/busybox:latest", "bosun.test/entrypoint:latest"] {
        ensure!(out.contains(&format!("unpacking {name} (sha256:")), "{out}");
    }
    ensure!(
        cri_id(&d, "bosun.test/entrypoint:latest")?.as_deref()
            == Some(image_field("entrypoint", "image_id").as_str())
    );
    ensure!(
        cri_id(&d, "bosun.test/busybox:latest")?.as_deref()
            == Some(image_field("busybox", "image_id").as_str())
    );
    // --base-name keeps only the names under it; --index-name needs an archive of one image.
    let e = ctr.refused(&format!(
        "-n k8s.io images import --index-name example.test/idx:1 {}",
        both.display()
    ))?;
    ensure!(e.contains("holds 2 images"), "{e}");
    let e = ctr.refused(&format!(
        "-n k8s.io images import --base-name example.test/none {}",
        both.display()
    ))?;
    ensure!(e.contains("no image name found"), "{e}");
    let out = ctr.ok(
        &format!(
            "-n k8s.io images import --index-name example.test/idx:1 {}",
            archive("busybox.oci.tar").display()
        ),
        None,
    )?;
    ensure!(
        out.contains("unpacking example.test/idx:1 (sha256:"),
        "{out}"
    );
    Ok(())
}

/// docker-archive and oci-archive as skopeo writes them (the formats of `docker save` and
/// `podman save [--format oci-archive]`), gzipped too, imported with kind's line.
fn skopeo_archives() -> Result<()> {
    let d = Daemon::start("")?;
    let ctr = Ctr::new(&d)?;
    let layout = format!("oci:{}", archive("entrypoint").display());
    let docker = d.dir().join("skopeo.docker.tar");
    let oci = d.dir().join("skopeo.oci.tar");
    for (dest, name) in [
        (
            format!("docker-archive:{}:example.test/sk:1", docker.display()),
            "docker",
        ),
        (
            format!("oci-archive:{}:example.test/sk-oci:1", oci.display()),
            "oci",
        ),
    ] {
        let out = Command::new("skopeo")
            .args(["copy", &layout, &dest])
            .output()?;
        ensure!(
            out.status.success(),
            "skopeo copy to {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let gz = d.dir().join("skopeo.oci.tar.gz");
    let out = Command::new("gzip").arg("-k").arg(&oci).output()?;
    ensure!(out.status.success() && gz.exists(), "gzip: {out:?}");
    let kind =
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -";
    let entrypoint = image_field("entrypoint", "image_id");
    for (file, name) in [
        (&docker, "example.test/sk:1"),
        (&oci, "example.test/sk-oci:1"),
    ] {
        let out = ctr.ok(kind, Some(file))?;
        ensure!(out.contains(&format!("unpacking {name} (sha256:")), "{out}");
        ensure!(cri_id(&d, name)?.as_deref() == Some(entrypoint.as_str()));
        ctr.ok(&format!("-n k8s.io images rm {name}"), None)?;
    }
    let out = ctr.ok(&format!("-n k8s.io images import {}", gz.display()), None)?;
    ensure!(
        out.contains("unpacking example.test/sk-oci:1 (sha256:"),
        "{out}"
    );
    ensure!(cri_id(&d, "example.test/sk-oci:1")?.as_deref() == Some(entrypoint.as_str()));
    Ok(())
}

fn pull_plain_http() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let d = Daemon::start("[registry]\nconfig_path = \"\"\n")?;
    let ctr = Ctr::new(&d)?;
    let image = reg.image("busybox");
    let out = ctr.ok(
        &format!("-n k8s.io images pull --plain-http --print-chainid {image}"),
        None,
    )?;
    ensure!(
        out.contains("unpacking linux/")
            && out.contains("image chain ID: sha256:")
            && out.contains("done:"),
        "{out}"
    );
    ensure!(ctr.names()?.contains(&image), "{:?}", ctr.names()?);
    ensure!(cri_id(&d, &image)?.as_deref() == Some(image_field("busybox", "image_id").as_str()));
    // No flags: the daemon's own pull (loopback registries fall back to plain HTTP anyway).
    ctr.ok(&format!("-n k8s.io images pull {image}"), None)?;
    let e = ctr.refused("-n k8s.io images pull --plain-http 127.0.0.1:1/none/x:1")?;
    ensure!(e.contains("127.0.0.1:1"), "{e}");
    Ok(())
}

fn refusals_and_version() -> Result<()> {
    let d = Daemon::start("")?;
    let ctr = Ctr::new(&d)?;
    let out = ctr.ok("version", None)?;
    ensure!(
        out.contains("Client:")
            && out.contains("Server:")
            && out.contains(&format!("Version:  {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    let e = ctr.refused("-n moby images ls")?;
    ensure!(e.contains("namespace \"moby\""), "{e}");
    let e = ctr.refused("-n k8s.io containers ls")?;
    ensure!(
        e.contains("ctr containers: not supported by bosun") && e.contains("crictl"),
        "{e}"
    );
    let e = ctr.refused("-n k8s.io tasks ls")?;
    ensure!(e.contains("not supported by bosun"), "{e}");
    let e = ctr.refused("-n k8s.io images export out.tar x")?;
    ensure!(
        e.contains("ctr images export: not supported by bosun"),
        "{e}"
    );
    // `bosun ctr` is the same entry point.
    let out = Command::new(BOSUN)
        .args(["ctr", "-a"])
        .arg(d.socket())
        .args(["-n", "k8s.io", "images", "ls", "-q"])
        .output()?;
    ensure!(out.status.success(), "{out:?}");
    // Nothing serves this socket.
    let none = Ctr::at(&d, d.dir().join("nothing.sock"))?;
    let e = none.refused("version")?;
    ensure!(e.contains("nothing.sock"), "{e}");
    Ok(())
}

fn extra_sockets() -> Result<()> {
    let mut d = Daemon::start(
        "extra_sockets = [\"@DIR@/run/containerd/containerd.sock\"]\n[registry]\nconfig_path = \"\"\n",
    )?;
    let containerd_sock = d.dir().join("run/containerd/containerd.sock");
    let ctr = Ctr::at(&d, containerd_sock.clone())?;
    ctr.ok(
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        Some(&archive("busybox.docker.tar")),
    )?;
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&containerd_sock)?.permissions(),
    );
    ensure!(mode & 0o777 == 0o660, "mode {mode:o}");
    // CRI on both sockets; what one imported the other sees.
    block_on(async {
        for sock in [d.socket(), containerd_sock.clone()] {
            let ch = bosun::cli::client::connect(&sock).await?;
            let v = pb::runtime_service_client::RuntimeServiceClient::new(ch.clone())
                .version(pb::VersionRequest::default())
                .await?
                .into_inner();
            ensure!(v.runtime_name == "bosun", "{v:?}");
            let images = pb::image_service_client::ImageServiceClient::new(ch)
                .list_images(pb::ListImagesRequest::default())
                .await?
                .into_inner()
                .images;
            ensure!(
                images.iter().any(|i| i
                    .repo_tags
                    .contains(&"bosun.test/busybox:latest".to_string())),
                "{}: {images:?}",
                sock.display()
            );
        }
        Ok(())
    })?;
    // Both go at exit.
    d.terminate();
    ensure!(!containerd_sock.exists() && !d.socket().exists());
    // A socket another process serves is not taken: the daemon refuses to start.
    let theirs = std::os::unix::net::UnixListener::bind(&containerd_sock)?;
    d.launch()?;
    let status = d.wait_exit(30).context("the daemon must stop at once")?;
    ensure!(!status.success(), "{status}");
    ensure!(d.log().contains("served by another process"), "{}", d.log());
    drop(theirs);
    ensure!(containerd_sock.exists(), "their socket was left alone");
    d.restart()?;
    ctr.ok("version", None)?;
    Ok(())
}

/// What kubeadm's preflight asks of the runtime, offline: `crictl info` healthy, `crictl
/// images` listing, and the pause image present (kubeadm pulls only what ImageStatus lacks), as
/// a node script makes it present with ctr; through containerd's socket path and crictl
/// configured by contrib/crictl.yaml.
fn kubeadm_preflight_offline() -> Result<()> {
    let d = Daemon::start("extra_sockets = [\"@DIR@/run/containerd/containerd.sock\"]\n")?;
    let containerd_sock = d.dir().join("run/containerd/containerd.sock");
    let yaml = std::fs::read_to_string(repo_root().join("contrib/crictl.yaml"))?;
    ensure!(yaml.contains("unix:///run/bosun/bosun.sock"), "{yaml}");
    let config = d.dir().join("crictl.yaml");
    std::fs::write(
        &config,
        yaml.replace(
            "unix:///run/bosun/bosun.sock",
            &format!("unix://{}", containerd_sock.display()),
        ),
    )?;
    let crictl = |args: &[&str]| -> Result<String> {
        let bin = crictl_bin().context("crictl")?;
        let out = Command::new(bin)
            .arg("--config")
            .arg(&config)
            .args(args)
            .output()?;
        ensure!(
            out.status.success(),
            "crictl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let info: serde_json::Value = serde_json::from_str(&crictl(&["info"])?)?;
    let conditions = info["status"]["conditions"]
        .as_array()
        .context("status.conditions")?;
    // The kubelet needs both conditions reported; kubeadm's preflight, a ready runtime.
    let condition = |t: &str| conditions.iter().find(|c| c["type"] == t);
    ensure!(
        condition("RuntimeReady").is_some_and(|c| c["status"] == true),
        "{info}"
    );
    ensure!(condition("NetworkReady").is_some(), "{info}");
    let pause = "registry.k8s.io/pause:3.10";
    let ctr = Ctr::at(&d, containerd_sock)?;
    ctr.ok(
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        Some(&archive("busybox.docker.tar")),
    )?;
    ctr.ok(
        &format!("-n k8s.io images tag bosun.test/busybox:latest {pause}"),
        None,
    )?;
    let images = crictl(&["images"])?;
    ensure!(
        images.lines().any(|l| l
            .split_whitespace()
            .take(2)
            .eq(["registry.k8s.io/pause", "3.10"])),
        "{images}"
    );
    let status: serde_json::Value = serde_json::from_str(&crictl(&["inspecti", pause])?)?;
    ensure!(
        status["status"]["repoTags"]
            .as_array()
            .is_some_and(|t| t.iter().any(|t| t == pause)),
        "{status}"
    );
    Ok(())
}
