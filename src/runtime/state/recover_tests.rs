//! Tests for recovery: fabricated directories, corrupt files, and the reconcile matrix.

use std::fs;
use std::path::{Path, PathBuf};

use super::dir_tests::{meta, Dir, TMeta};
use super::load::load_all;
use super::record::{CONTAINERS_DIR, META_FILE, SANDBOXES_DIR, STATUS_FILE};
use super::recover::{reconcile, ExitRecord};
use super::status::{ContainerState, ContainerStatus, SandboxState, SandboxStatus};
use crate::error::ErrorKind;
use crate::store::atomic::write_json;

type Rec = super::Recovered<TMeta, TMeta>;

fn fabricate(
    root: &Path,
    kind: &str,
    meta_bytes: Option<&[u8]>,
    status_bytes: Option<&[u8]>,
) -> (String, PathBuf) {
    let id = super::id::new_id();
    let dir = root.join(kind).join(&id);
    fs::create_dir_all(&dir).expect("mkdir");
    if let Some(b) = meta_bytes {
        fs::write(dir.join(META_FILE), b).expect("meta");
    }
    if let Some(b) = status_bytes {
        fs::write(dir.join(STATUS_FILE), b).expect("status");
    }
    (id, dir)
}

fn meta_json(name: &str) -> Vec<u8> {
    serde_json::to_vec(&meta(name, &[], None)).expect("json")
}

#[test]
fn round_trip_through_disk() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let sd = Dir::open(tmp.path()).expect("open");
    let r = sd.sandboxes.reserve("s").expect("reserve");
    let sb = sd
        .sandboxes
        .create(r, meta("s", &[], None), SandboxStatus::created(1))
        .expect("c");
    sb.update(|s| s.ready(2, 5)).expect("ready");
    let r = sd.containers.reserve("c").expect("reserve");
    let c = sd
        .containers
        .create(
            r,
            meta("c", &[], Some(sb.id())),
            ContainerStatus::created(3),
        )
        .expect("c");
    c.update(|s| s.start(4, 6)).expect("start");

    let rec: Rec = load_all(tmp.path());
    assert!(rec.problems.is_empty(), "{:?}", rec.problems);
    assert_eq!(rec.sandboxes.len(), 1);
    assert_eq!(rec.sandboxes[0].status, sb.status());
    assert_eq!(rec.containers[0].status, c.status());
    assert_eq!(rec.containers[0].status.version, 2);

    let again = Dir::open(tmp.path()).expect("reopen");
    assert!(again.adopt(rec).is_empty());
    assert_eq!(
        again.sandboxes.get(sb.id()).expect("sb").status().state(),
        SandboxState::Ready
    );
    let err = again.containers.reserve("c").expect_err("name re-claimed");
    assert_eq!(err.kind(), ErrorKind::AlreadyExists);
    assert!(err.message().contains(c.id()));
}

#[test]
fn crash_leftovers_are_cleaned() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let status = serde_json::to_vec(&ContainerStatus::created(1)).expect("json");
    let (_, dir) = fabricate(
        tmp.path(),
        CONTAINERS_DIR,
        Some(&meta_json("a")),
        Some(&status),
    );
    // Crash between writing the temp file and the rename.
    fs::write(dir.join(".tmp-status.json-00000000deadbeef"), b"{\"half").expect("tmp");
    let (_, no_meta) = fabricate(tmp.path(), CONTAINERS_DIR, None, Some(&status));
    let rec: Rec = load_all(tmp.path());
    assert_eq!(rec.containers.len(), 1);
    assert_eq!(rec.containers[0].status.state(), ContainerState::Created);
    let names: Vec<_> = fs::read_dir(&dir)
        .expect("ls")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 2, "temp file not removed: {names:?}");
    assert!(!no_meta.exists(), "meta-less dir must be removed");
    assert_eq!(rec.problems.len(), 1, "{:?}", rec.problems);
    assert!(
        rec.problems[0].contains("no meta.json"),
        "{:?}",
        rec.problems
    );
}

#[test]
fn corrupt_files_never_panic() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let garbage: [&[u8]; 5] = [
        b"",
        b"{\"version\":",
        b"null",
        b"\xff\xfe\x00binary",
        b"{\"created_ns\":\"x\"}",
    ];
    let mut kept = Vec::new();
    for g in garbage {
        let (_, d) = fabricate(tmp.path(), CONTAINERS_DIR, Some(g), Some(b"{}"));
        kept.push(d);
        fabricate(tmp.path(), CONTAINERS_DIR, Some(&meta_json("c")), Some(g));
        fabricate(tmp.path(), SANDBOXES_DIR, Some(&meta_json("s")), Some(g));
    }
    fabricate(tmp.path(), SANDBOXES_DIR, Some(&meta_json("s2")), None);
    fs::create_dir_all(tmp.path().join(CONTAINERS_DIR).join("not-an-id")).expect("mkdir");
    let rec: Rec = load_all(tmp.path());
    assert_eq!(rec.containers.len(), 5);
    assert_eq!(rec.sandboxes.len(), 6);
    assert!(rec
        .containers
        .iter()
        .all(|c| c.status.state() == ContainerState::Unknown));
    assert!(rec
        .sandboxes
        .iter()
        .all(|s| s.status.state() == SandboxState::Unknown));
    assert!(
        kept.iter().all(|d| d.exists()),
        "corrupt meta dirs are kept for inspection"
    );
    // 5 corrupt metas + 10 corrupt statuses + 1 stray dir; a missing status is not a problem line.
    assert_eq!(rec.problems.len(), 16, "{:#?}", rec.problems);
    assert!(rec.problems.iter().any(|p| p.contains("not-an-id")));
}

/// Issue 16: a creation interrupted between `meta.json` and `status.json` comes back UNKNOWN
/// with the creation time `meta.json` carries, never 0 (CRI clients reject CreatedAt 0).
#[test]
fn a_record_without_status_is_unknown_created_when_its_meta_was_written() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_, c) = fabricate(tmp.path(), CONTAINERS_DIR, Some(&meta_json("c")), None);
    let (_, s) = fabricate(tmp.path(), SANDBOXES_DIR, Some(&meta_json("s")), Some(b"{"));
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_700_000_000);
    for dir in [&c, &s] {
        fs::File::options()
            .write(true)
            .open(dir.join(META_FILE))
            .and_then(|f| f.set_modified(at))
            .expect("set mtime");
    }
    let rec: Rec = load_all(tmp.path());
    let want = 1_700_000_000 * 1_000_000_000;
    let c = &rec.containers[0].status;
    assert_eq!((c.state(), c.created_ns), (ContainerState::Unknown, want));
    assert!(c.message.contains("missing"), "{}", c.message);
    let s = &rec.sandboxes[0].status;
    assert_eq!((s.state(), s.created_ns), (SandboxState::Unknown, want));
}

#[test]
fn missing_root_is_empty() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let rec: Rec = load_all(&tmp.path().join("absent"));
    assert!(rec.sandboxes.is_empty() && rec.containers.is_empty() && rec.problems.is_empty());
}

fn record(code: i32, oom: bool) -> ExitRecord {
    ExitRecord {
        pid: 77,
        exit_code: code,
        signal: None,
        oom_killed: oom,
        started_at_ns: 5,
        finished_at_ns: 900,
    }
}

fn running() -> ContainerStatus {
    let mut s = ContainerStatus::created(1);
    s.monitor_pid = 66;
    s.start(2, 77).expect("start");
    s
}

#[test]
fn reconcile_matrix() {
    let created = || {
        let mut s = ContainerStatus::created(1);
        s.monitor_pid = 66;
        s
    };
    let mut exited = running();
    exited.exit(3, 0, false).expect("exit");

    // EXITED: final, whatever the record says.
    assert_eq!(
        reconcile(exited.clone(), Some(record(1, true)), false),
        exited
    );
    // RUNNING + record: the real exit while we were down.
    let s = reconcile(running(), Some(record(137, false)), false);
    assert_eq!(
        (s.state(), s.exit_code, s.finished_ns, s.reason.as_str()),
        (ContainerState::Exited, 137, 900, "Error")
    );
    assert_eq!(s.started_ns, 2, "our start time is kept");
    let s = reconcile(running(), Some(record(137, true)), true);
    assert_eq!(s.reason, "OOMKilled");
    // RUNNING + no record + monitor alive: still running.
    assert_eq!(reconcile(running(), None, true), running());
    // RUNNING + no record + monitor dead: UNKNOWN with a message.
    let s = reconcile(running(), None, false);
    assert_eq!(
        (s.state(), s.exit_code, s.reason.as_str()),
        (ContainerState::Unknown, 255, "Unknown")
    );
    assert!(
        s.message.contains("pid 66") && s.message.contains("without an exit record"),
        "{}",
        s.message
    );
    // CREATED + record: started and exited while we were down.
    let s = reconcile(created(), Some(record(0, false)), false);
    assert_eq!(
        (s.state(), s.started_ns, s.pid, s.reason.as_str()),
        (ContainerState::Exited, 5, 77, "Completed")
    );
    // CREATED + no record + monitor alive: still created.
    assert_eq!(reconcile(created(), None, true), created());
    // CREATED + no record + monitor dead: UNKNOWN.
    let s = reconcile(created(), None, false);
    assert_eq!(s.state(), ContainerState::Unknown);
    assert!(s.message.contains("before start"), "{}", s.message);
    // CREATED with no monitor (issue 13: never started) + no record: still created.
    let never = ContainerStatus::created(1);
    assert_eq!(reconcile(never.clone(), None, false), never);
    // ... + a record (a start the crash interrupted ran to its end): EXITED with its code.
    let s = reconcile(never, Some(record(3, false)), false);
    assert_eq!((s.state(), s.exit_code), (ContainerState::Exited, 3));
    // UNKNOWN (corrupt status) + record: the real exit code comes back.
    let s = reconcile(
        ContainerStatus::unreadable("corrupt"),
        Some(record(3, false)),
        false,
    );
    assert_eq!(
        (s.state(), s.exit_code, s.created_ns),
        (ContainerState::Exited, 3, 5)
    );
    // UNKNOWN + no record: stays UNKNOWN, alive or not.
    for alive in [true, false] {
        let u = ContainerStatus::unreadable("corrupt");
        assert_eq!(reconcile(u.clone(), None, alive), u);
    }
}

#[test]
fn reconciled_status_is_written_with_next_version() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path();
    let (id, _) = fabricate(dir, CONTAINERS_DIR, Some(&meta_json("c")), None);
    let mut st = running();
    st.version = 7;
    write_json(&dir.join(CONTAINERS_DIR).join(&id).join(STATUS_FILE), &st).expect("write");
    let rec: Rec = load_all(dir);
    let fixed = reconcile(
        rec.containers[0].status.clone(),
        Some(record(0, false)),
        false,
    );
    let sd = Dir::open(dir).expect("open");
    assert!(sd.adopt(rec).is_empty());
    let s = sd.containers.update(&id, |s| {
        *s = fixed;
        Ok(())
    });
    assert_eq!(s.expect("update").version, 8);
    let back: Rec = load_all(dir);
    assert_eq!(back.containers[0].status.state(), ContainerState::Exited);
}
