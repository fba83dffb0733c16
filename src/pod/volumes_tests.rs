//! Tests of pod volumes: emptyDir (tmpfs too), hostPath types, ConfigMap/Secret/downward files and their atomic layout, subPath confinement, termination-message mounts, teardown.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

use super::env::Sources;
use super::manifest::parse;
use super::projection;
use super::translate::PodContext;
use super::volumes::{prepare, sub_path, teardown, termination_message_path, MountFacts};

fn pod(yaml: &str) -> Pod {
    parse("t.yaml", yaml).expect("parse").remove(0)
}

fn ctx(p: &Pod) -> PodContext<'_> {
    PodContext {
        pod: p,
        uid: "u-1",
        attempt: 0,
        log_dir: Path::new("/l"),
        source: "api",
    }
}

fn sources(dir: &Path) -> Sources {
    Sources {
        configmap_dir: dir.join("cm"),
        secret_dir: dir.join("sec"),
    }
}

fn with_volumes(vols: &str, mounts: &str) -> Pod {
    pod(&format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: p, labels: {{a: b}}}}\nspec:\n  containers:\n  - name: c\n    image: i\n    volumeMounts:\n{mounts}  volumes:\n{vols}"
    ))
}

fn mounted(path: &Path) -> Option<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.get(4) == Some(&path.to_string_lossy().as_ref())).then(|| {
            let dash = f.iter().position(|x| *x == "-").unwrap_or(0);
            f.get(dash + 1).unwrap_or(&"").to_string()
        })
    })
}

#[test]
fn projected_files_are_written_atomically_with_modes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = sources(dir.path());
    std::fs::create_dir_all(dir.path().join("cm/default/cfg")).expect("mkdir");
    std::fs::write(dir.path().join("cm/default/cfg/a"), "1").expect("write");
    std::fs::write(dir.path().join("cm/default/cfg/b"), "2").expect("write");
    std::fs::create_dir_all(dir.path().join("sec/default/s")).expect("mkdir");
    std::fs::write(dir.path().join("sec/default/s/token"), "t").expect("write");
    let p = with_volumes(
        "  - {name: cfg, configMap: {name: cfg, defaultMode: 0640}}\n  - {name: one, configMap: {name: cfg, items: [{key: b, path: sub/b.txt, mode: 0600}]}}\n  - {name: sec, secret: {secretName: s}}\n  - {name: info, downwardAPI: {items: [{path: labels, fieldRef: {fieldPath: metadata.labels}}, {path: name, fieldRef: {fieldPath: metadata.name}}]}}\n  - {name: proj, projected: {sources: [{configMap: {name: cfg, items: [{key: a, path: a}]}}, {secret: {name: s}}, {downwardAPI: {items: [{path: uid, fieldRef: {fieldPath: metadata.uid}}]}}]}}\n  - {name: opt, configMap: {name: absent, optional: true}}\n",
        "    - {name: cfg, mountPath: /cfg}\n",
    );
    let pod_dir = dir.path().join("pod");
    let v = prepare(&ctx(&p), &pod_dir, &src).expect("prepare");
    let vols = pod_dir.join("volumes");
    let read = |rel: &str| std::fs::read_to_string(vols.join(rel)).expect(rel);
    assert_eq!(read("cfg/a"), "1");
    assert_eq!(read("cfg/b"), "2");
    let mode = |rel: &str| {
        std::fs::metadata(vols.join(rel))
            .expect(rel)
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(mode("cfg/a"), 0o640);
    assert_eq!(read("one/sub/b.txt"), "2");
    assert_eq!(mode("one/sub/b.txt"), 0o600);
    assert_eq!(read("sec/token"), "t");
    assert_eq!(mode("sec/token"), 0o644);
    assert_eq!(read("info/labels"), "a=\"b\"");
    assert_eq!(read("info/name"), "p");
    assert_eq!(read("proj/a"), "1");
    assert_eq!(read("proj/token"), "t");
    assert_eq!(read("proj/uid"), "u-1");
    assert!(
        vols.join("opt").is_dir(),
        "an optional missing ConfigMap is an empty volume"
    );
    // The kubelet's layout: names are symlinks through ..data.
    let link = std::fs::read_link(vols.join("cfg/a")).expect("symlink");
    assert_eq!(link, Path::new("..data/a"));
    // A rewrite drops keys that are gone and old generations.
    std::fs::remove_file(dir.path().join("cm/default/cfg/b")).expect("rm");
    std::fs::write(dir.path().join("cm/default/cfg/a"), "3").expect("write");
    let only_cfg = with_volumes(
        "  - {name: cfg, configMap: {name: cfg, defaultMode: 0640}}\n",
        "      []\n",
    );
    prepare(&ctx(&only_cfg), &pod_dir, &src).expect("prepare again");
    assert_eq!(read("cfg/a"), "3");
    assert!(
        std::fs::symlink_metadata(vols.join("cfg/b")).is_err(),
        "b is gone"
    );
    let generations = std::fs::read_dir(vols.join("cfg"))
        .expect("ls")
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("..data-"))
        .count();
    assert_eq!(generations, 1);
    // Mounts: configMap volumes are read-only, plus the termination-message file.
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let m = v.mounts(c, 4, &MountFacts::default()).expect("mounts");
    assert_eq!(m.len(), 2);
    assert_eq!(m[0].container_path, "/cfg");
    assert!(m[0].readonly);
    assert_eq!(m[1].container_path, "/dev/termination-log");
    let tfile = termination_message_path(&pod_dir, "c", 4);
    assert_eq!(m[1].host_path, tfile.to_string_lossy());
    assert!(tfile.is_file());
    teardown(&pod_dir).expect("teardown");
    assert!(!vols.exists() && !pod_dir.join("termination").exists());
    teardown(&pod_dir).expect("teardown is idempotent");
}

#[test]
fn missing_required_sources_and_bad_paths_are_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = sources(dir.path());
    let p = with_volumes("  - {name: cfg, configMap: {name: absent}}\n", "      []\n");
    let e = prepare(&ctx(&p), &dir.path().join("pod"), &src).expect_err("absent");
    assert!(
        e.to_string().contains("volume cfg") && e.to_string().contains("absent"),
        "{e}"
    );
    assert!(projection::check_rel("../x").is_err());
    assert!(projection::check_rel("/abs").is_err());
    assert!(projection::check_rel("a/b").is_ok());
}

#[test]
fn host_path_types() {
    let dir = tempfile::tempdir().expect("tempdir");
    let src = sources(dir.path());
    let made = dir.path().join("made/deep");
    let file = dir.path().join("f/file.txt");
    let p = with_volumes(
        &format!(
            "  - {{name: d, hostPath: {{path: {:?}, type: DirectoryOrCreate}}}}\n  - {{name: f, hostPath: {{path: {:?}, type: FileOrCreate}}}}\n",
            made, file
        ),
        "      []\n",
    );
    prepare(&ctx(&p), &dir.path().join("pod"), &src).expect("prepare");
    assert!(made.is_dir() && file.is_file());
    let bad = |kind: &str, path: &Path| {
        let p = with_volumes(
            &format!("  - {{name: h, hostPath: {{path: {path:?}, type: {kind}}}}}\n"),
            "      []\n",
        );
        prepare(&ctx(&p), &dir.path().join("pod"), &src)
    };
    assert!(
        bad("Directory", &file).is_err(),
        "a file is not a Directory"
    );
    assert!(bad("File", &made).is_err(), "a dir is not a File");
    assert!(bad("Socket", &file).is_err());
    assert!(bad("CharDevice", Path::new("/dev/null")).is_ok());
    assert!(
        bad("Directory", &dir.path().join("nope")).is_err(),
        "missing"
    );
    assert!(bad("Bogus", &made).is_err());
    let rel = with_volumes("  - {name: h, hostPath: {path: relative}}\n", "      []\n");
    assert!(prepare(&ctx(&rel), &dir.path().join("pod"), &src).is_err());
}

#[test]
fn sub_paths_stay_inside_the_volume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let vol = dir.path().join("vol");
    std::fs::create_dir_all(&vol).expect("mkdir");
    let created = sub_path(&vol, "a/b").expect("sub path");
    assert!(created.is_dir() && created.starts_with(vol.canonicalize().expect("canon")));
    assert!(sub_path(&vol, "../x").is_err());
    assert!(sub_path(&vol, "/etc").is_err());
    std::os::unix::fs::symlink("/etc", vol.join("escape")).expect("symlink");
    let e = sub_path(&vol, "escape").expect_err("symlink out");
    assert!(e.contains("outside"), "{e}");
}

#[test]
fn memory_empty_dir_is_a_sized_tmpfs_until_teardown() {
    if !rustix::process::geteuid().is_root() {
        eprintln!("SKIP memory_empty_dir_is_a_sized_tmpfs_until_teardown: needs root");
        return;
    }
    let dir = tempfile::tempdir_in("/var/tmp").expect("tempdir");
    let src = sources(dir.path());
    let p = with_volumes(
        "  - {name: mem, emptyDir: {medium: Memory, sizeLimit: 8Mi}}\n  - {name: disk, emptyDir: {}}\n",
        "    - {name: mem, mountPath: /mem}\n    - {name: disk, mountPath: /disk, subPath: logs}\n",
    );
    let pod_dir = dir.path().join("pod");
    let v = prepare(&ctx(&p), &pod_dir, &src).expect("prepare");
    let mem = pod_dir.join("volumes/mem");
    assert_eq!(mounted(&mem).as_deref(), Some("tmpfs"));
    prepare(&ctx(&p), &pod_dir, &src).expect("prepare is idempotent");
    let stacked = std::fs::read_to_string("/proc/self/mountinfo")
        .expect("mountinfo")
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some(mem.to_string_lossy().as_ref()))
        .count();
    assert_eq!(stacked, 1, "not mounted twice");
    let st = rustix::fs::statfs(&mem).expect("statfs");
    assert_eq!(st.f_blocks as u64 * st.f_bsize as u64, 8 << 20);
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let m = v.mounts(c, 0, &MountFacts::default()).expect("mounts");
    assert!(
        m[1].host_path.ends_with("volumes/disk/logs"),
        "{}",
        m[1].host_path
    );
    assert!(!m[0].readonly && !m[1].readonly);
    teardown(&pod_dir).expect("teardown");
    assert_eq!(mounted(&mem), None);
    assert!(!pod_dir.join("volumes").exists());
}

#[test]
fn recursive_read_only_and_user_namespace_reach_the_volume_mounts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = with_volumes(
        "  - {name: v, emptyDir: {}}\n",
        "    - {name: v, mountPath: /on, readOnly: true, recursiveReadOnly: Enabled}\n    - {name: v, mountPath: /maybe, readOnly: true, recursiveReadOnly: IfPossible}\n    - {name: v, mountPath: /off, readOnly: true}\n",
    );
    let v = prepare(&ctx(&p), &dir.path().join("pod"), &sources(dir.path())).expect("prepare");
    let c = &p.spec.as_ref().expect("spec").containers[0];
    let rro = |facts: &MountFacts| -> Vec<bool> {
        let m = v.mounts(c, 0, facts).expect("mounts");
        m.iter().take(3).map(|m| m.recursive_read_only).collect()
    };
    assert_eq!(rro(&MountFacts::default()), [true, false, false]);
    let able = MountFacts {
        recursive_read_only: true,
        userns: None,
    };
    assert_eq!(rro(&able), [true, true, false]);
    let ns = crate::pod::userns::mapping(65_536);
    let mapped = MountFacts {
        recursive_read_only: true,
        userns: Some(&ns),
    };
    let m = v.mounts(c, 0, &mapped).expect("mounts");
    assert!(m[..3]
        .iter()
        .all(|m| m.uid_mappings == ns.uids && m.gid_mappings == ns.gids));
    let term = m.last().expect("termination file");
    assert_eq!(term.container_path, "/dev/termination-log");
    assert!(
        term.uid_mappings.is_empty(),
        "the termination file is not ID-mapped"
    );
}
