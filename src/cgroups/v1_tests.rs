//! cgroup v1 reader against fabricated cgroupfs trees: full, limited, and half-gone cgroups.

use std::path::Path;

use super::{Cgroups, Cpu, Version, V1};

fn write(root: &Path, controller: &str, dir: &str, file: &str, text: &str) {
    let d = root.join(controller).join(dir);
    std::fs::create_dir_all(&d).expect("mkdir");
    std::fs::write(d.join(file), text).expect("write");
}

const MEMORY_STAT: &str = "cache 4096\nrss 8192\ntotal_cache 1000000\ntotal_rss 3000000\n\
total_mapped_file 20000\ntotal_pgfault 777\ntotal_pgmajfault 7\ntotal_inactive_file 400000\n\
total_active_file 500000\n";

fn full_tree(root: &Path, dir: &str) {
    write(root, "cpuacct", dir, "cpuacct.usage", "1234567890\n");
    write(
        root,
        "cpuacct",
        dir,
        "cpuacct.stat",
        "user 100\nsystem 23\n",
    );
    write(root, "memory", dir, "memory.usage_in_bytes", "5000000\n");
    write(root, "memory", dir, "memory.stat", MEMORY_STAT);
    write(
        root,
        "memory",
        dir,
        "memory.limit_in_bytes",
        "9223372036854771712\n",
    );
    write(
        root,
        "memory",
        dir,
        "memory.memsw.usage_in_bytes",
        "5000000\n",
    );
    write(root, "pids", dir, "pids.current", "3\n");
}

#[test]
fn reads_cpu_memory_and_pids_as_cadvisor_computes_them() {
    let tmp = tempfile::tempdir().expect("tmp");
    full_tree(tmp.path(), "bosun/c1");
    let v1 = V1::new(tmp.path());
    assert_eq!(v1.version(), Version::V1);
    let s = v1.stats("/bosun/c1");
    assert_eq!(
        s.cpu,
        Some(Cpu {
            usage_ns: 1_234_567_890,
            user_ns: Some(1_000_000_000),
            system_ns: Some(230_000_000),
        })
    );
    let m = s.memory.expect("memory");
    assert_eq!(m.usage_bytes, 5_000_000);
    // working set = usage − total_inactive_file
    assert_eq!(m.working_set_bytes, 4_600_000);
    assert_eq!(m.rss_bytes, Some(3_000_000));
    assert_eq!(m.cache_bytes, Some(1_000_000));
    assert_eq!(m.mapped_file_bytes, Some(20_000));
    assert_eq!(m.page_faults, Some(777));
    assert_eq!(m.major_page_faults, Some(7));
    assert_eq!(m.limit_bytes, None, "the v1 'unlimited' value is no limit");
    assert_eq!(m.available_bytes(), None);
    assert_eq!(m.swap_bytes, Some(0));
    assert_eq!(s.pids, Some(3));
}

#[test]
fn a_limit_gives_available_bytes_and_inactive_above_usage_floors_at_zero() {
    let tmp = tempfile::tempdir().expect("tmp");
    full_tree(tmp.path(), "pod/c");
    write(
        tmp.path(),
        "memory",
        "pod/c",
        "memory.limit_in_bytes",
        "6000000\n",
    );
    let m = V1::new(tmp.path()).stats("pod/c").memory.expect("memory");
    assert_eq!(m.limit_bytes, Some(6_000_000));
    assert_eq!(m.available_bytes(), Some(1_400_000));

    write(
        tmp.path(),
        "memory",
        "pod/c",
        "memory.usage_in_bytes",
        "100\n",
    );
    let m = V1::new(tmp.path()).stats("pod/c").memory.expect("memory");
    assert_eq!(m.working_set_bytes, 0);
}

#[test]
fn missing_files_give_partial_stats_never_a_panic() {
    let tmp = tempfile::tempdir().expect("tmp");
    let v1 = V1::new(tmp.path());
    // Nothing at all: the container's cgroup is gone.
    let s = v1.stats("/bosun/gone");
    assert!(s.is_empty(), "{s:?}");

    // Only memory usage left (memory.stat removed mid-read): usage is the working set.
    write(tmp.path(), "memory", "c", "memory.usage_in_bytes", "4096\n");
    let s = v1.stats("c");
    assert!(s.cpu.is_none());
    let m = s.memory.expect("memory");
    assert_eq!((m.usage_bytes, m.working_set_bytes), (4096, 4096));
    assert_eq!(m.rss_bytes, None);
    assert_eq!(s.pids, None);

    // Garbage in a file reads as missing.
    write(tmp.path(), "cpuacct", "c", "cpuacct.usage", "not a number");
    assert!(v1.stats("c").cpu.is_none());
    // cpuacct.usage without cpuacct.stat: total only.
    write(tmp.path(), "cpuacct", "c", "cpuacct.usage", "10\n");
    assert_eq!(
        v1.stats("c").cpu,
        Some(Cpu {
            usage_ns: 10,
            user_ns: None,
            system_ns: None
        })
    );
}

#[test]
fn without_the_pids_controller_tasks_are_counted() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(tmp.path(), "cpuacct", "c", "cpuacct.usage", "1\n");
    write(tmp.path(), "cpuacct", "c", "tasks", "10\n11\n12\n");
    assert_eq!(V1::new(tmp.path()).stats("c").pids, Some(3));
}

#[test]
fn combined_cpu_cpuacct_mounts_are_found() {
    let tmp = tempfile::tempdir().expect("tmp");
    write(tmp.path(), "cpu,cpuacct", "c", "cpuacct.usage", "99\n");
    assert_eq!(
        V1::new(tmp.path()).stats("c").cpu.map(|c| c.usage_ns),
        Some(99)
    );
}

#[test]
fn pod_totals_add_up_their_containers() {
    let tmp = tempfile::tempdir().expect("tmp");
    full_tree(tmp.path(), "a");
    full_tree(tmp.path(), "b");
    write(
        tmp.path(),
        "memory",
        "b",
        "memory.limit_in_bytes",
        "6000000\n",
    );
    let v1 = V1::new(tmp.path());
    let mut total = super::Stats::default();
    total.add(&v1.stats("a"));
    total.add(&v1.stats("b"));
    total.add(&v1.stats("gone"));
    assert_eq!(total.cpu.as_ref().map(|c| c.usage_ns), Some(2_469_135_780));
    let m = total.memory.expect("memory");
    assert_eq!(m.usage_bytes, 10_000_000);
    assert_eq!(m.working_set_bytes, 9_200_000);
    assert_eq!(m.limit_bytes, None, "limits do not add up");
    assert_eq!(total.pids, Some(6));
}
