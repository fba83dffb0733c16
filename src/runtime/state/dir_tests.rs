//! Tests for the state directory: atomic writes, rule 6, reservations, lookups, filters.

use std::collections::HashMap;
use std::fs;
use std::path::Path;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::dir::StateDir;
use super::record::{Meta, CONTAINERS_DIR, META_FILE, STATUS_FILE};
use super::status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
use super::table::Filter;
use super::Loaded;
use crate::error::ErrorKind;

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(super) struct TMeta {
    pub name: String,
    pub labels: HashMap<String, String>,
    pub pod: Option<String>,
}

impl Meta for TMeta {
    fn name_key(&self) -> String {
        self.name.clone()
    }
    fn label(&self, key: &str) -> Option<&str> {
        self.labels.get(key).map(String::as_str)
    }
    fn pod_id(&self) -> Option<&str> {
        self.pod.as_deref()
    }
}

pub(super) type Dir = StateDir<TMeta, TMeta>;

pub(super) fn meta(name: &str, labels: &[(&str, &str)], pod: Option<&str>) -> TMeta {
    TMeta {
        name: name.into(),
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        pod: pod.map(str::to_string),
    }
}

fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn create_update_write_versioned_status_and_no_temp_files() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.containers.reserve("web").expect("reserve");
    let e = sd
        .containers
        .create(r, meta("web", &[], None), ContainerStatus::created(10))
        .expect("create");
    assert_eq!(files(e.dir()), [META_FILE, STATUS_FILE]);
    assert_eq!(e.status().version, 1);
    let s = sd
        .containers
        .update(e.id(), |s| s.start(11, 42))
        .expect("start");
    assert_eq!((s.version, s.state()), (2, ContainerState::Running));
    let on_disk: ContainerStatus =
        serde_json::from_slice(&fs::read(e.dir().join(STATUS_FILE)).expect("read")).expect("json");
    assert_eq!(on_disk, e.status());
    assert_eq!(files(e.dir()), [META_FILE, STATUS_FILE], "temp file left");
    let m: TMeta =
        serde_json::from_slice(&fs::read(e.dir().join(META_FILE)).expect("read")).expect("json");
    assert_eq!(&m, e.meta());
}

#[test]
fn rejected_transition_writes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.containers.reserve("a").expect("reserve");
    let e = sd
        .containers
        .create(r, meta("a", &[], None), ContainerStatus::created(1))
        .expect("create");
    let err = e
        .update(|s| s.exit(5, 0, false))
        .expect_err("exit before start");
    assert_eq!(err.kind(), ErrorKind::FailedPrecondition);
    assert_eq!(e.status().version, 1);
}

#[test]
fn memory_unchanged_when_status_write_fails() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.containers.reserve("a").expect("reserve");
    let e = sd
        .containers
        .create(r, meta("a", &[], None), ContainerStatus::created(1))
        .expect("create");
    // The entry's directory becomes a FILE: writing <file>/status.json fails even as root.
    fs::remove_dir_all(e.dir()).expect("rm");
    fs::write(e.dir(), b"not a dir").expect("file");
    let err = e.update(|s| s.start(2, 9)).expect_err("write must fail");
    assert!(err.message().contains(e.id()), "{err}");
    let s = e.status();
    assert_eq!(
        (s.version, s.state(), s.pid),
        (1, ContainerState::Created, 0)
    );
}

#[test]
fn failed_create_releases_name_and_indexes_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let kind_dir = tmp.path().join(CONTAINERS_DIR);
    fs::remove_dir(&kind_dir).expect("rmdir");
    fs::write(&kind_dir, b"file").expect("file");
    let r = sd.containers.reserve("a").expect("reserve");
    assert!(sd
        .containers
        .create(r, meta("a", &[], None), ContainerStatus::created(1))
        .is_err());
    assert!(sd.containers.is_empty());
    sd.containers.reserve("a").expect("name released");
}

#[test]
fn reservation_conflicts_name_the_holder_and_release_on_drop() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.sandboxes.reserve("pod_ns_uid_0").expect("reserve");
    let err = sd.sandboxes.reserve("pod_ns_uid_0").expect_err("in flight");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert!(err.message().contains(r.id()), "{err}");
    drop(r);
    let r = sd
        .sandboxes
        .reserve("pod_ns_uid_0")
        .expect("released on drop");
    let id = r.id().to_string();
    sd.sandboxes
        .create(
            r,
            meta("pod_ns_uid_0", &[], None),
            SandboxStatus::created(1),
        )
        .expect("create");
    let err = sd.sandboxes.reserve("pod_ns_uid_0").expect_err("created");
    assert!(err.message().contains(&id), "{err}");
    assert!(sd.sandboxes.remove(&id).expect("remove"));
    assert!(!sd.sandboxes.remove(&id).expect("remove twice is fine"));
    assert!(!tmp.path().join("sandboxes").join(&id).exists());
    sd.sandboxes
        .reserve("pod_ns_uid_0")
        .expect("freed by remove");
}

#[test]
fn get_and_resolve() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.containers.reserve("a").expect("reserve");
    let e = sd
        .containers
        .create(r, meta("a", &[], None), ContainerStatus::created(1))
        .expect("create");
    assert_eq!(
        sd.containers.resolve(&e.id()[..6]).expect("prefix").id(),
        e.id()
    );
    assert_eq!(sd.containers.get(e.id()).expect("get").id(), e.id());
    let other = if e.id().starts_with('0') { "1" } else { "0" };
    let err = sd.containers.resolve(other).expect_err("missing");
    assert_eq!(err.kind(), ErrorKind::NotFound);
    assert!(err.message().contains(other));
    assert_eq!(
        sd.containers.get("nope").expect_err("get").kind(),
        ErrorKind::NotFound
    );
}

fn ids<M: Meta, S: super::Status>(v: &[Arc<super::Entry<M, S>>]) -> Vec<String> {
    let mut v: Vec<_> = v.iter().map(|e| e.id().to_string()).collect();
    v.sort();
    v
}

#[test]
fn list_filters() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let mk = |name: &str, labels: &[(&str, &str)], pod: &str, started: bool| {
        let r = sd.containers.reserve(name).expect("reserve");
        let e = sd
            .containers
            .create(
                r,
                meta(name, labels, Some(pod)),
                ContainerStatus::created(1),
            )
            .expect("c");
        if started {
            e.update(|s| s.start(2, 3)).expect("start");
        }
        e.id().to_string()
    };
    let a = mk("a", &[("app", "web"), ("tier", "fe")], "p1", true);
    let b = mk("b", &[("app", "web")], "p2", false);
    let c = mk("c", &[("app", "db")], "p1", true);
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let list = |f: Filter<ContainerState>| ids(&sd.containers.list(&f));
    assert_eq!(
        list(Filter::default()),
        sorted(vec![a.clone(), b.clone(), c.clone()])
    );
    let f = Filter {
        pod_id: Some("p1".into()),
        ..Filter::default()
    };
    assert_eq!(list(f), sorted(vec![a.clone(), c.clone()]));
    let f = Filter {
        states: vec![ContainerState::Created],
        ..Filter::default()
    };
    assert_eq!(list(f), vec![b.clone()]);
    let labels: HashMap<_, _> = [("app".to_string(), "web".to_string())].into();
    let f = Filter {
        labels: labels.clone(),
        ..Filter::default()
    };
    assert_eq!(list(f), sorted(vec![a.clone(), b.clone()]));
    let mut both = labels;
    both.insert("tier".into(), "fe".into());
    let f = Filter {
        labels: both,
        states: vec![ContainerState::Running],
        ..Filter::default()
    };
    assert_eq!(list(f), vec![a.clone()]);
    let f = Filter {
        id_prefix: Some(b[..10].to_string()),
        ..Filter::default()
    };
    assert_eq!(list(f), vec![b]);
    let f = Filter {
        pod_id: Some("p3".into()),
        ..Filter::default()
    };
    assert!(list(f).is_empty());

    // Sandboxes: the same filter type; CRI NOTREADY is "any but Ready".
    let r = sd.sandboxes.reserve("s").expect("reserve");
    let s = sd
        .sandboxes
        .create(r, meta("s", &[("x", "1")], None), SandboxStatus::created(1))
        .expect("c");
    let f = Filter {
        states: vec![SandboxState::Created, SandboxState::NotReady],
        ..Filter::default()
    };
    assert_eq!(ids(&sd.sandboxes.list(&f)), vec![s.id().to_string()]);
    s.update(|st| st.ready(2, 0)).expect("ready");
    assert!(sd.sandboxes.list(&f).is_empty());
    let f = Filter {
        pod_id: Some("p1".into()),
        ..Filter::default()
    };
    assert!(sd.sandboxes.list(&f).is_empty(), "sandboxes have no pod id");
}

#[test]
fn list_thousand_containers() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    for i in 0..1000 {
        let mut st = ContainerStatus::created(1);
        if i % 2 == 0 {
            st.start(2, 3).expect("start");
        }
        let pod = format!("p{}", i % 10);
        let loaded = Loaded {
            id: super::id::new_id(),
            meta: meta(&format!("c{i}"), &[], Some(&pod)),
            status: st,
        };
        sd.containers.adopt(loaded).expect("adopt");
    }
    assert_eq!(sd.containers.list(&Filter::default()).len(), 1000);
    let f = Filter {
        states: vec![ContainerState::Running],
        ..Filter::default()
    };
    assert_eq!(sd.containers.list(&f).len(), 500);
    let f = Filter {
        pod_id: Some("p3".into()),
        states: vec![ContainerState::Created],
        ..Filter::default()
    };
    assert_eq!(
        sd.containers.list(&f).len(),
        100,
        "i % 10 == 3 is odd: all created"
    );
    let f = Filter {
        pod_id: Some("p3".into()),
        states: vec![ContainerState::Running],
        ..Filter::default()
    };
    assert!(sd.containers.list(&f).is_empty());
}

#[test]
fn a_name_clash_at_recovery_still_lists_and_removes_both() {
    // Two records of one name (a removal a power cut undid): both exist, both are listed.
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let twins: Vec<String> = (0..2).map(|_| super::id::new_id()).collect();
    for id in &twins {
        fs::create_dir_all(tmp.path().join(CONTAINERS_DIR).join(id)).expect("mkdir");
    }
    let loaded = |id: &str| Loaded {
        id: id.to_string(),
        meta: meta("twin", &[], Some("p")),
        status: ContainerStatus::created(1),
    };
    sd.containers.adopt(loaded(&twins[0])).expect("first");
    let e = sd.containers.adopt(loaded(&twins[1])).expect_err("clash");
    let mut want = twins.clone();
    want.sort();
    assert_eq!(ids(&sd.containers.list(&Filter::default())), want, "{e}");
    assert!(e.to_string().contains("listed all the same"), "{e}");
    for id in &twins {
        assert!(sd.containers.remove(id).expect("remove"));
    }
    assert!(sd.containers.is_empty());
    sd.containers.reserve("twin").expect("the name is free");
}

#[test]
fn concurrent_updates_serialise_versions() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.sandboxes.reserve("s").expect("reserve");
    let e = sd
        .sandboxes
        .create(r, meta("s", &[], None), SandboxStatus::created(1))
        .expect("c");
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| {
                for _ in 0..5 {
                    e.update(|s| {
                        s.message.push('x');
                        Ok(())
                    })
                    .expect("update");
                }
            });
        }
    });
    let s = e.status();
    assert_eq!((s.version, s.message.len()), (41, 40));
}

#[tokio::test]
async fn on_a_full_disk_an_exit_is_published_and_written_once_there_is_room() {
    let name = "on_a_full_disk_an_exit_is_published_and_written_once_there_is_room";
    let Some(fs) = crate::testutil::SmallTmpfs::new(name, 64) else {
        return;
    };
    let sd = Dir::open(fs.path()).expect("open");
    let r = sd.containers.reserve("web").expect("reserve");
    let e = sd
        .containers
        .create(r, meta("web", &[], None), ContainerStatus::created(10))
        .expect("create");
    e.update(|s| s.start(11, 42)).expect("start");
    fs.fill();
    let on_disk = || -> ContainerStatus {
        serde_json::from_slice(&fs::read(e.dir().join(STATUS_FILE)).expect("read")).expect("json")
    };
    // An ordinary change waits for room: memory unchanged.
    let err = e.update(|s| s.exit(12, 0, false)).expect_err("a full disk");
    assert_eq!(err.kind(), ErrorKind::NoSpace, "{err}");
    assert_eq!(e.status().state(), ContainerState::Running);
    // A fact is published at once; the file keeps the last whole status.
    let s = e
        .update_even_if_full(|s| s.exit(12, 0, false))
        .expect("published");
    assert_eq!((s.version, s.state()), (3, ContainerState::Exited));
    assert_eq!(e.status(), s);
    assert_eq!(on_disk().version, 2);
    assert_eq!(files(e.dir()), [META_FILE, STATUS_FILE], "temp file left");
    fs.free();
    for _ in 0..100 {
        if on_disk().version == 3 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(on_disk(), s, "written once there was room");
}
