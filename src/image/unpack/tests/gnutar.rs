//! Differential check: a tree archived by GNU tar unpacks exactly as GNU tar extracts it.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use rustix::fs::{chownat, mknodat, setxattr, AtFlags, FileType, Gid, Mode, Uid, XattrFlags, CWD};

use super::xattr;
use crate::image::snapshot::UnpackLimits;
use crate::image::unpack::apply;

/// What we compare per path: kind, mode, owner, mtime, size, content or target, one xattr, and
/// which other path shares the inode.
type Shape = BTreeMap<String, String>;

fn shape(root: &Path) -> Shape {
    let mut out = Shape::new();
    let mut inodes = BTreeMap::new();
    walk(root, root, &mut out, &mut inodes);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Shape, inodes: &mut BTreeMap<u64, String>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry"))
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let path = e.path();
        let rel = path
            .strip_prefix(root)
            .expect("prefix")
            .to_string_lossy()
            .into_owned();
        let m = fs::symlink_metadata(&path).expect("lstat");
        let ft = m.file_type();
        let body = if ft.is_file() {
            let first = inodes.entry(m.ino()).or_insert_with(|| rel.clone()).clone();
            format!(
                "file {:?} link-group {first}",
                fs::read(&path).expect("read")
            )
        } else if ft.is_symlink() {
            format!("symlink {:?}", fs::read_link(&path).expect("readlink"))
        } else if ft.is_dir() {
            "dir".to_string()
        } else {
            "special".to_string()
        };
        let mtime = if ft.is_dir() || ft.is_symlink() || ft.is_file() {
            m.mtime()
        } else {
            0
        };
        let x = xattr(&path, "user.origin").map(|v| String::from_utf8_lossy(&v).into_owned());
        let line = format!(
            "{body} mode {:o} owner {}:{} mtime {mtime} xattr {x:?}",
            m.mode() & 0o7777,
            m.uid(),
            m.gid()
        );
        out.insert(rel, line);
        if ft.is_dir() {
            walk(root, &path, out, inodes);
        }
    }
}

fn run(cmd: &mut Command) {
    let out = cmd.output().expect("spawn tar");
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn gnu_tar_archive_unpacks_as_gnu_tar_extracts_it() {
    if Command::new("tar").arg("--version").output().is_err() {
        eprintln!("SKIP gnu_tar_archive_unpacks_as_gnu_tar_extracts_it: no tar binary");
        return;
    }
    let tmp = tempfile::tempdir().expect("tempdir");
    let src = tmp.path().join("src");
    let deep = src
        .join("usr/share")
        .join("long-directory-name-".repeat(8))
        .join("leaf");
    fs::create_dir_all(&deep).expect("deep");
    fs::write(deep.join("file-with-a-long-name-too"), b"deep").expect("deep file");
    fs::write(src.join("usr/su"), b"suid").expect("su");
    fs::write(src.join("usr/a"), b"linked").expect("a");
    fs::hard_link(src.join("usr/a"), src.join("usr/b")).expect("hardlink");
    symlink("../usr/a", src.join("usr/rel")).expect("symlink");
    symlink("/nowhere", src.join("abs")).expect("symlink");
    mknodat(
        CWD,
        src.join("fifo"),
        FileType::Fifo,
        Mode::from_raw_mode(0o620),
        0,
    )
    .expect("fifo");
    setxattr(
        src.join("usr/a"),
        "user.origin",
        b"gnu",
        XattrFlags::empty(),
    )
    .expect("xattr");
    let (uid, gid) = (Uid::from_raw(1234), Gid::from_raw(5678));
    chownat(
        CWD,
        src.join("usr/su"),
        Some(uid),
        Some(gid),
        AtFlags::empty(),
    )
    .expect("chown");
    // After chown, which clears setuid.
    fs::set_permissions(src.join("usr/su"), fs::Permissions::from_mode(0o4755)).expect("suid");
    fs::create_dir(src.join("ro")).expect("ro");
    fs::write(src.join("ro/inside"), b"x").expect("inside");
    fs::set_permissions(src.join("ro"), fs::Permissions::from_mode(0o555)).expect("ro");

    let layer = tmp.path().join("layer.tar");
    run(Command::new("tar")
        .args([
            "--format=posix",
            "--xattrs",
            "--xattrs-include=user.*",
            "-C",
        ])
        .arg(&src)
        .arg("-cf")
        .arg(&layer)
        .arg("."));
    let by_tar = tmp.path().join("by-tar");
    fs::create_dir(&by_tar).expect("by-tar");
    run(Command::new("tar")
        .args([
            "--xattrs",
            "--xattrs-include=user.*",
            "--same-owner",
            "-xpf",
        ])
        .arg(&layer)
        .arg("-C")
        .arg(&by_tar));
    let by_us = tmp.path().join("by-us");
    fs::create_dir(&by_us).expect("by-us");
    let bytes = fs::read(&layer).expect("layer");
    apply(&bytes[..], &by_us, &UnpackLimits::default()).expect("apply");

    let (want, got) = (shape(&by_tar), shape(&by_us));
    assert!(want.len() >= 12, "{want:#?}");
    assert!(
        want["usr/a"].contains("xattr Some(\"gnu\")"),
        "{}",
        want["usr/a"]
    );
    assert!(
        want["usr/su"].contains("mode 4755 owner 1234:5678"),
        "{}",
        want["usr/su"]
    );
    assert!(
        want["usr/b"].contains("link-group usr/a"),
        "{}",
        want["usr/b"]
    );
    for (path, line) in &want {
        assert_eq!(got.get(path), Some(line), "{path}");
    }
    assert_eq!(got.len(), want.len(), "{got:#?}");
}
