//! Tests of the restore side of the checkpoint archive: extraction refuses what would leave its directory, members missing are named, bind mounts to provide are the request's own.

use super::*;

/// A tar at `path` with raw member names (a name `tar::Builder` would refuse is written as is).
fn raw_tar(path: &Path, members: &[(&str, tar::EntryType, &[u8])]) {
    let mut b = tar::Builder::new(File::create(path).expect("test fixture"));
    for (name, kind, data) in members {
        let mut h = tar::Header::new_old();
        let bytes = name.as_bytes();
        h.as_old_mut().name[..bytes.len()].copy_from_slice(bytes);
        h.set_entry_type(*kind);
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        if *kind == tar::EntryType::Symlink {
            h.set_link_name("/etc").expect("test fixture");
        }
        h.set_cksum();
        b.append(&h, *data).expect("test fixture");
    }
    b.finish().expect("test fixture");
}

#[test]
fn extraction_refuses_members_leaving_the_directory() {
    let tmp = tempfile::tempdir().expect("test fixture");
    for (name, kind, want) in [
        (
            "../evil",
            tar::EntryType::Regular,
            "leaves the archive's directory",
        ),
        (
            "/etc/evil",
            tar::EntryType::Regular,
            "leaves the archive's directory",
        ),
        (
            "a/../../evil",
            tar::EntryType::Regular,
            "leaves the archive's directory",
        ),
        ("link", tar::EntryType::Symlink, "not a file or directory"),
        ("hard", tar::EntryType::Link, "not a file or directory"),
    ] {
        let archive = tmp.path().join("a.tar");
        raw_tar(
            &archive,
            &[
                ("config.dump", tar::EntryType::Regular, b"{}"),
                (name, kind, b"x"),
            ],
        );
        let dest = tmp.path().join("out");
        let e = extract(&archive, &dest).expect_err(name);
        assert_eq!(
            e.kind(),
            crate::error::ErrorKind::InvalidArgument,
            "{name}: {e}"
        );
        assert!(
            e.message().contains(want) && e.message().contains(name.trim_start_matches('/')),
            "{name}: {e}"
        );
        assert!(!tmp.path().join("evil").exists());
        std::fs::remove_dir_all(&dest).expect("test fixture");
    }
    let archive = tmp.path().join("junk.tar");
    std::fs::write(&archive, vec![7u8; 1500]).expect("test fixture");
    let e = extract(&archive, &tmp.path().join("junk")).expect_err("junk");
    assert!(e.message().contains("not a readable tar"), "{e}");
}

#[test]
fn extracted_members_are_loaded_and_missing_ones_named() {
    let tmp = tempfile::tempdir().expect("test fixture");
    let archive = tmp.path().join("a.tar");
    let spec = br#"{"ociVersion":"1.0.2","mounts":[
        {"destination":"/data","type":"bind","source":"/host/data","options":["rbind"]},
        {"destination":"/etc/hosts","type":"bind","source":"/x/hosts","options":["rbind"]},
        {"destination":"/proc","type":"proc","source":"proc"}]}"#;
    raw_tar(
        &archive,
        &[
            (
                "./config.dump",
                tar::EntryType::Regular,
                br#"{"id":"c1","runtime":"runc"}"#,
            ),
            ("spec.dump", tar::EntryType::Regular, spec),
            ("checkpoint", tar::EntryType::Directory, b""),
        ],
    );
    let dest = tmp.path().join("out");
    extract(&archive, &dest).expect("extract");
    let e = load("a.tar", &dest).expect_err("no inventory");
    assert!(
        e.message().contains("checkpoint/") && e.message().contains("inventory.img"),
        "{e}"
    );
    std::fs::write(dest.join("checkpoint/inventory.img"), b"").expect("test fixture");
    let x = load("a.tar", &dest).expect("load");
    assert_eq!(x.config.id, "c1");
    assert_eq!(required_binds(&x.spec), ["/data"]);
    std::fs::remove_file(dest.join("spec.dump")).expect("test fixture");
    let e = load("a.tar", &dest).expect_err("no spec");
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument);
    assert!(e.message().contains("spec.dump is missing"), "{e}");
}

#[test]
fn rootfs_changes_are_applied_inside_the_rootfs_only() {
    let tmp = tempfile::tempdir().expect("test fixture");
    let dir = tmp.path().join("ck");
    let rootfs = tmp.path().join("rootfs");
    std::fs::create_dir_all(rootfs.join("etc")).expect("test fixture");
    std::fs::create_dir_all(&dir).expect("test fixture");
    std::fs::write(rootfs.join("etc/group"), b"g").expect("test fixture");
    std::fs::write(tmp.path().join("outside"), b"o").expect("test fixture");
    raw_tar(
        &dir.join(ROOTFS_DIFF),
        &[
            ("data", tar::EntryType::Directory, b""),
            ("data/added", tar::EntryType::Regular, b"kept"),
        ],
    );
    std::fs::write(dir.join(DELETED_FILES), br#"["/etc/group"]"#).expect("test fixture");
    apply_rootfs(&dir, &rootfs).expect("apply");
    assert_eq!(
        std::fs::read(rootfs.join("data/added")).expect("added"),
        b"kept"
    );
    assert!(!rootfs.join("etc/group").exists());
    std::fs::write(dir.join(DELETED_FILES), br#"["/../outside"]"#).expect("test fixture");
    let e = apply_rootfs(&dir, &rootfs).expect_err("escape");
    assert!(e.message().contains("outside"), "{e}");
    assert!(tmp.path().join("outside").exists());
    raw_tar(
        &dir.join(ROOTFS_DIFF),
        &[("../outside2", tar::EntryType::Regular, b"x")],
    );
    std::fs::write(dir.join(DELETED_FILES), b"[]").expect("test fixture");
    let e = apply_rootfs(&dir, &rootfs).expect_err("escape");
    assert!(e.message().contains("leaves the root filesystem"), "{e}");
    assert!(!tmp.path().join("outside2").exists());
}
