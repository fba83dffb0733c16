//! Hostile layers: each is refused (or safely contained) and nothing outside the snapshot changes.

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;

use tar::EntryType;

use super::{Fixture, TarBall};
use crate::error::ErrorKind;
use crate::image::snapshot::UnpackLimits;

fn rejected(tar: &TarBall, entry: &str, reason: &str) {
    let fx = Fixture::new();
    let msg = fx.unpack_err(&tar.finish(), ErrorKind::InvalidArgument);
    assert!(
        msg.contains(&format!("entry {entry:?}")),
        "error does not name {entry:?}: {msg}"
    );
    assert!(msg.contains(reason), "error does not say {reason:?}: {msg}");
}

#[test]
fn dotdot_escape_is_rejected() {
    rejected(
        TarBall::new().file("../escape", b"x"),
        "../escape",
        "escapes the layer root",
    );
}

#[test]
fn inner_dotdot_escape_is_rejected() {
    rejected(
        TarBall::new().file("a/../../escape", b"x"),
        "a/../../escape",
        "escapes the layer root",
    );
}

#[test]
fn absolute_name_lands_inside_the_layer() {
    let fx = Fixture::new();
    let fs_dir = fx.unpack_ok(&TarBall::new().file("/etc/escape", b"inside").finish());
    assert_eq!(
        fs::read(fs_dir.join("etc/escape")).expect("inside"),
        b"inside"
    );
    assert!(!Path::new("/etc/escape").exists());
}

#[test]
fn absolute_symlink_then_file_is_rejected() {
    let fx = Fixture::new();
    let target = fx.outside_dir.to_str().expect("utf8").to_string();
    let tar = TarBall::new()
        .symlink("evil", &target)
        .file("evil/pwned", b"x")
        .finish();
    let msg = fx.unpack_err(&tar, ErrorKind::InvalidArgument);
    assert!(
        msg.contains("entry \"evil/pwned\"") && msg.contains("symlink"),
        "{msg}"
    );
}

#[test]
fn relative_symlink_then_file_is_rejected() {
    rejected(
        TarBall::new()
            .symlink("evil", "../../..")
            .file("evil/pwned", b"x"),
        "evil/pwned",
        "goes through a symlink",
    );
}

#[test]
fn symlink_then_directory_then_file_is_rejected() {
    rejected(
        TarBall::new()
            .symlink("evil", "/")
            .dir("evil/sub/", 0o755)
            .file("evil/sub/f", b"x"),
        "evil/sub/",
        "goes through a symlink",
    );
}

#[test]
fn hardlink_outside_the_root_is_rejected() {
    rejected(
        TarBall::new().hardlink("link", "../../outside-file"),
        "link",
        "escapes the layer root",
    );
}

#[test]
fn hardlink_to_a_host_path_missing_in_the_layer_is_rejected() {
    rejected(
        TarBall::new().hardlink("shadow", "/etc/shadow"),
        "shadow",
        "does not exist",
    );
}

#[test]
fn hardlink_to_a_host_path_links_the_layers_own_file() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .file("etc/shadow", b"in-layer")
        .hardlink("copy", "/etc/shadow")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    let link = fs::metadata(fs_dir.join("copy")).expect("link");
    assert_eq!(fs::read(fs_dir.join("copy")).expect("read"), b"in-layer");
    assert_eq!(
        link.ino(),
        fs::metadata(fs_dir.join("etc/shadow")).expect("own").ino()
    );
    if let Ok(host) = fs::metadata("/etc/shadow") {
        assert_ne!(
            (host.dev(), host.ino()),
            (link.dev(), link.ino()),
            "linked the host's file"
        );
    }
}

#[test]
fn hardlink_through_a_symlinked_parent_is_rejected() {
    let fx = Fixture::new();
    let target = fx.tmp.path().to_str().expect("utf8").to_string();
    let tar = TarBall::new()
        .symlink("up", &target)
        .hardlink("x", "up/outside-file")
        .finish();
    let msg = fx.unpack_err(&tar, ErrorKind::InvalidArgument);
    assert!(
        msg.contains("entry \"x\"") && msg.contains("symlink"),
        "{msg}"
    );
}

#[test]
fn hardlink_to_a_directory_is_rejected() {
    rejected(
        TarBall::new().dir("d/", 0o755).hardlink("l", "d"),
        "l",
        "is a directory",
    );
}

#[test]
fn symlink_loop_is_rejected() {
    rejected(
        TarBall::new()
            .symlink("a", "b")
            .symlink("b", "a")
            .file("a/file", b"x"),
        "a/file",
        "goes through a symlink",
    );
}

#[test]
fn file_over_a_symlink_replaces_the_link_not_its_target() {
    let fx = Fixture::new();
    let outside = fx.outside_file.to_str().expect("utf8").to_string();
    let tar = TarBall::new()
        .symlink("f", &outside)
        .file("f", b"new")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    let meta = fs::symlink_metadata(fs_dir.join("f")).expect("f");
    assert!(meta.is_file());
    assert_eq!(fs::read(fs_dir.join("f")).expect("f"), b"new");
}

#[test]
fn directory_over_a_symlink_replaces_the_link() {
    let fx = Fixture::new();
    let outside = fx.outside_dir.to_str().expect("utf8").to_string();
    let tar = TarBall::new()
        .symlink("d", &outside)
        .dir("d/", 0o777)
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert!(fs::symlink_metadata(fs_dir.join("d")).expect("d").is_dir());
    assert_eq!(
        fs::metadata(&fx.outside_dir).expect("outside").mode() & 0o777,
        0o755
    );
}

#[test]
fn whiteout_over_a_symlink_replaces_the_link() {
    let fx = Fixture::new();
    let outside = fx.outside_file.to_str().expect("utf8").to_string();
    let tar = TarBall::new()
        .symlink("w", &outside)
        .file(".wh.w", b"")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert!(fs::symlink_metadata(fs_dir.join("w"))
        .expect("w")
        .file_type()
        .is_char_device());
}

#[test]
fn layer_over_the_byte_limit_is_rejected() {
    let fx = Fixture::with_limits(UnpackLimits {
        max_layer_bytes: 1000,
        ..UnpackLimits::default()
    });
    let tar = TarBall::new()
        .file("small", &[1; 600])
        .file("big", &[2; 600])
        .finish();
    let msg = fx.unpack_err(&tar, ErrorKind::ResourceExhausted);
    assert!(
        msg.contains("entry \"big\"") && msg.contains("exceeds 1000 bytes"),
        "{msg}"
    );
}

#[test]
fn layer_with_too_many_entries_is_rejected() {
    let fx = Fixture::with_limits(UnpackLimits {
        max_entries: 3,
        ..UnpackLimits::default()
    });
    let mut tar = TarBall::new();
    for i in 0..5 {
        tar.file(&format!("f{i}"), b"");
    }
    let msg = fx.unpack_err(&tar.finish(), ErrorKind::ResourceExhausted);
    assert!(
        msg.contains("entry \"f3\"") && msg.contains("more than 3 entries"),
        "{msg}"
    );
}

#[test]
fn long_names_over_the_limit_are_rejected() {
    let fx = Fixture::with_limits(UnpackLimits {
        max_path_len: 20,
        ..UnpackLimits::default()
    });
    let name = "d/".repeat(15) + "f";
    let tar = TarBall::new().file(&name, b"").finish();
    fx.unpack_err(&tar, ErrorKind::ResourceExhausted);
}

#[test]
fn oversized_pax_header_is_rejected_before_it_is_buffered() {
    let fx = Fixture::new();
    let huge = vec![b'a'; 2 << 20];
    let tar = TarBall::new()
        .pax(&[("comment", &huge)])
        .file("f", b"")
        .finish();
    let msg = fx.unpack_err(&tar, ErrorKind::ResourceExhausted);
    assert!(msg.contains("headers exceed"), "{msg}");
}

#[test]
fn pax_path_cannot_escape_either() {
    rejected(
        TarBall::new()
            .pax(&[("path", b"x/../../escape")])
            .file("innocent", b"x"),
        "x/../../escape",
        "escapes",
    );
}

#[test]
fn device_nodes_are_skipped_not_created() {
    let fx = Fixture::new();
    let tar = TarBall::new()
        .device("dev/sda", EntryType::Block, 8, 0)
        .device("dev/mem", EntryType::Char, 1, 1)
        .file("ok", b"x")
        .finish();
    let fs_dir = fx.unpack_ok(&tar);
    assert!(!fs_dir.join("dev/sda").exists());
    assert!(fs::symlink_metadata(fs_dir.join("dev/mem")).is_err());
    assert!(fs_dir.join("ok").exists());
}

#[test]
fn sparse_and_unknown_types_are_rejected() {
    let sparse = |h: &mut tar::Header| h.as_gnu_mut().expect("gnu").set_real_size(0);
    rejected(
        TarBall::new().raw("s", EntryType::GNUSparse, b"", sparse),
        "s",
        "sparse",
    );
    rejected(
        TarBall::new().raw("v", EntryType::new(b'V'), b"", |_| {}),
        "v",
        "unsupported entry type 'V'",
    );
}

#[test]
fn non_directory_cannot_replace_the_root() {
    rejected(TarBall::new().file(".", b""), ".", "layer root");
}

#[test]
fn bad_diff_id_leaves_no_snapshot() {
    let fx = Fixture::new();
    let tar = TarBall::new().file("f", b"x").finish();
    let wrong = crate::image::digest::Digest::of(b"something else");
    let (chain, res) = fx.unpack_as(&tar, crate::image::manifest::media::OCI_LAYER, &wrong);
    let err = res.expect_err("mismatch");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.to_string().contains("diff id mismatch"), "{err}");
    assert!(!fx.snaps.exists(&chain));
    assert!(super::names(&fx.root).is_empty());
    fx.assert_contained();
}

#[test]
fn truncated_archive_is_rejected() {
    let fx = Fixture::new();
    let tar = TarBall::new().file("f", &[7; 2000]).finish();
    let (chain, res) = fx.unpack(&tar[..1024]);
    assert_eq!(
        res.expect_err("truncated").kind(),
        ErrorKind::InvalidArgument
    );
    assert!(!fx.snaps.exists(&chain));
    fx.assert_contained();
}

#[test]
fn endless_trailing_data_is_bounded_by_the_byte_budget() {
    let fx = Fixture::with_limits(UnpackLimits {
        max_layer_bytes: 4096,
        ..UnpackLimits::default()
    });
    let mut tar = TarBall::new().file("f", b"x").finish();
    tar.extend_from_slice(&[0u8; 64 * 1024]);
    let msg = fx.unpack_err(&tar, ErrorKind::ResourceExhausted);
    assert!(msg.contains("after the end of the archive"), "{msg}");
}
