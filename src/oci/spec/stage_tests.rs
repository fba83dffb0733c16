//! Unit tests for staged mounts: nothing staged when the runtime does it all, recursive read-only staging, unstaging one container or all.

use std::path::PathBuf;

use oci_spec::runtime::{LinuxIdMappingBuilder, Mount, Spec};
use rustix::mount::{MountFlags, UnmountFlags};

use super::*;

fn bind(dest: &str, source: &Path, options: &[&str]) -> Mount {
    let mut m = Mount::default();
    m.set_destination(PathBuf::from(dest));
    m.set_typ(Some("bind".into()));
    m.set_source(Some(source.to_path_buf()));
    m.set_options(Some(options.iter().map(|o| o.to_string()).collect()));
    m
}

fn spec_with(mounts: Vec<Mount>) -> Spec {
    let mut s = Spec::default();
    s.set_mounts(Some(mounts));
    s
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

#[test]
fn nothing_is_staged_when_the_runtime_does_it_all() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut m = bind("/data", dir.path(), &["rbind", "rprivate", "rro", "ridmap"]);
    let range = LinuxIdMappingBuilder::default()
        .container_id(0u32)
        .host_id(1000u32)
        .size(10u32)
        .build()
        .expect("range");
    m.set_uid_mappings(Some(vec![range]));
    m.set_gid_mappings(Some(vec![range]));
    let mut spec = spec_with(vec![m.clone()]);
    let all = RuntimeMountFeatures {
        rro: true,
        idmap: true,
    };
    let mut ns = IdmapNamespaces::new(None, Path::new("/nonexistent/bosun"));
    let n = stage_mounts(&mut spec, all, &dir.path().join("stage"), &mut ns).expect("stage");
    assert_eq!(n, 0);
    assert_eq!(spec.mounts().as_ref().expect("mounts")[0], m);
    unstage(&dir.path().join("stage")).expect("unstage of nothing");
}

/// A host dir with a tmpfs mounted below it (critest's recursive read-only fixture), removed on
/// drop.
struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().expect("tmp");
        let sub = dir.path().join("src/tmpfs");
        std::fs::create_dir_all(&sub).expect("mkdir");
        rustix::mount::mount("none", &sub, "tmpfs", MountFlags::empty(), c"size=64k")
            .expect("mount tmpfs");
        Fixture { dir }
    }

    fn source(&self) -> PathBuf {
        self.dir.path().join("src")
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = unstage(&self.dir.path().join("stage"));
        let _ = rustix::mount::unmount(self.source().join("tmpfs"), UnmountFlags::DETACH);
    }
}

#[test]
fn rro_is_staged_read_only_all_the_way_down_and_unstaged() {
    if !is_root() {
        eprintln!("SKIP rro_is_staged_read_only_all_the_way_down_and_unstaged: needs root");
        return;
    }
    let fx = Fixture::new();
    let stage = fx.dir.path().join("stage");
    let mut spec = spec_with(vec![
        bind("/plain", &fx.source(), &["rbind", "rprivate", "ro"]),
        bind("/data", &fx.source(), &["rbind", "rprivate", "rro"]),
    ]);
    let mut ns = IdmapNamespaces::new(None, Path::new("/nonexistent/bosun"));
    let none = RuntimeMountFeatures::default();
    assert_eq!(
        stage_mounts(&mut spec, none, &stage, &mut ns).expect("stage"),
        1
    );
    let mounts = spec.mounts().clone().expect("mounts");
    assert_eq!(mounts[0].source().as_deref(), Some(fx.source().as_path()));
    let staged = stage.join("m1");
    assert_eq!(mounts[1].source().as_deref(), Some(staged.as_path()));
    assert_eq!(
        mounts[1].options().clone().unwrap_or_default(),
        ["rbind", "rprivate", "ro"]
    );
    // Both the top and the tmpfs below it refuse writes; the host's tmpfs does not.
    for p in [staged.join("f"), staged.join("tmpfs/f")] {
        let e = std::fs::write(&p, "x").expect_err("read-only");
        assert_eq!(e.raw_os_error(), Some(libc::EROFS), "{}", p.display());
    }
    std::fs::write(fx.source().join("tmpfs/f"), "x").expect("host side writable");
    unstage(&stage).expect("unstage");
    assert!(crate::oci::spec::mounts::mount_points_under(&stage).is_empty());
    assert!(!stage.exists());
    unstage(&stage).expect("idempotent");
}

#[test]
fn unstage_removes_a_stage_dir_without_mounts() {
    let dir = tempfile::tempdir().expect("tmp");
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(stage.join("m0")).expect("mkdir");
    unstage(&stage).expect("unstage");
    assert!(!stage.exists());
}

#[test]
fn unstage_all_detaches_only_stage_mounts_of_containers_done_with_them() {
    if !is_root() {
        eprintln!(
            "SKIP unstage_all_detaches_only_stage_mounts_of_containers_done_with_them: needs root"
        );
        return;
    }
    let fx = Fixture::new();
    let containers = fx.dir.path().join("containers");
    let staged = containers.join("c1/stage/m0");
    let waiting = containers.join("c3/stage/m0");
    let other = containers.join("c2/bundle/rootfs");
    std::fs::create_dir_all(&other).expect("mkdir");
    let attrs = Attributes {
        read_only: true,
        idmap: None,
        private: true,
    };
    clone_to(&fx.source(), &staged, false, &attrs).expect("stage");
    clone_to(&fx.source(), &waiting, false, &attrs).expect("a stage still needed");
    clone_to(&fx.source(), &other, false, &attrs).expect("a container's own mount");
    // c3 is created, not started: its stage waits for its `runc run`.
    assert_eq!(unstage_all(&containers, |id| id != "c3"), 1);
    let mut left = crate::oci::spec::mounts::mount_points_under(&containers);
    left.sort();
    assert_eq!(left, vec![other.clone(), waiting.clone()]);
    for p in [&other, &waiting] {
        let _ = rustix::mount::unmount(p, UnmountFlags::DETACH);
    }
}
