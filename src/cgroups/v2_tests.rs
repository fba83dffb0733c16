//! cgroup v2 reader against fabricated unified trees: full, limited, and half-gone cgroups.

use std::path::Path;

use super::{Cgroups, Cpu, Version, V2};

fn write(root: &Path, dir: &str, file: &str, text: &str) {
    let d = root.join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join(file), text).expect("write");
}

const CPU_STAT: &str = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n\
nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n";

const MEMORY_STAT: &str = "anon 3000000\nfile 1500000\nkernel 100000\nfile_mapped 30000\n\
active_file 700000\ninactive_file 800000\npgfault 1234\npgmajfault 12\n";

fn full_tree(root: &Path, dir: &str) {
    write(root, dir, "cpu.stat", CPU_STAT);
    write(root, dir, "memory.current", "6000000\n");
    write(root, dir, "memory.stat", MEMORY_STAT);
    write(root, dir, "memory.max", "max\n");
    write(root, dir, "memory.swap.current", "0\n");
    write(root, dir, "memory.swap.max", "max\n");
    write(root, dir, "pids.current", "5\n");
    write(root, dir, "cpu.pressure", "some avg10=2.00 avg60=1.00 avg300=0.50 total=4000\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=10\n");
    write(root, dir, "memory.pressure", "some avg10=0.00 avg60=0.00 avg300=0.00 total=300\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=200\n");
}

#[test]
fn reads_cpu_memory_and_pids_as_cadvisor_computes_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    full_tree(tmp.path(), "kubepods.slice/pod1.slice/bosun-c.scope");
    let v2 = V2::new(tmp.path());
    assert_eq!(v2.version(), Version::V2);
    let s = v2.stats("/kubepods.slice/pod1.slice/bosun-c.scope");
    assert_eq!(
        s.cpu,
        Some(Cpu {
            usage_ns: 2_500_000_000,
            user_ns: Some(2_000_000_000),
            system_ns: Some(500_000_000),
        })
    );
    let m = s.memory.expect("memory");
    assert_eq!(m.usage_bytes, 6_000_000);
    // working set = memory.current − inactive_file
    assert_eq!(m.working_set_bytes, 5_200_000);
    assert_eq!(m.rss_bytes, Some(3_000_000));
    assert_eq!(m.cache_bytes, Some(1_500_000));
    assert_eq!(m.mapped_file_bytes, Some(30_000));
    assert_eq!(m.page_faults, Some(1234));
    assert_eq!(m.major_page_faults, Some(12));
    assert_eq!(m.limit_bytes, None, "max is no limit");
    assert_eq!(m.available_bytes(), None);
    assert_eq!((m.swap_bytes, m.swap_available_bytes()), (Some(0), None));
    assert_eq!(s.pids, Some(5));
    let cpu = s.pressure.cpu.expect("cpu pressure");
    assert_eq!((cpu.some.avg10, cpu.some.total_us), (2.0, 4000));
    assert_eq!(
        s.pressure.memory.and_then(|m| m.full).map(|f| f.total_us),
        Some(200)
    );
    assert!(
        s.pressure.io.is_none(),
        "io.pressure absent: no io pressure"
    );
}

#[test]
fn limits_give_available_bytes() {
    let tmp = tempfile::tempdir().expect("tmp");
    full_tree(tmp.path(), "c");
    write(tmp.path(), "c", "memory.max", "8000000\n");
    write(tmp.path(), "c", "memory.swap.max", "1000\n");
    write(tmp.path(), "c", "memory.swap.current", "400\n");
    let m = V2::new(tmp.path()).stats("c").memory.expect("memory");
    assert_eq!(m.limit_bytes, Some(8_000_000));
    assert_eq!(m.available_bytes(), Some(2_800_000));
    assert_eq!(m.swap_available_bytes(), Some(600));
}

#[test]
fn missing_files_give_partial_stats_never_a_panic() {
    let tmp = tempfile::tempdir().expect("tmp");
    let v2 = V2::new(tmp.path());
    assert!(v2.stats("/gone").is_empty());

    // cpu.stat without usage_usec (junk) is no cpu; memory.current alone is usage.
    write(tmp.path(), "c", "cpu.stat", "nr_periods 0\n");
    write(tmp.path(), "c", "memory.current", "8192\n");
    let s = v2.stats("c");
    assert!(s.cpu.is_none(), "{s:?}");
    let m = s.memory.expect("memory");
    assert_eq!((m.usage_bytes, m.working_set_bytes), (8192, 8192));
    assert_eq!(m.limit_bytes, None);
    assert_eq!(s.pids, None);

    // The pids controller not enabled in this subtree: threads of the leaf are counted.
    write(tmp.path(), "c", "cgroup.threads", "1\n2\n");
    assert_eq!(v2.stats("c").pids, Some(2));
    // An unreadable memory.max (junk) is no limit, not an error.
    write(tmp.path(), "c", "memory.max", "lots\n");
    assert_eq!(v2.stats("c").memory.and_then(|m| m.limit_bytes), None);
}

#[test]
fn detect_picks_v1_for_a_plain_directory() {
    let tmp = tempfile::tempdir().expect("tmp");
    assert_eq!(super::detect_at(tmp.path()).version(), Version::V1);
}

#[test]
fn kill_writes_one_to_cgroup_kill_where_the_kernel_has_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(tmp.path(), "bosun/c1", "cgroup.kill", "");
    let v2 = V2::new(tmp.path());
    assert!(v2.kill("/bosun/c1").expect("kill"));
    let written = std::fs::read_to_string(tmp.path().join("bosun/c1/cgroup.kill")).expect("read");
    assert_eq!(written, "1");
    // No cgroup.kill (kernel < 5.14) or no cgroup at all: the caller falls back.
    std::fs::create_dir_all(tmp.path().join("bosun/old")).expect("mkdir");
    assert!(!v2.kill("/bosun/old").expect("old kernel"));
    assert!(!v2.kill("/bosun/gone").expect("gone"));
}

#[test]
fn v1_never_kills_by_cgroup() {
    let tmp = tempfile::tempdir().expect("tmp");
    let v1 = super::V1::new(tmp.path());
    assert!(!v1.kill("/bosun/c1").expect("v1"));
}
