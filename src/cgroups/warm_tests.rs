//! Tests of the cgroup warming: which cgroups are candidates and when a write is made or warming goes off.

use super::*;

const HYBRID: &str = "9:name=systemd:/\n8:pids:/a\n4:memory:/process_api/x\n0::/d\n";

fn procs(t: &Target) -> String {
    t.procs.display().to_string()
}

#[test]
fn candidates_come_cgroup2_first_then_named_then_controllers() {
    let got = candidates(Path::new("/cg"), HYBRID);
    let paths: Vec<String> = got.iter().map(procs).collect();
    assert_eq!(
        paths,
        [
            "/cg/d/cgroup.procs",
            "/cg/unified/d/cgroup.procs",
            "/cg/systemd/cgroup.procs",
            "/cg/pids/a/cgroup.procs",
            "/cg/memory/process_api/x/cgroup.procs",
        ]
    );
    assert_eq!(got[0].line, "0::/d");
    assert_eq!(got[2].line, "9:name=systemd:/");
}

#[test]
fn paths_outside_the_namespace_or_climbing_are_left_out() {
    let got = candidates(
        Path::new("/cg"),
        "0::/../x\n3:cpu:/a/../../b\n2:pids:rel\n1::/\n",
    );
    assert!(got.is_empty(), "{got:?}");
}

#[test]
fn the_daemon_is_found_in_its_own_cgroup_and_a_write_moves_it_nowhere() {
    let before = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroups");
    let w = Arc::new(Warmer::detect(Path::new("/sys/fs/cgroup")));
    let Some(t) = w.target.clone() else {
        panic!("no cgroup of this process found under /sys/fs/cgroup: {before}");
    };
    assert!(holds(&t.procs, std::process::id()), "{}", procs(&t));
    // No runtime here: the write runs inline.
    w.warm();
    assert!(w.is_on(), "the write to {} failed", procs(&t));
    assert!(!w.busy.load(Ordering::Acquire));
    assert_eq!(
        std::fs::read_to_string("/proc/self/cgroup").expect("own cgroups"),
        before
    );
}

#[test]
fn a_daemon_that_moved_is_not_written_back_and_warming_goes_off() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cgroup.procs");
    std::fs::write(&file, "").expect("write");
    let w = Arc::new(Warmer {
        target: Some(Target {
            procs: file.clone(),
            line: "0::/where/we/were/not".into(),
        }),
        ..Warmer::default()
    });
    w.warm();
    assert!(!w.is_on());
    assert_eq!(std::fs::read_to_string(&file).expect("read"), "");
}

#[test]
fn a_failed_write_turns_warming_off() {
    let own = std::fs::read_to_string("/proc/self/cgroup").expect("own cgroups");
    let line = own.lines().next().expect("a line").to_string();
    let w = Arc::new(Warmer {
        target: Some(Target {
            procs: PathBuf::from("/nonexistent/cgroup.procs"),
            line,
        }),
        ..Warmer::default()
    });
    assert!(w.is_on());
    w.warm();
    assert!(!w.is_on());
    // Off: no more writes, and no task left busy.
    w.warm();
    assert!(!w.busy.load(Ordering::Acquire));
}

#[test]
fn without_a_target_nothing_is_written() {
    let w = Arc::new(Warmer::default());
    assert!(!w.is_on());
    w.warm();
    assert!(!w.busy.load(Ordering::Acquire));
}
