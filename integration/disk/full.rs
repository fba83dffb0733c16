//! A full disk (issue 28 item 4): PullImage, CreateContainer and RunPodSandbox on a full small root answer ResourceExhausted naming the file system, leave nothing and work once space is freed; the small disks and checks `records.rs` shares.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri;
use crate::support::{block_on, trial, wait_until, Daemon, Need, Registry};

/// Containers on a small disk: root, runc, the test images, loop devices and mkfs.ext4.
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Freeze];
const PULL_NEEDS: &[Need] = &[Need::Root, Need::Registry, Need::Images, Need::Freeze];

/// Size of the small root file systems: the busybox image, a few containers and ext4's own.
pub const ROOT_MIB: u64 = 24;

/// Free bytes left by each fill of the creation tests: nothing, then a KiB more each time
/// up to four blocks, then more: each step of a creation (lease, record, status, writable
/// layer) meets the full disk in one of them.
const STEPS: [u64; 19] = {
    let mut steps = [0; 19];
    let mut i = 0;
    while i < 17 {
        steps[i] = (i as u64) << 10;
        i += 1;
    }
    steps[17] = 24 << 10;
    steps[18] = 48 << 10;
    steps
};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "disk::pull_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            PULL_NEEDS,
            pull_on_a_full_root,
        ),
        trial(
            "disk::create_container_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            NEEDS,
            create_on_a_full_root,
        ),
        trial(
            "disk::run_pod_sandbox_on_a_full_root_is_resource_exhausted_and_leaves_nothing",
            NEEDS,
            run_pod_on_a_full_root,
        ),
    ]
}

/// A small ext4 (no blocks reserved for root: the daemon is root) in a file, loop-mounted.
/// Unmounted on drop if still mounted (the loop device, set to clear itself, goes with the
/// last unmount), its file removed.
pub struct SmallDisk {
    image: PathBuf,
    /// Where it is mounted.
    pub mount: PathBuf,
}

impl SmallDisk {
    /// Makes a `mib` MiB file system in `dir/<name>.img` and mounts it at `dir/<name>`.
    pub fn new(dir: &Path, name: &str, mib: u64) -> Result<SmallDisk> {
        let disk = SmallDisk {
            image: dir.join(format!("{name}.img")),
            mount: dir.join(name),
        };
        std::fs::create_dir_all(&disk.mount)?;
        File::create(&disk.image)?.set_len(mib << 20)?;
        let (image, mount) = (disk.image.to_string_lossy(), disk.mount.to_string_lossy());
        // `mount -o loop` sets the loop device to clear itself at the last unmount.
        for argv in [
            &["mkfs.ext4", "-q", "-F", "-m", "0", &image][..],
            &["mount", "-o", "loop", &image, &mount],
        ] {
            let out = Command::new(argv[0]).args(&argv[1..]).output()?;
            let why = String::from_utf8_lossy(&out.stderr);
            ensure!(out.status.success(), "{argv:?}: {why}");
        }
        Ok(disk)
    }

    fn filler(&self, n: u32) -> PathBuf {
        self.mount.join(format!("filler-{n}"))
    }

    /// Fills the file system but for about `keep` bytes: a file written until ENOSPC in
    /// ever smaller pieces, then small files till none fits (ext4 keeps blocks back for a big
    /// file's metadata), then the big file cut by `keep`.
    pub fn fill(&self, keep: u64) -> Result<()> {
        let f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.filler(0))?;
        for piece in [256 << 10, 4 << 10] {
            let chunk = vec![0u8; piece];
            while write_some(&f, &chunk)? {}
        }
        for n in 1..4096 {
            let small = match File::create(self.filler(n)) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
                small => small?,
            };
            if !write_some(&mut &small, &[0u8; 4 << 10])? {
                break;
            }
        }
        if keep > 0 {
            let len = f.metadata()?.len();
            f.set_len(len.saturating_sub(keep))?;
        }
        f.sync_all()?;
        self.sync()
    }

    /// Deletes what [`SmallDisk::fill`] wrote.
    pub fn free(&self) -> Result<()> {
        for e in std::fs::read_dir(&self.mount)?.flatten() {
            if e.file_name().to_string_lossy().starts_with("filler-") {
                std::fs::remove_file(e.path())?;
            }
        }
        self.sync()
    }

    /// Commits the journal: blocks freed are free for the next writer.
    fn sync(&self) -> Result<()> {
        rustix::fs::syncfs(File::open(&self.mount)?)?;
        Ok(())
    }

    /// Bytes free.
    pub fn avail(&self) -> u64 {
        rustix::fs::statvfs(&self.mount).map_or(0, |s| s.f_bavail * s.f_frsize)
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        use rustix::mount::{unmount, UnmountFlags};
        let mounted = cri::mounts_under(&self.mount)
            .iter()
            .any(|(m, _)| *m == self.mount);
        if mounted && unmount(&self.mount, UnmountFlags::empty()).is_err() {
            let _ = unmount(&self.mount, UnmountFlags::DETACH);
        }
        let _ = std::fs::remove_file(&self.image);
    }
}

/// Writes `chunk` once; false when the file system is full.
fn write_some(mut f: impl Write, chunk: &[u8]) -> Result<bool> {
    match f.write(chunk) {
        Ok(n) => Ok(n > 0),
        Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => Ok(false),
        Err(e) => Err(e).context("fill"),
    }
}

/// A CRI daemon (`extra`: more config) whose root is a `mib` MiB [`SmallDisk`]. The disk comes
/// first: dropped after the daemon, whose own drop unmounts it.
pub fn small_root_daemon(mib: u64, extra: &str) -> Result<(SmallDisk, Daemon)> {
    let mut disk = None;
    let d = cri::daemon_after(extra, |dir| {
        disk = Some(SmallDisk::new(dir, "root", mib)?);
        Ok(())
    })?;
    Ok((disk.context("no disk")?, d))
}

/// The embedded network's lease journal on the daemon's root (the small disk), as it is on a
/// node where `/var/lib/cni` and `/var/lib/bosun` share a file system.
pub const LEASES_ON_ROOT: &str = "[network]\ndata_dir = \"@DIR@/root/cni\"\n";

/// `r` failed with ResourceExhausted, saying the device is full and naming the file system
/// mounted at `fs` (the answer is printed: what the disk tests show).
pub fn full_disk_refusal<T: std::fmt::Debug>(
    what: &str,
    r: std::result::Result<T, tonic::Status>,
    fs: &Path,
) -> Result<()> {
    let r = r.inspect_err(|s| println!("{what}: {:?} {}", s.code(), s.message()));
    let fs = format!("file system {}", fs.display());
    cri::refused(
        what,
        r,
        tonic::Code::ResourceExhausted,
        &["no space left on device", &fs],
    )
}

/// Files under `dir` that an interrupted or failed write left: atomic writes' temps
/// (`.tmp-*`, `*.tmp`), ingests, and JSON records that are empty or do not parse.
pub fn torn_files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    torn_below(dir, &mut out);
    out
}

fn torn_below(dir: &Path, out: &mut Vec<String>) {
    let in_ingest = dir.file_name().is_some_and(|n| n == "ingest");
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let (path, name) = (e.path(), e.file_name().to_string_lossy().into_owned());
        let Ok(m) = path.symlink_metadata() else {
            continue;
        };
        if name.starts_with(".tmp-") || name.ends_with(".tmp") || in_ingest {
            out.push(format!("temp {}", path.display()));
        } else if m.is_dir() {
            // Layers' own files and writable layers are the containers' business.
            if !["fs", "rw", "lost+found"].contains(&name.as_str()) {
                torn_below(&path, out);
            }
        } else if m.is_file() && name.ends_with(".json") {
            let whole = std::fs::read(&path)
                .is_ok_and(|b| serde_json::from_slice::<serde_json::Value>(&b).is_ok());
            if !whole {
                out.push(format!(
                    "torn record {} ({} bytes)",
                    path.display(),
                    m.len()
                ));
            }
        }
    }
}

/// Every line of the embedded network's lease journal on the root is whole; the sandboxes
/// holding a lease.
pub fn journal_leases(d: &Daemon) -> Result<Vec<String>> {
    let net = d.root().join("cni").join(&d.net().name).join("leases");
    let text = std::fs::read_to_string(&net).unwrap_or_default();
    let mut held: Vec<String> = Vec::new();
    for line in text.split_terminator('\n') {
        let mut w = line.split(' ');
        match (w.next(), w.next()) {
            (Some("+"), Some(id)) => {
                ensure!(
                    w.all(|ip| ip.parse::<std::net::IpAddr>().is_ok()),
                    "torn journal line {line:?} in {}",
                    net.display()
                );
                held.push(id.to_string());
            }
            (Some("-"), Some(id)) => held.retain(|h| h != id),
            _ => anyhow::bail!("torn journal line {line:?} in {}", net.display()),
        }
    }
    ensure!(text.is_empty() || text.ends_with('\n'), "journal ends torn");
    Ok(held)
}

/// What a refused creation may not leave: objects of `kinds`, their directories and mounts
/// (the trash is given 10 s), temps or torn records on the root, leases of containers.
fn nothing_left(d: &Daemon, kinds: &[&str]) -> Result<()> {
    let leftovers = || -> Vec<String> {
        let mut left = torn_files(&d.root());
        for base in [d.root(), d.state()] {
            for dir in kinds
                .iter()
                .map(|k| base.join(k))
                .chain([base.join("trash")])
            {
                left.extend(
                    cri::entries(&dir)
                        .iter()
                        .map(|e| format!("dir {}/{e}", dir.display())),
                );
            }
        }
        let leases = cri::entries(&d.root().join("leases"));
        left.extend(leases.iter().map(|l| format!("image lease {l}")));
        for kind in kinds {
            for (mp, fs) in cri::mounts_under(&d.state().join(kind)) {
                left.push(format!("mount {} ({fs})", mp.display()));
            }
        }
        left
    };
    wait_until(10, || leftovers().is_empty());
    let left = leftovers();
    ensure!(left.is_empty(), "left behind:\n  {}", left.join("\n  "));
    Ok(())
}

async fn pull(d: &Daemon, image: &str) -> std::result::Result<String, tonic::Status> {
    let mut c = d
        .images()
        .await
        .map_err(|e| tonic::Status::unknown(e.to_string()))?;
    c.pull_image(pb::PullImageRequest {
        image: Some(pb::ImageSpec {
            image: image.into(),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await
    .map(|r| r.into_inner().image_ref)
}

async fn images(d: &Daemon) -> Result<Vec<pb::Image>> {
    Ok(d.images()
        .await?
        .list_images(pb::ListImagesRequest::default())
        .await?
        .into_inner()
        .images)
}

/// PullImage on a full root, then with room for the manifest but not the layer, then for the
/// layer's blob but not its unpacked files: ResourceExhausted naming the root's file system
/// each time, no image, no ingest, snapshot temp or record left; once freed the pull works.
fn pull_on_a_full_root() -> Result<()> {
    let reg = Registry::start(false)?;
    reg.push(&["busybox"])?;
    let (disk, d) = small_root_daemon(ROOT_MIB, "")?;
    let image = reg.image("busybox");
    let r = block_on(async {
        for keep in [0, 64 << 10, 1600 << 10] {
            disk.fill(keep)?;
            let what = format!("PullImage with {} KiB free", disk.avail() >> 10);
            full_disk_refusal(&what, pull(&d, &image).await, &d.root())?;
            ensure!(images(&d).await?.is_empty(), "{what}: an image is listed");
            nothing_left(&d, &[])?;
            disk.free()?;
        }
        let r = pull(&d, &image).await.context("PullImage once freed")?;
        ensure!(
            images(&d).await?.iter().any(|i| i.id == r),
            "pulled image {r} not listed"
        );
        Ok(())
    });
    cri::with_log(&d, r)
}

/// CreateContainer with the root full, or nearly (each of [`STEPS`]): ResourceExhausted
/// naming the root's file system, or a whole container (removed again); nothing left of a
/// refused one. Once freed, the same config creates and runs.
fn create_on_a_full_root() -> Result<()> {
    let (disk, d) = small_root_daemon(ROOT_MIB, "")?;
    let image = cri::import(&d, "busybox")?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let pod = cri::run_pod(&mut rt, cri::pod_config(&d, "full")).await?;
        let c = cri::sh_config(&pod, "c", &image, "echo hello; sleep 1000");
        let mut refused = 0;
        for keep in STEPS {
            disk.fill(keep)?;
            let what = format!("CreateContainer with {} KiB free", disk.avail() >> 10);
            let created = cri::try_create(&mut rt, &pod, &c).await;
            if let Ok(id) = &created {
                println!("{what}: created");
                cri::remove(&mut rt, id).await?;
            } else {
                full_disk_refusal(&what, created, &d.root())?;
                refused += 1;
                let listed = cri::list_containers(&mut rt, None).await?;
                ensure!(listed.is_empty(), "{what}: listed {listed:?}");
                nothing_left(&d, &["containers"])?;
            }
            disk.free()?;
        }
        ensure!(refused > 0, "no CreateContainer was refused");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 20, |l| l.iter().any(|x| x == "hello")).await?;
        cri::stop(&mut rt, &id, 0).await?;
        cri::remove_pod(&mut rt, &pod.id).await
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}

/// RunPodSandbox with the root (which holds the lease journal too) full, or nearly: refused
/// with ResourceExhausted naming the root's file system, or a whole pod (removed again);
/// nothing left of a refused one, no lease held, no torn journal line. Once freed, the same
/// config (a kubelet's retry) runs.
fn run_pod_on_a_full_root() -> Result<()> {
    let (disk, d) = small_root_daemon(ROOT_MIB, LEASES_ON_ROOT)?;
    let r = block_on(async {
        let mut rt = cri::client(&d).await?;
        let config = cri::pod_config(&d, "full");
        let mut refused = 0;
        for keep in STEPS {
            disk.fill(keep)?;
            let what = format!("RunPodSandbox with {} KiB free", disk.avail() >> 10);
            let ran = rt
                .run_pod_sandbox(pb::RunPodSandboxRequest {
                    config: Some(config.clone()),
                    runtime_handler: String::new(),
                })
                .await
                .map(|r| r.into_inner().pod_sandbox_id);
            if let Ok(id) = &ran {
                println!("{what}: ran");
                cri::remove_pod(&mut rt, id).await?;
            } else {
                full_disk_refusal(&what, ran, &d.root())?;
                refused += 1;
                let listed = cri::list_pods(&mut rt, None).await?;
                ensure!(listed.is_empty(), "{what}: listed {listed:?}");
                let left = cri::leftovers(&d);
                ensure!(left.is_empty(), "{what}: left {left:?}");
                nothing_left(&d, &["sandboxes"])?;
            }
            let held = journal_leases(&d)?;
            ensure!(held.is_empty(), "leases held after the pod went: {held:?}");
            disk.free()?;
        }
        ensure!(refused > 0, "no RunPodSandbox was refused");
        let pod = cri::run_pod(&mut rt, config).await?;
        ensure!(
            journal_leases(&d)? == vec![pod.id.clone()],
            "the pod's lease"
        );
        cri::remove_pod(&mut rt, &pod.id).await
    });
    cri::with_log(&d, r)?;
    cri::assert_clean(&d)
}
