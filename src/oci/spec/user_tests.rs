//! Unit tests for user resolution against fabricated root filesystems.

use std::path::Path;

use super::*;
use crate::error::ErrorKind;

const PASSWD: &str = "root:x:0:0:root:/root:/bin/sh\n\
                      # a comment\n\
                      app:x:1000:1000:app:/home/app:/bin/sh\n\
                      web:x:33:33::/var/www:/bin/false\n\
                      nobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const GROUP: &str = "root:x:0:\naudio:x:29:app,web\nvideo:x:44:app\napp:x:1000:app\n\
                     staff:x:50:\nnogroup:x:65534:\n";

fn rootfs(passwd: Option<&str>, group: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir_all(dir.path().join("etc")).expect("etc");
    if let Some(p) = passwd {
        std::fs::write(dir.path().join("etc/passwd"), p).expect("passwd");
    }
    if let Some(g) = group {
        std::fs::write(dir.path().join("etc/group"), g).expect("group");
    }
    dir
}

fn sec() -> Security {
    Security::default()
}

fn resolve(s: &Security, image_user: Option<&str>, root: &Path) -> Result<ResolvedUser> {
    resolve_user("c1", s, image_user, root)
}

fn ids(u: &ResolvedUser) -> (u32, u32, Vec<u32>) {
    (u.uid, u.gid, u.additional_gids.clone())
}

#[test]
fn image_user_forms_resolve_like_containerd() {
    let root = rootfs(Some(PASSWD), Some(GROUP));
    type Case<'a> = (Option<&'a str>, (u32, u32, &'a [u32]));
    let cases: &[Case] = &[
        (None, (0, 0, &[0])),
        (Some(""), (0, 0, &[0])),
        (Some("app"), (1000, 1000, &[29, 44, 1000])),
        (Some("1000"), (1000, 1000, &[29, 44, 1000])),
        (Some("1000:50"), (1000, 50, &[29, 44, 50])),
        (Some("app:staff"), (1000, 50, &[29, 44, 50])),
        (Some("web:audio"), (33, 29, &[29])),
        (Some("4242"), (4242, 0, &[0])),
        (Some("4242:7"), (4242, 7, &[7])),
    ];
    for (user, (uid, gid, extra)) in cases {
        let got = resolve(&sec(), *user, root.path()).expect("resolve");
        assert_eq!(ids(&got), (*uid, *gid, extra.to_vec()), "USER {user:?}");
    }
}

#[test]
fn cri_fields_override_the_image_user() {
    let root = rootfs(Some(PASSWD), Some(GROUP));
    let mut s = sec();
    s.run_as_user = Some(33);
    assert_eq!(
        ids(&resolve(&s, Some("app"), root.path()).expect("uid")),
        (33, 33, vec![29, 33])
    );
    s.run_as_group = Some(44);
    assert_eq!(
        ids(&resolve(&s, Some("app"), root.path()).expect("gid")),
        (33, 44, vec![29, 44])
    );
    s.run_as_username = Some("app".into());
    assert_eq!(
        ids(&resolve(&s, None, root.path()).expect("username wins")),
        (1000, 44, vec![29, 44])
    );
}

#[test]
fn supplemental_groups_merge_or_stay_strict() {
    let root = rootfs(Some(PASSWD), Some(GROUP));
    let mut s = sec();
    s.supplemental_groups = vec![5000, 29];
    let got = resolve(&s, Some("app"), root.path()).expect("merge");
    assert_eq!(got.additional_gids, vec![29, 44, 1000, 5000]);
    s.supplemental_groups_policy = SupplementalGroupsPolicy::Strict;
    let got = resolve(&s, Some("app"), root.path()).expect("strict");
    assert_eq!(got.additional_gids, vec![29, 1000, 5000]);
}

#[test]
fn unknown_names_and_bad_ids_are_invalid_arguments() {
    let root = rootfs(Some(PASSWD), Some(GROUP));
    let err = resolve(&sec(), Some("ghost"), root.path()).expect_err("unknown user");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(
        err.message().contains("\"ghost\"") && err.message().contains("c1"),
        "{err}"
    );
    let err = resolve(&sec(), Some("app:ghosts"), root.path()).expect_err("unknown group");
    assert!(err.message().contains("\"ghosts\""), "{err}");
    let mut s = sec();
    s.run_as_username = Some("ghost".into());
    assert!(resolve(&s, None, root.path()).is_err());

    let mut s = sec();
    s.run_as_group = Some(5);
    let err = resolve(&s, Some("app"), root.path()).expect_err("group without user");
    assert!(err.message().contains("run_as_group"), "{err}");

    for bad in ["-1", "2147483648", "99999999999999999999", "app:", ":1"] {
        let err = resolve(&sec(), Some(bad), root.path()).expect_err(bad);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{bad}");
    }
    let mut s = sec();
    s.run_as_user = Some(-5);
    assert!(resolve(&s, None, root.path()).is_err());
    s.run_as_user = Some(0);
    s.supplemental_groups = vec![-1];
    assert!(resolve(&s, None, root.path()).is_err());
}

#[test]
fn missing_files_allow_numeric_ids_only() {
    let root = rootfs(None, None);
    assert_eq!(
        ids(&resolve(&sec(), Some("77"), root.path()).expect("uid")),
        (77, 0, vec![0])
    );
    assert!(resolve(&sec(), Some("root"), root.path()).is_err());
    let bare = tempfile::tempdir().expect("tempdir");
    assert_eq!(
        ids(&resolve(&sec(), None, bare.path()).expect("no etc")),
        (0, 0, vec![0])
    );
}

#[test]
fn symlinks_cannot_lead_outside_the_rootfs() {
    let outside = tempfile::tempdir().expect("outside");
    std::fs::write(
        outside.path().join("passwd"),
        "outsider:x:4242:4242::/:/bin/sh\n",
    )
    .expect("write outside passwd");
    std::fs::write(outside.path().join("group"), "outsiders:x:4242:app\n").expect("group");

    let root = rootfs(None, None);
    let ups = "../".repeat(20);
    let rel = format!("{ups}{}", outside.path().display());
    std::os::unix::fs::symlink(format!("{rel}/passwd"), root.path().join("etc/passwd"))
        .expect("relative symlink");
    std::os::unix::fs::symlink(outside.path().join("group"), root.path().join("etc/group"))
        .expect("absolute symlink");

    let err = resolve(&sec(), Some("outsider"), root.path()).expect_err("must not read outside");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    // The same names, placed where the symlinks land *inside* the rootfs, are what is read.
    let inside = root
        .path()
        .join(outside.path().strip_prefix("/").expect("abs"));
    std::fs::create_dir_all(&inside).expect("mkdir inside");
    std::fs::write(inside.join("passwd"), "app:x:1000:1000::/:/bin/sh\n").expect("inside");
    std::fs::write(inside.join("group"), "audio:x:29:app\n").expect("inside group");
    let got = resolve(&sec(), Some("app"), root.path()).expect("inside passwd");
    assert_eq!(ids(&got), (1000, 1000, vec![29, 1000]));
    assert!(resolve(&sec(), Some("outsider"), root.path()).is_err());
}

#[test]
fn a_directory_or_fifo_at_etc_passwd_is_refused() {
    let root = rootfs(None, None);
    std::fs::create_dir(root.path().join("etc/passwd")).expect("dir");
    let err = resolve(&sec(), Some("app"), root.path()).expect_err("dir");
    assert!(err.message().contains("not a regular file"), "{err}");
}
