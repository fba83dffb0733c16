//! Unit tests of the supervisor's pure parts: uids, fingerprints, whole-text validation.

use super::*;

const WEB: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers:
  - {name: web, image: busybox}
"#;

#[test]
fn uids_look_like_kubernetes_ones_and_differ() {
    let (a, b) = (new_uid(), new_uid());
    assert_ne!(a, b);
    let parts: Vec<_> = a.split('-').map(str::len).collect();
    assert_eq!(parts, vec![8, 4, 4, 4, 12], "{a}");
    assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
}

#[test]
fn fingerprint_sees_spec_and_labels_not_status() {
    let (pods, _) = Supervisor::check(WEB, "web.yaml").expect("valid");
    let mut p = pods[0].clone();
    let f = fingerprint(&p);
    p.status = Some(Default::default());
    p.metadata.uid = Some("x".into());
    assert_eq!(fingerprint(&p), f, "status and uid do not count");
    p.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("v".into(), "2".into());
    assert_ne!(fingerprint(&p), f, "labels count");
}

#[test]
fn check_rejects_the_whole_text_listing_every_error() {
    let bad = format!(
        "{WEB}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: Bad_Name}}\nspec:\n  containers:\n  - {{name: a, image: x}}\n  - {{name: a, image: x}}\n"
    );
    let e = Supervisor::check(&bad, "two.yaml").expect_err("invalid");
    assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument);
    let m = e.message();
    assert!(m.contains("nothing applied"), "{m}");
    assert!(m.contains("Bad_Name"), "{m}");
    assert!(m.contains("spec.containers[1].name"), "{m}");

    let twice = format!("{WEB}---{WEB}");
    let e = Supervisor::check(&twice, "twice.yaml").expect_err("duplicate");
    assert!(e.message().contains("appears twice"), "{}", e.message());
}

#[test]
fn static_pod_dir_lists_manifests_only_sorted() {
    let dir = tempfile::tempdir().expect("tempdir");
    for f in ["b.yaml", "a.json", "c.yml", ".hidden.yaml", "notes.txt"] {
        std::fs::write(dir.path().join(f), "x").expect("write");
    }
    std::fs::create_dir(dir.path().join("sub.yaml")).expect("mkdir");
    let names: Vec<_> = static_pods::manifest_files(dir.path())
        .iter()
        .filter_map(|p| p.file_name().and_then(|n| n.to_str()).map(String::from))
        .collect();
    assert_eq!(names, vec!["a.json", "b.yaml", "c.yml"]);
}
