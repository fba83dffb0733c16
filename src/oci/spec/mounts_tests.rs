//! Unit tests for mount defaults, pod files, ordering, options and propagation checks.

use super::*;

const MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /mnt/shared rw shared:7 - tmpfs tmpfs rw
31 22 0:26 / /mnt/slave rw master:7 - tmpfs tmpfs rw
32 22 0:27 / /mnt/private rw - tmpfs tmpfs rw
33 22 0:28 / /mnt/with\\040space rw - tmpfs tmpfs rw
";

fn bind(container: &str, host: &str) -> MountRequest {
    MountRequest {
        container_path: container.into(),
        host_path: host.into(),
        ..Default::default()
    }
}

fn no_mountinfo() -> Result<String> {
    Ok(MOUNTINFO.to_string())
}

fn run(requested: &[MountRequest], sandbox: &SandboxContext) -> Result<MountPlan> {
    plan("c1", requested, sandbox, false, false, false, &no_mountinfo)
}

fn dests(p: &MountPlan) -> Vec<String> {
    p.mounts
        .iter()
        .map(|m| m.destination().display().to_string())
        .collect()
}

fn options_of(p: &MountPlan, dest: &str) -> Vec<String> {
    p.mounts
        .iter()
        .find(|m| m.destination() == Path::new(dest))
        .and_then(|m| m.options().clone())
        .unwrap_or_default()
}

#[test]
fn clean_path_is_lexical() {
    for (input, want) in [
        ("/a/./b/../c/", "/a/c"),
        ("/", "/"),
        ("//x//y", "/x/y"),
        ("/../..", "/"),
        ("/etc/hosts", "/etc/hosts"),
    ] {
        assert_eq!(clean_path(input), want, "{input}");
    }
}

#[test]
fn sysfs_and_cgroupfs_are_read_only_unless_privileged() {
    let p = run(&[], &SandboxContext::default()).expect("plan");
    assert_eq!(
        dests(&p),
        [
            "/proc",
            "/dev",
            "/dev/pts",
            "/dev/shm",
            "/dev/mqueue",
            "/sys",
            "/sys/fs/cgroup"
        ]
    );
    assert!(options_of(&p, "/sys").contains(&"ro".to_string()));
    assert!(options_of(&p, "/sys/fs/cgroup").contains(&"ro".to_string()));
    let p = plan(
        "c",
        &[],
        &SandboxContext::default(),
        true,
        false,
        false,
        &no_mountinfo,
    )
    .expect("privileged");
    assert!(options_of(&p, "/sys").contains(&"rw".to_string()));
    assert!(options_of(&p, "/sys/fs/cgroup").contains(&"rw".to_string()));
}

#[test]
fn pod_files_are_bound_unless_overridden_or_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["hosts", "hostname", "resolv.conf"] {
        std::fs::write(dir.path().join(f), "x").expect("write");
    }
    std::fs::create_dir(dir.path().join("shm")).expect("shm");
    let sandbox = SandboxContext {
        hosts_path: Some(dir.path().join("hosts")),
        hostname_path: Some(dir.path().join("hostname")),
        resolv_conf_path: Some(dir.path().join("missing-resolv.conf")),
        shm_path: Some(dir.path().join("shm")),
        ..Default::default()
    };
    let mine = dir.path().join("resolv.conf").display().to_string();
    let p = run(&[bind("/etc/hosts/", &mine)], &sandbox).expect("plan");
    let binds: Vec<(String, String)> = p
        .mounts
        .iter()
        .filter(|m| m.typ().as_deref() == Some("bind"))
        .map(|m| {
            let src = m.source().clone().unwrap_or_default();
            (
                m.destination().display().to_string(),
                src.display().to_string(),
            )
        })
        .collect();
    let canon = |f: &str| {
        std::fs::canonicalize(dir.path().join(f))
            .expect("canon")
            .display()
            .to_string()
    };
    assert!(
        binds.contains(&("/etc/hosts".into(), canon("resolv.conf"))),
        "{binds:?}"
    );
    assert!(
        binds.contains(&("/etc/hostname".into(), canon("hostname"))),
        "{binds:?}"
    );
    assert!(
        binds.contains(&("/dev/shm".into(), canon("shm"))),
        "{binds:?}"
    );
    assert!(
        !binds.iter().any(|(d, _)| d == "/etc/resolv.conf"),
        "{binds:?}"
    );
    // The default shm tmpfs gave way to the pod's.
    assert_eq!(dests(&p).iter().filter(|d| *d == "/dev/shm").count(), 1);

    let host_ipc = SandboxContext {
        host_ipc: true,
        ..sandbox.clone()
    };
    let p = run(&[], &host_ipc).expect("host ipc");
    let shm = p
        .mounts
        .iter()
        .find(|m| m.destination() == Path::new("/dev/shm"));
    assert_eq!(
        shm.and_then(|m| m.source().clone()),
        Some(PathBuf::from("/dev/shm"))
    );
}

#[test]
fn pod_files_follow_readonly_rootfs_but_shm_stays_writable() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hosts"), "x").expect("write");
    std::fs::create_dir(dir.path().join("shm")).expect("shm");
    let sandbox = SandboxContext {
        hosts_path: Some(dir.path().join("hosts")),
        shm_path: Some(dir.path().join("shm")),
        ..Default::default()
    };
    let p = plan("c", &[], &sandbox, false, true, false, &no_mountinfo).expect("plan");
    assert!(options_of(&p, "/etc/hosts").contains(&"ro".to_string()));
    assert!(options_of(&p, "/dev/shm").contains(&"rw".to_string()));
}

#[test]
fn parents_are_mounted_before_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let h = |n: &str| dir.path().join(n).display().to_string();
    let req = [
        bind("/a/b/c", &h("abc")),
        bind("/a", &h("a")),
        bind("/z/y", &h("zy")),
        bind("/a/b", &h("ab")),
        bind("/b", &h("b")),
    ];
    let p = run(&req, &SandboxContext::default()).expect("plan");
    let binds: Vec<String> = dests(&p).into_iter().skip(7).collect();
    assert_eq!(binds, ["/a", "/b", "/z/y", "/a/b", "/a/b/c"]);
}

#[test]
fn a_supplied_dev_replaces_every_default_under_dev() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = run(
        &[bind("/dev", &dir.path().display().to_string())],
        &SandboxContext::default(),
    )
    .expect("plan");
    assert_eq!(
        dests(&p),
        ["/proc", "/sys", "/sys/fs/cgroup", "/dev"],
        "{:?}",
        dests(&p)
    );
}

#[test]
fn bad_paths_are_invalid_and_named() {
    let err = run(&[bind("data", "/tmp")], &SandboxContext::default()).expect_err("relative");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains("\"data\""), "{err}");
    let err = run(&[bind("/x/..", "/tmp")], &SandboxContext::default()).expect_err("root");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let err = run(&[bind("/data", "tmp")], &SandboxContext::default()).expect_err("host");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    let mut m = bind("/data", "/tmp");
    m.image = Some("busybox".into());
    let err = run(&[m], &SandboxContext::default()).expect_err("image");
    assert_eq!(err.kind(), ErrorKind::Unimplemented);
}

#[test]
fn a_missing_host_path_is_created_and_symlinks_resolved() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing = dir.path().join("new/deep");
    std::os::unix::fs::symlink(dir.path().join("new"), dir.path().join("link")).expect("link");
    let req = [
        bind("/m", &missing.display().to_string()),
        bind("/l", &dir.path().join("link").display().to_string()),
    ];
    let p = run(&req, &SandboxContext::default()).expect("plan");
    assert!(missing.is_dir());
    let src = |d: &str| {
        p.mounts
            .iter()
            .find(|m| m.destination() == Path::new(d))
            .and_then(|m| m.source().clone())
    };
    let canon = std::fs::canonicalize(dir.path().join("new")).expect("canon");
    assert_eq!(src("/l"), Some(canon));
}

#[test]
fn options_carry_readonly_and_propagation() {
    type Case<'a> = (&'a str, bool, Propagation, &'a [&'a str], Option<&'a str>);
    let cases: &[Case] = &[
        (
            "/mnt/private",
            false,
            Propagation::Private,
            &["rbind", "rprivate", "rw"],
            None,
        ),
        (
            "/mnt/private",
            true,
            Propagation::Private,
            &["rbind", "rprivate", "ro"],
            None,
        ),
        (
            "/mnt/slave",
            true,
            Propagation::HostToContainer,
            &["rbind", "rslave", "ro"],
            Some("rslave"),
        ),
        (
            "/mnt/shared/x",
            false,
            Propagation::HostToContainer,
            &["rbind", "rslave", "rw"],
            Some("rslave"),
        ),
        (
            "/mnt/shared",
            false,
            Propagation::Bidirectional,
            &["rbind", "rshared", "rw"],
            Some("rshared"),
        ),
    ];
    for (host, readonly, propagation, want, rootfs) in cases {
        let mut m = bind("/data", "/");
        m.readonly = *readonly;
        m.propagation = *propagation;
        let (opts, root) = options_for(&m, host).expect("plan");
        assert_eq!(opts, want.to_vec(), "{host} {propagation:?}");
        assert_eq!(root.as_deref(), *rootfs, "{host} {propagation:?}");
    }
}

/// Options for `m` as if its (existing) host path were `pretend` on the fabricated mountinfo.
fn options_for(m: &MountRequest, pretend: &str) -> Result<(Vec<String>, Option<String>)> {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = m.clone();
    m.host_path = dir.path().display().to_string();
    let canon = std::fs::canonicalize(dir.path()).expect("canon");
    let info = MOUNTINFO.replace(pretend, &canon.display().to_string());
    let info = move || Ok(info.clone());
    let p = plan(
        "c",
        &[m],
        &SandboxContext::default(),
        false,
        false,
        false,
        &info,
    )?;
    Ok((options_of(&p, "/data"), p.rootfs_propagation))
}

#[test]
fn propagation_needs_a_propagating_host_mount() {
    let mut m = bind("/data", "/");
    m.propagation = Propagation::Bidirectional;
    for host in ["/mnt/slave", "/mnt/private"] {
        let err = options_for(&m, host).expect_err(host);
        assert_eq!(err.kind(), ErrorKind::FailedPrecondition, "{err}");
        assert!(err.message().contains("not shared"), "{err}");
    }
    m.propagation = Propagation::HostToContainer;
    let err = options_for(&m, "/mnt/private").expect_err("private");
    assert!(err.message().contains("shared or slave"), "{err}");
}

#[test]
fn recursive_read_only_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut m = bind("/data", &dir.path().display().to_string());
    m.recursive_read_only = true;
    let err = run(std::slice::from_ref(&m), &SandboxContext::default()).expect_err("rw");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    m.readonly = true;
    let err = run(std::slice::from_ref(&m), &SandboxContext::default()).expect_err("runc");
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    let p = plan(
        "c",
        &[m.clone()],
        &SandboxContext::default(),
        false,
        false,
        true,
        &no_mountinfo,
    )
    .expect("supported");
    assert_eq!(options_of(&p, "/data"), ["rbind", "rprivate", "rro"]);
    m.propagation = Propagation::HostToContainer;
    let err = plan(
        "c",
        &[m],
        &SandboxContext::default(),
        false,
        false,
        true,
        &no_mountinfo,
    )
    .expect_err("propagation");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
}

#[test]
fn lookup_mount_takes_the_longest_and_decodes_escapes() {
    let (point, opt) = lookup_mount(Path::new("/mnt/shared/a/b"), MOUNTINFO).expect("shared");
    assert_eq!(point, PathBuf::from("/mnt/shared"));
    assert_eq!(opt, ["shared:7"]);
    let (point, opt) = lookup_mount(Path::new("/mnt/sharedx"), MOUNTINFO).expect("root");
    assert_eq!(point, PathBuf::from("/"));
    assert_eq!(opt, ["shared:1"]);
    let (point, _) = lookup_mount(Path::new("/mnt/with space/f"), MOUNTINFO).expect("space");
    assert_eq!(point, PathBuf::from("/mnt/with space"));
    assert!(lookup_mount(Path::new("/x"), "garbage line\n").is_none());
}

#[test]
fn file_systems_of_a_clone_are_its_holders_and_recursively_those_below() {
    let info = format!("{MOUNTINFO}40 22 0:40 / /srv/vol/sub rw - xfs /dev/sdb rw\n41 22 0:41 / /srv/volx rw - nfs h:/x rw\n");
    assert_eq!(
        file_systems_of(Path::new("/srv/vol"), false, &info),
        ["ext4"]
    );
    assert_eq!(
        file_systems_of(Path::new("/srv/vol"), true, &info),
        ["ext4", "xfs"]
    );
    assert_eq!(
        file_systems_of(Path::new("/mnt"), true, &info),
        ["ext4", "tmpfs"]
    );
    assert_eq!(
        file_systems_of(Path::new("/mnt/shared"), true, &info),
        ["tmpfs"]
    );
}
