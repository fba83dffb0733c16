//! CreateContainer from a checkpoint refused before anything is made, with a hand-made archive (no CRIU needed: runs here and in the VM lane): members missing or escaping, another runtime handler, a bind mount not given again, a terminal, the original image absent, CRIU unusable.

use std::path::Path;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;
use tonic::Code;

use super::checkpoint::checkpoint_info;
use crate::support::cri::{self, NEEDS};
use crate::support::{scratch, trial, Scenario};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::checkpoint::restore_refusals_name_the_problem_and_leave_nothing",
        NEEDS,
        refusals,
    )]
}

/// An archive's members: name, content.
pub(super) type Members = Vec<(String, Vec<u8>)>;

/// A tar at `path` of `members` (name, content; `None`: a directory), names written raw.
fn hand_archive(path: &Path, members: &[(&str, Option<&[u8]>)]) -> Result<()> {
    let mut b = tar::Builder::new(std::fs::File::create(path)?);
    for (name, data) in members {
        let mut h = tar::Header::new_old();
        h.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
        let data = data.unwrap_or_default();
        h.set_entry_type(match data.is_empty() && name.ends_with('/') {
            true => tar::EntryType::Directory,
            false => tar::EntryType::Regular,
        });
        h.set_size(data.len() as u64);
        h.set_mode(0o755);
        h.set_cksum();
        b.append(&h, data)?;
    }
    b.finish()?;
    Ok(())
}

pub(super) fn write_members(path: &Path, members: &Members) -> Result<()> {
    let refs: Vec<(&str, Option<&[u8]>)> = members
        .iter()
        .map(|(n, d)| (n.as_str(), Some(d.as_slice())))
        .collect();
    hand_archive(path, &refs)
}

/// config.dump of a busybox counter checkpointed by `runtime`, from `image`.
pub(super) fn config_dump(runtime: &str, image: &str) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({
        "id": "0123456789abcdef", "name": "counter", "rootfsImage": image,
        "rootfsImageName": image, "rootfsImageRef": "", "runtime": runtime,
    }))
    .unwrap_or_default()
}

/// spec.dump with the pod's files and `binds` bind-mounted, on a terminal or not.
pub(super) fn spec_dump(binds: &[&str], terminal: bool) -> Vec<u8> {
    let mut mounts = vec![
        serde_json::json!({"destination": "/proc", "type": "proc", "source": "proc"}),
        serde_json::json!({"destination": "/etc/hosts", "type": "bind",
            "source": "/run/x/hosts", "options": ["rbind", "rprivate"]}),
    ];
    for b in binds {
        mounts.push(serde_json::json!({"destination": b, "type": "bind",
            "source": "/srv/data", "options": ["rbind", "rprivate"]}));
    }
    serde_json::to_vec(&serde_json::json!({
        "ociVersion": "1.0.2",
        "process": {"terminal": terminal, "cwd": "/", "args": ["sh", "-c", "sleep 1"],
            "user": {"uid": 0, "gid": 0}},
        "root": {"path": "rootfs"},
        "mounts": mounts,
    }))
    .unwrap_or_default()
}

fn refusals() -> Result<()> {
    Scenario::new().run(async |s| {
        let dir = scratch()?;
        let pod = s.pod(s.pod_config("ck-restore-refused")).await?;
        let busybox = s.image("busybox");
        let (ok_config, ok_spec) = (config_dump("runc", &busybox), spec_dump(&[], false));
        let inventory: &[u8] = b"inventory";
        let complete = |config: &[u8], spec: &[u8]| -> Members {
            vec![
                ("config.dump".into(), config.to_vec()),
                ("spec.dump".into(), spec.to_vec()),
                ("checkpoint/inventory.img".into(), inventory.to_vec()),
            ]
        };
        let other_handler = config_dump("crun", &busybox);
        let with_bind = spec_dump(&["/data"], false);
        let on_tty = spec_dump(&[], true);
        let no_image = config_dump("runc", "example.com/nope/counter:1");
        let cases: Vec<(&str, Members, Code, Vec<String>)> = vec![
            (
                "missing",
                vec![("config.dump".into(), ok_config.clone())],
                Code::InvalidArgument,
                vec!["spec.dump is missing".into()],
            ),
            (
                "no-images",
                complete(&ok_config, &ok_spec)[..2].to_vec(),
                Code::InvalidArgument,
                vec!["checkpoint/".into(), "inventory.img".into()],
            ),
            (
                "escape",
                [
                    complete(&ok_config, &ok_spec),
                    vec![("../escaped".into(), b"x".to_vec())],
                ]
                .concat(),
                Code::InvalidArgument,
                vec!["../escaped".into(), "leaves".into()],
            ),
            (
                "handler",
                complete(&other_handler, &ok_spec),
                Code::FailedPrecondition,
                vec!["\"crun\"".into(), "\"runc\"".into(), "same handler".into()],
            ),
            (
                "bind",
                complete(&ok_config, &with_bind),
                Code::FailedPrecondition,
                vec!["bind mount at /data".into()],
            ),
            (
                "tty",
                complete(&ok_config, &on_tty),
                Code::FailedPrecondition,
                vec!["tty".into()],
            ),
            (
                "image",
                complete(&no_image, &ok_spec),
                Code::FailedPrecondition,
                vec!["example.com/nope/counter:1".into(), "pull it first".into()],
            ),
        ];
        let before = s.list_containers(None).await?.len();
        let root = s.daemon.root();
        let containers_before = dir_names(&root.join("containers"));
        for (name, members, code, wants) in cases {
            let archive = dir.path().join(format!("{name}.tar"));
            write_members(&archive, &members)?;
            let err = create_from(s, &pod, &archive).await?;
            ensure!(
                err.code() == code && wants.iter().all(|w| err.message().contains(w.as_str())),
                "{name}: want {code:?} naming {wants:?}, got {err:?}"
            );
            ensure!(
                err.message().contains(&archive.display().to_string()),
                "{name}: the archive is not named: {err:?}"
            );
            ensure!(!dir.path().join("escaped").exists(), "{name}: escaped");
            left_nothing(s, before, &root, &containers_before, name).await?;
        }
        // The bind mount given again: the check goes on to the next one.
        let archive = dir.path().join("bind.tar");
        let c = pod
            .container("restored", &archive.display().to_string())
            .mount(pb::Mount {
                container_path: "/data".into(),
                host_path: dir.path().display().to_string(),
                ..Default::default()
            })
            .build();
        // Where CRIU works the hand-made archive is created (its start would fail: its images
        // are not CRIU's) and removed again.
        match cri::try_create(&mut s.rt.clone(), &pod, &c).await {
            Ok(id) => s.remove(&id).await?,
            Err(err) => ensure!(!err.message().contains("/data"), "{err:?}"),
        }
        let (available, why) = checkpoint_info(&mut s.rt.clone()).await?;
        if !available {
            let archive = dir.path().join("complete.tar");
            let members = complete(&ok_config, &ok_spec);
            write_members(&archive, &members)?;
            let err = create_from(s, &pod, &archive).await?;
            ensure!(
                err.code() == Code::FailedPrecondition && err.message().contains(&why),
                "CRIU unusable ({why}): {err:?}"
            );
            left_nothing(s, before, &root, &containers_before, "complete").await?;
        }
        Ok(())
    })
}

/// CreateContainer in `pod` whose image is `archive`; the refusal.
pub(super) async fn create_from(
    s: &crate::support::Scene,
    pod: &cri::Pod,
    archive: &Path,
) -> Result<tonic::Status> {
    let c = pod
        .container("restored", &archive.display().to_string())
        .build();
    cri::try_create(&mut s.rt.clone(), pod, &c)
        .await
        .err()
        .with_context(|| format!("created from {}", archive.display()))
}

pub(super) fn dir_names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// No container listed or recorded, no staging directory left.
pub(super) async fn left_nothing(
    s: &crate::support::Scene,
    before: usize,
    root: &Path,
    containers_before: &[String],
    name: &str,
) -> Result<()> {
    ensure!(
        s.list_containers(None).await?.len() == before,
        "{name}: a container was created"
    );
    ensure!(
        dir_names(&root.join("containers")) == containers_before,
        "{name}: container directories left"
    );
    let staging = dir_names(&root.join("checkpoint-restore"));
    ensure!(staging.is_empty(), "{name}: staging left: {staging:?}");
    Ok(())
}
