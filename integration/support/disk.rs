//! Small disks for the full-disk trials: a loop-mounted ext4 of a few MiB that can be filled
//! and freed, a daemon whose root is one, and the checks for torn records and leases.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{ensure, Context, Result};

use super::{cri, Daemon, Need};

/// Containers on a small disk: root, runc, the test images, loop devices and mkfs.ext4.
pub const NEEDS: &[Need] = &[Need::Root, Need::Runc, Need::Images, Need::Freeze];

/// Size of the small root file systems: the busybox image, a few containers and ext4's own.
pub const ROOT_MIB: u64 = 24;

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
