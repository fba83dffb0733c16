//! The command lines kind, kubeadm node scripts and CI use, parsed as bosun's ctr takes them, and what it refuses.

use std::path::PathBuf;
use std::time::Duration;

use super::args::{parse, Command, Import, Invocation, Parsed, Pull};

fn words(line: &str) -> Vec<String> {
    line.split_whitespace().map(String::from).collect()
}

fn run_with(line: &str, env: &[(&str, &str)]) -> Result<Invocation, String> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    match parse(&words(line), |k| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })? {
        Parsed::Run(i) => Ok(*i),
        Parsed::Print(t) => Err(format!("printed: {t}")),
    }
}

fn run(line: &str) -> Invocation {
    run_with(line, &[]).unwrap_or_else(|e| panic!("{line}: {e}"))
}

fn refused(line: &str) -> String {
    run_with(line, &[]).expect_err(line)
}

#[test]
fn kinds_import_lines_parse_verbatim() {
    let want = Command::Import(Import {
        input: "-".into(),
        digests: true,
        ..Default::default()
    });
    for line in [
        "--namespace=k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        "-n k8s.io images import --all-platforms --digests --snapshotter=overlayfs -",
        "-n=k8s.io image import --all-platforms=true --digests -",
        "-namespace k8s.io i import -all-platforms -digests -snapshotter overlayfs -",
        "--namespace k8s.io images import --digests --no-unpack --local --sync-fs -",
    ] {
        let i = run(line);
        assert_eq!(i.namespace, "k8s.io", "{line}");
        assert_eq!(i.command, want, "{line}");
        assert_eq!(i.address, None);
    }
    let i = run(
        "-n k8s.io images import --base-name docker.io/library/app --index-name app:idx img.tar",
    );
    assert_eq!(
        i.command,
        Command::Import(Import {
            input: "img.tar".into(),
            base_name: Some("docker.io/library/app".into()),
            index_name: Some("app:idx".into()),
            ..Default::default()
        })
    );
    let host = crate::image::manifest::Platform::host();
    let i = run(&format!(
        "images import --digests --skip-digest-for-named --platform {}/{} x.tar",
        host.os, host.architecture
    ));
    assert_eq!(i.namespace, "default");
    match i.command {
        Command::Import(a) => assert!(a.digests && a.skip_digest_for_named),
        other => panic!("{other:?}"),
    }
}

#[test]
fn list_remove_tag_pull_and_version_lines_parse_with_their_aliases() {
    for line in [
        "-n k8s.io images ls -q",
        "-n k8s.io i list --quiet",
        "-n k8s.io image ls -q=true",
    ] {
        assert_eq!(
            run(line).command,
            Command::List {
                quiet: true,
                names: vec![]
            },
            "{line}"
        );
    }
    assert_eq!(
        run("-n k8s.io images ls name==docker.io/library/busybox:latest").command,
        Command::List {
            quiet: false,
            names: vec!["docker.io/library/busybox:latest".into()]
        }
    );
    for alias in ["rm", "remove", "del", "delete"] {
        assert_eq!(
            run(&format!("-n k8s.io images {alias} --sync a:1 b:2")).command,
            Command::Remove(vec!["a:1".into(), "b:2".into()]),
            "{alias}"
        );
    }
    assert_eq!(
        run("-n k8s.io images tag --force docker.io/library/a:1 example.test/a:2 example.test/a:3")
            .command,
        Command::Tag {
            source: "docker.io/library/a:1".into(),
            targets: vec!["example.test/a:2".into(), "example.test/a:3".into()],
            force: true
        }
    );
    assert_eq!(
        run("-n k8s.io images pull --plain-http localhost:5000/app:1").command,
        Command::Pull(Pull {
            reference: "localhost:5000/app:1".into(),
            plain_http: true,
            ..Default::default()
        })
    );
    let p = run(
        "-n k8s.io images pull -k -u bob:pw --refresh tok --hosts-dir /etc/containerd/certs.d \
         --tlscacert ca.pem --tlscert c.pem --tlskey c.key --print-chainid --all-platforms \
         --max-concurrent-downloads 4 --local registry.k8s.io/pause:3.10",
    );
    assert_eq!(
        p.command,
        Command::Pull(Pull {
            reference: "registry.k8s.io/pause:3.10".into(),
            user: Some("bob:pw".into()),
            refresh: Some("tok".into()),
            skip_verify: true,
            hosts_dir: Some("/etc/containerd/certs.d".into()),
            tls_ca: Some("ca.pem".into()),
            tls_cert: Some("c.pem".into()),
            tls_key: Some("c.key".into()),
            print_chainid: true,
            ..Default::default()
        })
    );
    assert_eq!(run("version").command, Command::Version);
    // version needs no namespace, so any is fine there.
    assert_eq!(run("-n moby version").command, Command::Version);
}

#[test]
fn the_address_comes_from_the_flag_or_the_environment() {
    let i = run("-a /run/containerd/containerd.sock -n k8s.io images ls -q");
    assert_eq!(
        i.address,
        Some(PathBuf::from("/run/containerd/containerd.sock"))
    );
    let i = run("--address=unix:///run/x.sock version");
    assert_eq!(i.address, Some(PathBuf::from("/run/x.sock")));
    let i = run_with(
        "images ls",
        &[
            ("CONTAINERD_ADDRESS", "/run/y.sock"),
            ("CONTAINERD_NAMESPACE", "k8s.io"),
        ],
    )
    .expect("env");
    assert_eq!(i.address, Some(PathBuf::from("/run/y.sock")));
    assert_eq!(i.namespace, "k8s.io");
    let i = run_with(
        "-n default images ls",
        &[("CONTAINERD_NAMESPACE", "k8s.io")],
    )
    .expect("flag wins");
    assert_eq!(i.namespace, "default");
    let i = run("--timeout 30s --connect-timeout=2s --debug version");
    assert_eq!(i.timeout, Some(Duration::from_secs(30)));
    assert_eq!(i.connect_timeout, Some(Duration::from_secs(2)));
}

#[test]
fn other_namespaces_and_containerd_commands_are_refused_clearly() {
    let e = refused("-n moby images ls");
    assert!(
        e.contains("namespace \"moby\"") && e.contains("one image store"),
        "{e}"
    );
    let e = run_with("images ls", &[("CONTAINERD_NAMESPACE", "buildkit")]).expect_err("env ns");
    assert!(e.contains("buildkit"), "{e}");
    for cmd in [
        "containers ls",
        "c ls",
        "tasks ls",
        "t ls",
        "snapshots ls",
        "content ls",
        "run x y",
        "namespaces ls",
        "leases ls",
        "events",
        "plugins ls",
        "info",
    ] {
        let e = refused(&format!("-n k8s.io {cmd}"));
        let first = cmd.split(' ').next().unwrap_or(cmd);
        assert!(
            e.contains(&format!("ctr {first}: not supported by bosun")) && e.contains("use crictl"),
            "{cmd}: {e}"
        );
    }
    for sub in [
        "export", "push", "mount", "inspect", "label", "prune", "check", "convert", "usage",
    ] {
        let e = refused(&format!("-n k8s.io images {sub} x"));
        assert!(
            e.contains(&format!("ctr images {sub}: not supported by bosun")),
            "{sub}: {e}"
        );
    }
    let e = refused("frobnicate");
    assert!(e.contains("unknown command \"frobnicate\""), "{e}");
}

#[test]
fn flags_whose_result_would_differ_are_refused_naming_them() {
    for (line, want) in [
        (
            "images import --snapshotter=native -",
            "--snapshotter \"native\"",
        ),
        ("images import --compress-blobs x.tar", "--compress-blobs"),
        (
            "images import --discard-unpacked-layers x.tar",
            "--discard-unpacked-layers",
        ),
        ("images import --label a=b x.tar", "--label a=b"),
        (
            "images import --platform linux/s390x x.tar",
            "--platform linux/s390x",
        ),
        (
            "images import --skip-digest-for-named x.tar",
            "must be specified with --digests",
        ),
        (
            "images pull --platform windows/amd64 r/x:1",
            "--platform windows/amd64",
        ),
        ("images pull --http-dump r/x:1", "--http-dump"),
        (
            "images pull --platform linux/amd64 --all-platforms r/x:1",
            "cannot specify both",
        ),
        ("images pull --label x=y r/x:1", "--label x=y"),
        (
            "images import --frob x.tar",
            "flag provided but not defined: -frob",
        ),
        (
            "images import --digests=maybe x.tar",
            "invalid boolean value \"maybe\"",
        ),
        ("images pull --user", "flag needs an argument: -user"),
        ("images import", "please provide an archive"),
        ("images pull", "please provide an image reference"),
        (
            "images tag a:1",
            "please provide an image reference to tag to",
        ),
        ("images ls label==x", "name==<ref>"),
        ("--timeout soon version", "invalid value \"soon\""),
        (
            "-n k8s.io images ls --namespace x",
            "flag provided but not defined: -namespace",
        ),
        ("version extra", "extra arguments"),
    ] {
        let e = refused(line);
        assert!(e.contains(want), "{line}: {e} (want {want})");
    }
    let e = run_with("images import -", &[("CONTAINERD_SNAPSHOTTER", "zfs")]).expect_err("env");
    assert!(e.contains("zfs"), "{e}");
}

#[test]
fn help_and_version_print_without_a_daemon() {
    for line in [
        "",
        "--help",
        "-h",
        "images",
        "images import --help",
        "images pull -h",
        "--version",
        "-v",
    ] {
        match parse(&words(line), |_| None) {
            Ok(Parsed::Print(t)) => assert!(!t.is_empty(), "{line}"),
            other => panic!("{line}: {other:?}"),
        }
    }
}
