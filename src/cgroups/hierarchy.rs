//! Making and removing the pod cgroup hierarchy (`kubepods`, QoS and per-pod cgroups) with their cpu, memory and pids limits: cgroupfs on v1 and v2, or systemd slices.
//!
//! Names are component lists, as the kubelet's CgroupName: `["kubepods", "burstable",
//! "pod<uid>"]` is `/kubepods/burstable/pod<uid>` for cgroupfs and the slice
//! `kubepods-burstable-pod<uid_with_underscores>.slice` for systemd.
//!
//! Why not `cgroups-rs` (the design card's pick): its current release (0.5) pulls zbus and an
//! old nix into the build unconditionally, its hierarchy roots are fixed to the host's mounts
//! (no fake trees for unit tests, no scratch roots), and what the hierarchy needs is a dozen
//! file writes that bosun's readers already locate; systemd slices go through systemd's own
//! `busctl` (StartTransientUnit, as the kubelet's cgroup manager does over D-Bus).

use std::io;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::path::expand_slice;
use super::Version;
use crate::cgroups::CgroupDriver;

/// A cgroup's name: its components below the hierarchy's root.
pub type Name = Vec<String>;

/// What a QoS or pod cgroup is limited to; `None` parts are unlimited (or, for shares, left
/// as they are).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// cpu.shares (v1); converted to cpu.weight on v2.
    pub cpu_shares: Option<u64>,
    /// CFS quota in µs per `cpu_period` µs.
    pub cpu_quota: Option<i64>,
    /// The CFS period (µs).
    pub cpu_period: u64,
    /// Bytes.
    pub memory: Option<i64>,
    /// Tasks.
    pub pids: Option<i64>,
}

/// runc's cgroup v1 shares → v2 weight conversion (the same on both sides of a container).
pub fn shares_to_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9999) / 262_142
}

/// Makes, updates and removes cgroups of one hierarchy and driver.
pub trait Hierarchy: Send + Sync + std::fmt::Debug {
    /// Creates the cgroup if missing (its parents first) and sets `limits`.
    fn ensure(&self, name: &Name, limits: &Limits) -> io::Result<()>;
    /// Removes the cgroup (an absent one is fine; one with processes left is an error).
    fn remove(&self, name: &Name) -> io::Result<()>;
    /// What containers of a pod in this cgroup get as their CRI `cgroup_parent`.
    fn parent(&self, name: &Name) -> String;
    /// The cgroup's directory below the hierarchy root, as the stats readers take it.
    fn dir(&self, name: &Name) -> String;
    /// The processes in the cgroup and below it.
    fn procs(&self, name: &Name) -> Vec<i32>;
}

/// The hierarchy for `driver` on this host's cgroups mounted at `root`.
pub fn open(driver: CgroupDriver, version: Version, root: &Path) -> Box<dyn Hierarchy> {
    match driver {
        CgroupDriver::Cgroupfs => Box::new(Cgroupfs {
            root: root.to_path_buf(),
            version,
        }),
        CgroupDriver::Systemd => Box::new(Systemd {
            root: root.to_path_buf(),
            version,
        }),
    }
}

/// cgroupfs paths below `root`: `/sys/fs/cgroup/<controller>/…` on v1, `/sys/fs/cgroup/…` on v2.
#[derive(Debug)]
pub struct Cgroupfs {
    root: PathBuf,
    version: Version,
}

/// The v1 controllers bosun sets values in (runc creates the rest below a pod's cgroup).
const V1_CONTROLLERS: [&str; 4] = ["cpu", "cpuacct", "memory", "pids"];
/// The v2 controllers delegated down to pod cgroups.
const V2_CONTROLLERS: [&str; 3] = ["cpu", "memory", "pids"];

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    std::fs::write(dir.join(file), value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("write {value} to {}: {e}", dir.join(file).display()),
        )
    })
}

fn rel(name: &Name) -> String {
    name.join("/")
}

fn read_procs(dir: &Path, out: &mut Vec<i32>) {
    if let Ok(t) = std::fs::read_to_string(dir.join("cgroup.procs")) {
        out.extend(t.lines().filter_map(|l| l.trim().parse::<i32>().ok()));
    }
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                read_procs(&e.path(), out);
            }
        }
    }
}

impl Cgroupfs {
    /// A cgroupfs hierarchy at `root` (for tests: a fake tree).
    pub fn new(root: &Path, version: Version) -> Cgroupfs {
        Cgroupfs {
            root: root.to_path_buf(),
            version,
        }
    }

    fn v1_dir(&self, controller: &str, name: &Name) -> PathBuf {
        self.root.join(controller).join(rel(name))
    }

    /// Every v1 hierarchy mounted below the root (real directories, not the `cpu` →
    /// `cpu,cpuacct` links; not the v2 `unified` mount).
    fn v1_mounts(&self) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(&self.root) else {
            return Vec::new();
        };
        rd.flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()) && e.file_name() != "unified")
            .map(|e| e.path())
            .collect()
    }

    fn ensure_v1(&self, name: &Name, l: &Limits) -> io::Result<()> {
        for c in V1_CONTROLLERS {
            let base = self.root.join(c);
            if !base.is_dir() {
                continue;
            }
            let d = self.v1_dir(c, name);
            std::fs::create_dir_all(&d)?;
            match c {
                "cpu" => {
                    if let Some(s) = l.cpu_shares {
                        write(&d, "cpu.shares", &s.to_string())?;
                    }
                    if d.join("cpu.cfs_period_us").exists() {
                        write(&d, "cpu.cfs_period_us", &l.cpu_period.to_string())?;
                        write(
                            &d,
                            "cpu.cfs_quota_us",
                            &l.cpu_quota.unwrap_or(-1).to_string(),
                        )?;
                    }
                }
                "memory" => {
                    write(
                        &d,
                        "memory.limit_in_bytes",
                        &l.memory.unwrap_or(-1).to_string(),
                    )?;
                }
                "pids" => {
                    let v = l.pids.map_or("max".to_string(), |p| p.to_string());
                    write(&d, "pids.max", &v)?;
                }
                _ => {}
            }
        }
        Ok(())
    }

    fn ensure_v2(&self, name: &Name, l: &Limits) -> io::Result<()> {
        // Each level hands the controllers down to the next (as runc does for its parents).
        let mut dir = self.root.clone();
        for part in name {
            let available =
                std::fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
            let enabled =
                std::fs::read_to_string(dir.join("cgroup.subtree_control")).unwrap_or_default();
            let want: Vec<String> = V2_CONTROLLERS
                .iter()
                .filter(|c| available.split_whitespace().any(|a| a == **c))
                .filter(|c| !enabled.split_whitespace().any(|a| a == **c))
                .map(|c| format!("+{c}"))
                .collect();
            if !want.is_empty() {
                write(&dir, "cgroup.subtree_control", &want.join(" "))?;
            }
            dir = dir.join(part);
            if !dir.is_dir() {
                std::fs::create_dir(&dir).or_else(|e| {
                    if e.kind() == io::ErrorKind::AlreadyExists {
                        Ok(())
                    } else {
                        Err(e)
                    }
                })?;
            }
        }
        if let Some(s) = l.cpu_shares {
            write(&dir, "cpu.weight", &shares_to_weight(s).to_string())?;
        }
        if dir.join("cpu.max").exists() || !dir.join("cgroup.controllers").exists() {
            let quota = l.cpu_quota.map_or("max".to_string(), |q| q.to_string());
            write(&dir, "cpu.max", &format!("{quota} {}", l.cpu_period))?;
        }
        let mem = l.memory.map_or("max".to_string(), |m| m.to_string());
        write(&dir, "memory.max", &mem)?;
        if dir.join("pids.max").exists() || !dir.join("cgroup.controllers").exists() {
            write(
                &dir,
                "pids.max",
                &l.pids.map_or("max".to_string(), |p| p.to_string()),
            )?;
        }
        Ok(())
    }
}

/// Removes `d` and the cgroups below it, deepest first (runc leaves the cgroups of exited
/// containers until they are deleted).
fn rmdir(d: &Path) -> io::Result<()> {
    if let Ok(rd) = std::fs::read_dir(d) {
        for e in rd.flatten() {
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                rmdir(&e.path())?;
            }
        }
    }
    match std::fs::remove_dir(d) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io::Error::new(
            e.kind(),
            format!("remove {}: {e}", d.display()),
        )),
    }
}

impl Hierarchy for Cgroupfs {
    fn ensure(&self, name: &Name, limits: &Limits) -> io::Result<()> {
        match self.version {
            Version::V1 => self.ensure_v1(name, limits),
            Version::V2 => self.ensure_v2(name, limits),
        }
    }

    fn remove(&self, name: &Name) -> io::Result<()> {
        match self.version {
            Version::V1 => {
                let mut first = Ok(());
                // runc also makes the cgroup in a hybrid host's v2 `unified` mount.
                let unified = Some(self.root.join("unified")).filter(|u| u.is_dir());
                for m in self.v1_mounts().into_iter().chain(unified) {
                    if let Err(e) = rmdir(&m.join(rel(name))) {
                        if first.is_ok() {
                            first = Err(e);
                        }
                    }
                }
                first
            }
            Version::V2 => rmdir(&self.root.join(rel(name))),
        }
    }

    fn parent(&self, name: &Name) -> String {
        format!("/{}", rel(name))
    }

    fn dir(&self, name: &Name) -> String {
        format!("/{}", rel(name))
    }

    fn procs(&self, name: &Name) -> Vec<i32> {
        let mut out = Vec::new();
        match self.version {
            Version::V1 => {
                for m in self.v1_mounts() {
                    read_procs(&m.join(rel(name)), &mut out);
                }
            }
            Version::V2 => read_procs(&self.root.join(rel(name)), &mut out),
        }
        out.sort_unstable();
        out.dedup();
        out
    }
}

/// systemd slices made as transient units over D-Bus (`busctl`), with systemd's resource
/// properties; systemd creates and removes their cgroups.
#[derive(Debug)]
pub struct Systemd {
    root: PathBuf,
    version: Version,
}

/// The slice unit of `name` (`a-b_c.slice`; `-.slice` for the root).
pub fn slice_name(name: &Name) -> String {
    if name.is_empty() {
        return "-.slice".to_string();
    }
    let parts: Vec<String> = name.iter().map(|p| p.replace('-', "_")).collect();
    format!("{}.slice", parts.join("-"))
}

fn busctl(args: &[String]) -> io::Result<String> {
    let out = Command::new("busctl")
        .args([
            "--system",
            "call",
            "org.freedesktop.systemd1",
            "/org/freedesktop/systemd1",
        ])
        .args(["org.freedesktop.systemd1.Manager"])
        .args(args)
        .output()?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(io::Error::other(format!(
            "busctl {}: {}",
            args.first().map(String::as_str).unwrap_or_default(),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

impl Systemd {
    /// systemd properties for `limits` (`(name, signature, value)`).
    fn properties(&self, l: &Limits) -> Vec<(String, &'static str, String)> {
        let inf = u64::MAX.to_string();
        let mut p = vec![
            ("CPUAccounting".to_string(), "b", "true".to_string()),
            ("MemoryAccounting".to_string(), "b", "true".to_string()),
            ("TasksAccounting".to_string(), "b", "true".to_string()),
        ];
        if let Some(s) = l.cpu_shares {
            match self.version {
                Version::V1 => p.push(("CPUShares".into(), "t", s.to_string())),
                Version::V2 => p.push(("CPUWeight".into(), "t", shares_to_weight(s).to_string())),
            }
        }
        let quota = l.cpu_quota.map_or(inf.clone(), |q| {
            // µs of CPU per second of wall time, at least 10 ms as systemd rounds.
            ((q.max(0) as u64 * 1_000_000 / l.cpu_period.max(1)).max(10_000)).to_string()
        });
        p.push(("CPUQuotaPerSecUSec".into(), "t", quota));
        let mem = l.memory.map_or(inf.clone(), |m| m.max(0).to_string());
        match self.version {
            Version::V1 => p.push(("MemoryLimit".into(), "t", mem)),
            Version::V2 => p.push(("MemoryMax".into(), "t", mem)),
        }
        p.push((
            "TasksMax".into(),
            "t",
            l.pids.map_or(inf, |n| n.max(0).to_string()),
        ));
        p
    }
}

fn props_args(props: &[(String, &'static str, String)]) -> Vec<String> {
    let mut a = vec![props.len().to_string()];
    for (k, sig, v) in props {
        a.extend([k.clone(), sig.to_string(), v.clone()]);
    }
    a
}

impl Hierarchy for Systemd {
    fn ensure(&self, name: &Name, limits: &Limits) -> io::Result<()> {
        let unit = slice_name(name);
        let props = self.properties(limits);
        let exists = self
            .root
            .join(self.dir(name).trim_start_matches('/'))
            .is_dir();
        if exists {
            let mut args = vec![
                "SetUnitProperties".to_string(),
                "sba(sv)".into(),
                unit,
                "true".into(),
            ];
            args.extend(props_args(&props));
            return busctl(&args).map(|_| ());
        }
        let mut all = vec![
            (
                "Description".to_string(),
                "s",
                format!("bosun pod cgroup {unit}"),
            ),
            ("DefaultDependencies".to_string(), "b", "false".to_string()),
        ];
        all.extend(props);
        let mut args = vec![
            "StartTransientUnit".to_string(),
            "ssa(sv)a(sa(sv))".into(),
            unit,
            "replace".into(),
        ];
        args.extend(props_args(&all));
        args.push("0".into());
        busctl(&args).map(|_| ())
    }

    fn remove(&self, name: &Name) -> io::Result<()> {
        let unit = slice_name(name);
        match busctl(&["StopUnit".into(), "ss".into(), unit, "replace".into()]) {
            Ok(_) => Ok(()),
            Err(e) if e.to_string().contains("not loaded") => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn parent(&self, name: &Name) -> String {
        slice_name(name)
    }

    fn dir(&self, name: &Name) -> String {
        expand_slice(&slice_name(name)).unwrap_or_else(|| "/".to_string())
    }

    fn procs(&self, name: &Name) -> Vec<i32> {
        let mut out = Vec::new();
        read_procs(
            &self.root.join(self.dir(name).trim_start_matches('/')),
            &mut out,
        );
        out.sort_unstable();
        out.dedup();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name(parts: &[&str]) -> Name {
        parts.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn v1_cgroups_get_their_limits_and_go_from_every_hierarchy() {
        let tmp = tempfile::tempdir().expect("tmp");
        for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
            std::fs::create_dir_all(tmp.path().join(c)).expect("mkdir");
        }
        std::fs::write(tmp.path().join("cpu/cpu.cfs_period_us"), "").expect("w");
        let h = Cgroupfs::new(tmp.path(), Version::V1);
        let n = name(&["kubepods", "burstable", "pod1"]);
        // cfs files exist only where the kernel made them: fake them for the leaf.
        std::fs::create_dir_all(tmp.path().join("cpu/kubepods/burstable/pod1")).expect("mkdir");
        std::fs::write(
            tmp.path()
                .join("cpu/kubepods/burstable/pod1/cpu.cfs_period_us"),
            "",
        )
        .expect("w");
        let l = Limits {
            cpu_shares: Some(256),
            cpu_quota: Some(50_000),
            cpu_period: 100_000,
            memory: Some(64 << 20),
            pids: None,
        };
        h.ensure(&n, &l).expect("ensure");
        let read = |p: &str| std::fs::read_to_string(tmp.path().join(p)).expect(p);
        assert_eq!(read("cpu/kubepods/burstable/pod1/cpu.shares"), "256");
        assert_eq!(
            read("cpu/kubepods/burstable/pod1/cpu.cfs_quota_us"),
            "50000"
        );
        assert_eq!(
            read("memory/kubepods/burstable/pod1/memory.limit_in_bytes"),
            (64 << 20).to_string()
        );
        assert_eq!(read("pids/kubepods/burstable/pod1/pids.max"), "max");
        assert_eq!(h.parent(&n), "/kubepods/burstable/pod1");
        // runc made the pod's cgroup in another hierarchy too: removal takes it everywhere.
        std::fs::create_dir_all(tmp.path().join("freezer/kubepods/burstable/pod1")).expect("mkdir");
        for f in ["cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us"] {
            std::fs::remove_file(tmp.path().join("cpu/kubepods/burstable/pod1").join(f))
                .expect("rm");
        }
        std::fs::remove_file(
            tmp.path()
                .join("memory/kubepods/burstable/pod1/memory.limit_in_bytes"),
        )
        .expect("rm");
        std::fs::remove_file(tmp.path().join("pids/kubepods/burstable/pod1/pids.max")).expect("rm");
        h.remove(&n).expect("remove");
        for c in ["cpu", "cpuacct", "memory", "pids", "freezer"] {
            assert!(
                !tmp.path().join(c).join("kubepods/burstable/pod1").exists(),
                "{c}"
            );
        }
        h.remove(&n).expect("removing twice is fine");
    }

    #[test]
    fn v2_hands_controllers_down_and_converts_shares() {
        let tmp = tempfile::tempdir().expect("tmp");
        std::fs::write(
            tmp.path().join("cgroup.controllers"),
            "cpuset cpu io memory pids",
        )
        .expect("w");
        std::fs::write(tmp.path().join("cgroup.subtree_control"), "").expect("w");
        let h = Cgroupfs::new(tmp.path(), Version::V2);
        let n = name(&["kubepods"]);
        let l = Limits {
            cpu_shares: Some(1024),
            cpu_quota: None,
            cpu_period: 100_000,
            memory: Some(1 << 30),
            pids: Some(100),
        };
        h.ensure(&n, &l).expect("ensure");
        let read = |p: &str| std::fs::read_to_string(tmp.path().join(p)).expect(p);
        assert_eq!(read("cgroup.subtree_control"), "+cpu +memory +pids");
        assert_eq!(read("kubepods/cpu.weight"), "39");
        assert_eq!(read("kubepods/cpu.max"), "max 100000");
        assert_eq!(read("kubepods/memory.max"), (1u64 << 30).to_string());
        assert_eq!(read("kubepods/pids.max"), "100");
    }

    #[test]
    fn weights_and_slices_like_runc_and_the_kubelet() {
        assert_eq!(shares_to_weight(2), 1);
        assert_eq!(shares_to_weight(1024), 39);
        assert_eq!(shares_to_weight(262_144), 10_000);
        assert_eq!(
            slice_name(&name(&["kubepods", "burstable", "pod12-34"])),
            "kubepods-burstable-pod12_34.slice"
        );
        assert_eq!(slice_name(&name(&[])), "-.slice");
        let s = Systemd {
            root: PathBuf::from("/sys/fs/cgroup"),
            version: Version::V2,
        };
        assert_eq!(
            s.dir(&name(&["kubepods", "besteffort", "pod1"])),
            "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice"
        );
        let p = s.properties(&Limits {
            cpu_shares: Some(2),
            cpu_quota: Some(50_000),
            cpu_period: 100_000,
            memory: None,
            pids: None,
        });
        assert!(p.contains(&("CPUWeight".into(), "t", "1".into())));
        assert!(p.contains(&("CPUQuotaPerSecUSec".into(), "t", "500000".into())));
        assert!(p.contains(&("MemoryMax".into(), "t", u64::MAX.to_string())));
    }
}
