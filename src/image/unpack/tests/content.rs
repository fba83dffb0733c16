//! Honest layers: every member kind comes out with its content and metadata.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};

use tar::EntryType;

use super::{xattr, Fixture, TarBall, MTIME};
use crate::image::snapshot::UnpackLimits;
use crate::image::unpack::apply;

#[test]
fn files_keep_content_mode_owner_mtime_and_setuid() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .raw("bin/su", EntryType::Regular, b"#!suid", |h| {
            h.set_mode(0o4755);
            h.set_uid(1000);
            h.set_gid(1001);
            h.set_mtime(1_234_567_890);
        })
        .raw("tmp/", EntryType::Directory, b"", |h| h.set_mode(0o1777))
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    let su = fs::symlink_metadata(fs_dir.join("bin/su")).expect("su");
    assert_eq!(fs::read(fs_dir.join("bin/su")).expect("read"), b"#!suid");
    assert_eq!(su.mode() & 0o7777, 0o4755);
    assert_eq!((su.uid(), su.gid()), (1000, 1001));
    assert_eq!(su.mtime(), 1_234_567_890);
    assert_eq!(
        fs::metadata(fs_dir.join("tmp")).expect("tmp").mode() & 0o7777,
        0o1777
    );
    // bin/ was not listed: created 0755 whatever the umask.
    assert_eq!(
        fs::metadata(fs_dir.join("bin")).expect("bin").mode() & 0o7777,
        0o755
    );
}

#[test]
fn pax_records_give_long_names_large_ids_and_fractional_mtimes() {
    let fx = Fixture::new();
    let long = format!("{}/file", "d".repeat(150));
    let tar = TarBall::new()
        .pax(&[
            ("path", long.as_bytes()),
            ("uid", b"3000000"),
            ("mtime", b"1700000000.25"),
        ])
        .file("short", b"long one")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    let meta = fs::metadata(fs_dir.join(&long)).expect("long name");
    assert_eq!(meta.uid(), 3_000_000);
    assert_eq!(
        (meta.mtime(), meta.mtime_nsec()),
        (1_700_000_000, 250_000_000)
    );
    assert!(!fs_dir.join("short").exists());
}

#[test]
fn read_only_directories_get_their_mode_after_their_children() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .dir("ro/", 0o555)
        .dir("ro/sub/", 0o555)
        .file("ro/sub/f", b"inside")
        .file("ro/g", b"also")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    for d in ["ro", "ro/sub"] {
        let m = fs::metadata(fs_dir.join(d)).expect(d);
        assert_eq!(m.mode() & 0o7777, 0o555, "{d}");
        assert_eq!(
            m.mtime(),
            MTIME as i64,
            "{d}: mtime changed by its children"
        );
    }
    assert_eq!(fs::read(fs_dir.join("ro/sub/f")).expect("f"), b"inside");
    assert_eq!(fs::read(fs_dir.join("ro/g")).expect("g"), b"also");
}

#[test]
fn directories_merge_and_later_members_replace_earlier_ones() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .dir("d/", 0o700)
        .file("d/a", b"first")
        .dir("d/", 0o750)
        .file("d/a", b"second")
        .file("x", b"file")
        .dir("x/", 0o755)
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert_eq!(fs::read(fs_dir.join("d/a")).expect("a"), b"second");
    assert_eq!(
        fs::metadata(fs_dir.join("d")).expect("d").mode() & 0o777,
        0o750
    );
    assert!(fs::metadata(fs_dir.join("x")).expect("x").is_dir());
}

#[test]
fn symlinks_keep_their_target_verbatim_and_their_owner() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .raw("abs", EntryType::Symlink, b"", |h| {
            h.set_link_name("/etc/does-not-exist").expect("link");
            h.set_uid(1000);
            h.set_gid(1000);
        })
        .symlink("rel", "../../../x")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert_eq!(
        fs::read_link(fs_dir.join("abs")).expect("abs").to_str(),
        Some("/etc/does-not-exist")
    );
    assert_eq!(
        fs::read_link(fs_dir.join("rel")).expect("rel").to_str(),
        Some("../../../x")
    );
    let m = fs::symlink_metadata(fs_dir.join("abs")).expect("abs");
    assert_eq!((m.uid(), m.gid(), m.mtime()), (1000, 1000, MTIME as i64));
}

#[test]
fn hard_links_share_the_inode_and_fifos_are_made() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .file("usr/bin/a", b"binary")
        .hardlink("usr/bin/b", "usr/bin/a")
        .hardlink("/usr/bin/c", "./usr/bin/a")
        .raw("run/fifo", EntryType::Fifo, b"", |h| h.set_mode(0o640))
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    let ino = |p: &str| fs::metadata(fs_dir.join(p)).expect(p).ino();
    assert_eq!(ino("usr/bin/a"), ino("usr/bin/b"));
    assert_eq!(ino("usr/bin/a"), ino("usr/bin/c"));
    assert_eq!(
        fs::metadata(fs_dir.join("usr/bin/a")).expect("a").nlink(),
        3
    );
    let fifo = fs::symlink_metadata(fs_dir.join("run/fifo")).expect("fifo");
    assert!(fifo.file_type().is_fifo());
    assert_eq!(fifo.mode() & 0o7777, 0o640);
}

#[test]
fn user_xattrs_are_set_and_overlay_ones_from_the_image_are_not() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .pax(&[
            ("SCHILY.xattr.user.test", b"hello"),
            ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
        ])
        .file("f", b"x")
        .pax(&[("SCHILY.xattr.user.dir", b"yes")])
        .dir("d/", 0o555)
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert_eq!(
        xattr(&fs_dir.join("f"), "user.test").as_deref(),
        Some(&b"hello"[..])
    );
    assert_eq!(xattr(&fs_dir.join("f"), "trusted.overlay.opaque"), None);
    assert_eq!(
        xattr(&fs_dir.join("d"), "user.dir").as_deref(),
        Some(&b"yes"[..])
    );
}

#[test]
fn whiteouts_become_overlay_devices_and_opaque_dirs_get_the_xattr() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .dir("etc/", 0o755)
        .file("etc/.wh.passwd", b"")
        .file("gone/.wh.deep", b"")
        .dir("var/", 0o755)
        .file("var/.wh..wh..opq", b"")
        .file("var/new", b"x")
        .file("new/.wh..wh..opq", b"")
        .file(".wh..wh.plnk", b"")
        .device("explicit", EntryType::Char, 0, 0)
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    for w in ["etc/passwd", "gone/deep", "explicit"] {
        let m = fs::symlink_metadata(fs_dir.join(w)).expect(w);
        assert!(m.file_type().is_char_device(), "{w}");
        assert_eq!(m.rdev(), 0, "{w}");
    }
    assert!(!fs_dir.join("etc/.wh.passwd").exists());
    assert!(!fs_dir.join("var/.wh..wh..opq").exists());
    assert!(!fs_dir.join(".wh..wh.plnk").exists());
    assert_eq!(
        xattr(&fs_dir.join("var"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert_eq!(
        xattr(&fs_dir.join("new"), "trusted.overlay.opaque").as_deref(),
        Some(&b"y"[..])
    );
    assert!(fs_dir.join("var/new").exists());
}

#[test]
fn root_entry_sets_the_root_metadata() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let tar = TarBall::new().dir("./", 0o711).file("./f", b"x").finish();
    let stats = apply(&tar[..], tmp.path(), &UnpackLimits::default()).expect("apply");
    assert_eq!((stats.entries, stats.dirs, stats.files), (2, 1, 1));
    let m = fs::metadata(tmp.path()).expect("root");
    assert_eq!(m.permissions().mode() & 0o7777, 0o711);
    assert_eq!(m.mtime(), MTIME as i64);
}

#[test]
fn apply_reads_the_stream_to_its_end() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut tar = TarBall::new().file("f", b"x").finish();
    tar.extend_from_slice(&[0u8; 9 * 1024]); // record padding after the end blocks
    let mut reader = &tar[..];
    apply(&mut reader, tmp.path(), &UnpackLimits::default()).expect("apply");
    assert!(reader.is_empty(), "{} bytes left unread", reader.len());
}
