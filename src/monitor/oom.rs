//! The OOM verdict: the container memory cgroup's `oom_kill` counter, before and after.
//!
//! The CRI `OOMKilled` reason must come from the cgroup, never be inferred from exit code 137.
//! runc places the container in `linux.cgroupsPath` of the bundle's `config.json`:
//! - `/a/b` (cgroupfs, absolute): `<hierarchy>/a/b`;
//! - `a/b` or empty (cgroupfs, relative): under runc's own cgroup (ours: we are its parent),
//!   empty meaning `<own>/<id>`;
//! - `slice:prefix:name` (systemd driver): `<expanded slice>/<prefix>-<name>.scope`, or
//!   `<expanded slice>/<name>` when the name is itself a `.slice`; an empty slice is
//!   `system.slice`. (runc's v1 systemd manager also strips pid 1's `init.scope`; not done.)
//!
//! The hierarchy is `<root>/memory` on cgroup v1 (counter in `memory.oom_control`) and `<root>`
//! on v2, detected by `<root>/cgroup.controllers` (counter in `memory.events`).
//!
//! A systemd scope on v2 also names its slice's `memory.events`: v2 counts a kill in every
//! ancestor too (unless mounted with `memory_localevents`), and the slice outlives the scope,
//! which systemd removes as soon as it is empty, sometimes before the monitor has read it.

use std::path::{Path, PathBuf};

use super::error::{Context, Error, Result};

/// Where one container's OOM-kill counter is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OomCounter {
    file: PathBuf,
    /// The enclosing slice's `memory.events` (v2 systemd scopes only, not the root).
    parent: Option<PathBuf>,
}

impl OomCounter {
    /// The counter of the container created from `bundle` under the real `/sys/fs/cgroup`.
    pub fn for_bundle(bundle: &Path, id: &str) -> Result<Self> {
        let config = bundle.join("config.json");
        let text = std::fs::read(&config).with_context(|| format!("read {}", config.display()))?;
        let spec: serde_json::Value =
            serde_json::from_slice(&text).with_context(|| format!("parse {}", config.display()))?;
        let cgroups_path = spec["linux"]["cgroupsPath"].as_str().unwrap_or("");
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
        let mut counter = Self::locate(Path::new("/sys/fs/cgroup"), cgroups_path, id, &own)?;
        // The mount table grows with every pod (pinned namespaces, rootfs overlays): read it
        // only where it can change the answer, not in every monitor.
        if counter.parent.is_some() {
            let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            if local_events_only(&mounts) {
                counter.parent = None;
            }
        }
        Ok(counter)
    }

    /// The counter for `cgroups_path` under the cgroup mount `root`; `own` is the text of
    /// `/proc/self/cgroup` (for relative paths).
    pub fn locate(root: &Path, cgroups_path: &str, id: &str, own: &str) -> Result<Self> {
        let v2 = root.join("cgroup.controllers").exists();
        let dir = cgroup_dir(cgroups_path, id, &own_cgroup(own, v2))
            .with_context(|| format!("cgroupsPath {cgroups_path:?}"))?;
        let events = |dir: &str| root.join(dir.trim_start_matches('/')).join("memory.events");
        if !v2 {
            let file = root
                .join("memory")
                .join(dir.trim_start_matches('/'))
                .join("memory.oom_control");
            return Ok(OomCounter { file, parent: None });
        }
        let scope = cgroups_path.split(':').count() == 3;
        let parent = match dir.rsplit_once('/') {
            Some((parent, _)) if scope && !parent.is_empty() => Some(events(parent)),
            _ => None,
        };
        Ok(OomCounter {
            file: events(&dir),
            parent,
        })
    }

    /// The file the counter is read from.
    pub fn file(&self) -> &Path {
        &self.file
    }

    /// The enclosing slice's `memory.events`, whose count includes the container's kills.
    pub fn parent(&self) -> Option<&Path> {
        self.parent.as_deref()
    }

    /// The current `oom_kill` count, if the file is readable and has one.
    pub fn read(&self) -> Option<u64> {
        read_count(&self.file)
    }

    /// The enclosing slice's current `oom_kill` count (see [`OomCounter::parent`]).
    pub fn read_parent(&self) -> Option<u64> {
        read_count(self.parent.as_deref()?)
    }
}

fn read_count(file: &Path) -> Option<u64> {
    parse_oom_kill(&std::fs::read_to_string(file).ok()?)
}

/// Whether `/sys/fs/cgroup` is a cgroup2 mount with `memory_localevents` (from the text of
/// `/proc/self/mounts`): then a slice's `memory.events` counts only its own processes.
fn local_events_only(mounts: &str) -> bool {
    mounts.lines().any(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        matches!(f[..], [_, "/sys/fs/cgroup", "cgroup2", opts, ..]
            if opts.split(',').any(|o| o == "memory_localevents"))
    })
}

/// The `oom_kill N` line of `memory.oom_control` (v1) or `memory.events` (v2).
pub fn parse_oom_kill(text: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (key, value) = line.split_once(' ')?;
        (key == "oom_kill").then(|| value.trim().parse().ok())?
    })
}

/// The cgroup directory, relative to the hierarchy root, starting with `/`.
fn cgroup_dir(cgroups_path: &str, id: &str, own: &str) -> Result<String> {
    let parts: Vec<&str> = cgroups_path.split(':').collect();
    if let [slice, prefix, name] = parts[..] {
        let slice = if slice.is_empty() {
            "system.slice"
        } else {
            slice
        };
        let unit = if name.ends_with(".slice") {
            name.to_string()
        } else {
            format!("{prefix}-{name}.scope")
        };
        return Ok(join(&expand_slice(slice)?, &unit));
    }
    if cgroups_path.contains(':') {
        return Err(Error::msg("systemd form must be slice:prefix:name"));
    }
    Ok(match cgroups_path {
        "" => join(own, id),
        p if p.starts_with('/') => join("/", p),
        p => join(own, p),
    })
}

/// `a-b-c.slice` → `/a.slice/a-b.slice/a-b-c.slice`, `-.slice` → `/` (systemd's naming).
fn expand_slice(slice: &str) -> Result<String> {
    let invalid = || Error::msg(format!("invalid slice name {slice:?}"));
    let name = slice.strip_suffix(".slice").ok_or_else(invalid)?;
    if name.is_empty() || slice.contains('/') {
        return Err(invalid());
    }
    if name == "-" {
        return Ok("/".into());
    }
    let mut path = String::new();
    let mut prefix = String::new();
    for component in name.split('-') {
        if component.is_empty() {
            return Err(invalid());
        }
        path.push('/');
        path.push_str(&prefix);
        path.push_str(component);
        path.push_str(".slice");
        prefix.push_str(component);
        prefix.push('-');
    }
    Ok(path)
}

/// Our cgroup in the memory hierarchy (v1) or the unified one (v2), from `/proc/self/cgroup`.
fn own_cgroup(proc_self_cgroup: &str, v2: bool) -> String {
    proc_self_cgroup
        .lines()
        .find_map(|line| {
            let mut f = line.splitn(3, ':');
            let (hier, controllers, path) = (f.next()?, f.next()?, f.next()?);
            let hit = if v2 {
                hier == "0" && controllers.is_empty()
            } else {
                controllers.split(',').any(|c| c == "memory")
            };
            hit.then(|| path.to_string())
        })
        .unwrap_or_else(|| "/".into())
}

/// Joins cgroup path pieces into one clean absolute path (no `.`/`..`/empty components).
fn join(base: &str, rest: &str) -> String {
    let mut out: Vec<&str> = Vec::new();
    for c in base.split('/').chain(rest.split('/')) {
        match c {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            c => out.push(c),
        }
    }
    format!("/{}", out.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const OWN_V1: &str = "9:name=systemd:/\n4:memory:/process_api/5b6c\n1:cpu:/\n0::/\n";
    const OWN_V2: &str = "0::/user.slice/session-1.scope\n";

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write");
    }

    #[test]
    fn v1_absolute_path_reads_memory_oom_control() {
        let root = tempfile::tempdir().expect("tempdir");
        let file = root.path().join("memory/bosun/abc/memory.oom_control");
        write(&file, "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n");
        let c = OomCounter::locate(root.path(), "/bosun/abc", "abc", OWN_V1).expect("locate");
        assert_eq!(c.file(), file);
        assert_eq!(c.read(), Some(2));
    }

    #[test]
    fn v2_is_detected_by_cgroup_controllers_and_reads_memory_events() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("cgroup.controllers"), "cpu memory pids\n");
        let file = root.path().join("bosun/abc/memory.events");
        write(
            &file,
            "low 0\nhigh 0\nmax 4\noom 1\noom_kill 1\noom_group_kill 0\n",
        );
        let c = OomCounter::locate(root.path(), "/bosun/abc", "abc", OWN_V2).expect("locate");
        assert_eq!(c.file(), file);
        assert_eq!(c.read(), Some(1));
    }

    #[test]
    fn systemd_form_expands_the_slice_and_names_the_scope() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("cgroup.controllers"), "memory\n");
        let c = OomCounter::locate(
            root.path(),
            "kubepods-besteffort-pod12.slice:cri-containerd:abc",
            "abc",
            OWN_V2,
        )
        .expect("locate");
        assert_eq!(
            c.file(),
            root.path().join(
                "kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12.slice/\
                 cri-containerd-abc.scope/memory.events"
            )
        );
        assert_eq!(
            c.parent(),
            Some(
                root.path()
                    .join(
                        "kubepods.slice/kubepods-besteffort.slice/\
                         kubepods-besteffort-pod12.slice/memory.events"
                    )
                    .as_path()
            ),
            "the pod slice outlives the scope"
        );
        assert_eq!(
            cgroup_dir(":runc:abc", "abc", "/").expect("default slice"),
            "/system.slice/runc-abc.scope"
        );
        assert_eq!(
            cgroup_dir("-.slice:p:x", "x", "/").expect("root slice"),
            "/p-x.scope"
        );
        assert_eq!(
            cgroup_dir("a.slice:p:b.slice", "x", "/").expect("slice unit"),
            "/a.slice/b.slice"
        );
    }

    #[test]
    fn only_v2_scopes_below_the_root_read_their_slice() {
        let root = tempfile::tempdir().expect("tempdir");
        write(&root.path().join("cgroup.controllers"), "memory\n");
        // cgroupfs: the cgroup lives until `runc delete`, its own file is enough.
        let c = OomCounter::locate(root.path(), "/bosun/abc", "abc", OWN_V2).expect("locate");
        assert_eq!(c.parent(), None);
        // A scope in the root slice: the root has no memory.events.
        let c = OomCounter::locate(root.path(), "-.slice:p:x", "x", OWN_V2).expect("locate");
        assert_eq!(c.parent(), None);
        assert_eq!(c.read_parent(), None);
        let v1 = tempfile::tempdir().expect("tempdir");
        let c =
            OomCounter::locate(v1.path(), "system.slice:crio:abc", "abc", OWN_V1).expect("locate");
        assert_eq!(
            c.parent(),
            None,
            "v1 counts no kill of a child in its parent"
        );
    }

    #[test]
    fn memory_localevents_mounts_are_recognised() {
        let plain = "cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime,nsdelegate,memory_recursiveprot 0 0\n";
        let local = "proc /proc proc rw 0 0\n\
                     cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate,memory_localevents 0 0\n";
        assert!(!local_events_only(plain));
        assert!(local_events_only(local));
        assert!(!local_events_only(
            "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,memory_localevents 0 0\n"
        ));
        assert!(!local_events_only(""));
    }

    #[test]
    fn systemd_form_on_v1_lives_under_the_memory_hierarchy() {
        let root = tempfile::tempdir().expect("tempdir");
        let c = OomCounter::locate(root.path(), "system.slice:crio:abc", "abc", OWN_V1)
            .expect("locate");
        assert_eq!(
            c.file(),
            root.path()
                .join("memory/system.slice/crio-abc.scope/memory.oom_control")
        );
    }

    #[test]
    fn bad_slices_are_rejected() {
        for bad in [
            "a--b.slice:p:x",
            "-a.slice:p:x",
            "a.scope:p:x",
            ".slice:p:x",
            "a/b.slice:p:x",
        ] {
            let err = cgroup_dir(bad, "x", "/")
                .expect_err("must fail")
                .to_string();
            assert!(err.starts_with("invalid slice name"), "{bad}: {err}");
        }
        assert!(cgroup_dir("a:b", "x", "/").is_err());
    }

    #[test]
    fn relative_and_empty_paths_are_under_our_own_cgroup() {
        assert_eq!(own_cgroup(OWN_V1, false), "/process_api/5b6c");
        assert_eq!(own_cgroup(OWN_V1, true), "/");
        assert_eq!(own_cgroup(OWN_V2, true), "/user.slice/session-1.scope");
        assert_eq!(own_cgroup("", false), "/");
        assert_eq!(
            cgroup_dir("pods/abc", "abc", "/process_api/5b6c").expect("rel"),
            "/process_api/5b6c/pods/abc"
        );
        assert_eq!(cgroup_dir("", "abc", "/p").expect("empty"), "/p/abc");
        assert_eq!(
            cgroup_dir("/a/../b/./c/", "x", "/p").expect("clean"),
            "/b/c"
        );
        assert_eq!(own_cgroup("5:cpuacct,memory:/x\n", false), "/x");
    }

    #[test]
    fn counter_parsing_wants_the_oom_kill_line() {
        assert_eq!(
            parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"),
            Some(7)
        );
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\n"), None); // kernel < 4.13
        assert_eq!(parse_oom_kill("oom 3\noom_kill x\n"), None);
        assert_eq!(parse_oom_kill(""), None);
    }

    #[test]
    fn the_cgroups_path_comes_from_the_bundle_config() {
        let bundle = tempfile::tempdir().expect("tempdir");
        write(
            &bundle.path().join("config.json"),
            r#"{"linux":{"cgroupsPath":"/bosun-test/xyz"}}"#,
        );
        let c = OomCounter::for_bundle(bundle.path(), "xyz").expect("locate");
        assert!(
            c.file().ends_with("bosun-test/xyz/memory.oom_control")
                || c.file().ends_with("bosun-test/xyz/memory.events")
        );
        let err =
            OomCounter::for_bundle(Path::new("/nonexistent-bundle"), "x").expect_err("must fail");
        assert!(err
            .to_string()
            .starts_with("read /nonexistent-bundle/config.json: "));
    }
}
