//! Unit tests for the user namespace rules: accepted pod mappings, mount mappings, `uid_map` text, host ids.

use super::*;
use crate::error::ErrorKind;
use crate::oci::spec::request::to_host;

fn m(container_id: u32, host_id: u32, length: u32) -> IdMapping {
    IdMapping {
        container_id,
        host_id,
        length,
    }
}

fn pod(uids: Vec<IdMapping>, gids: Vec<IdMapping>) -> UserNamespace {
    UserNamespace { uids, gids }
}

fn invalid(r: Result<()>, words: &[&str]) {
    let e = r.expect_err("must be refused");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    for w in words {
        assert!(e.message().contains(w), "{w:?} not in {e}");
    }
}

#[test]
fn a_pod_range_starting_at_zero_is_accepted() {
    let ns = pod(vec![m(0, 65536, 65536)], vec![m(0, 65536, 65536)]);
    check_pod("userns", &ns).expect("valid");
    assert_eq!(ns.host_root(), Some((65536, 65536)));
    let top = pod(vec![m(0, u32::MAX, 1)], vec![m(0, 0, u32::MAX)]);
    check_pod("userns", &top).expect("the last host id is usable");
}

#[test]
fn pod_mappings_critest_refuses_are_invalid_naming_the_field() {
    let two = vec![m(0, 1000, 100000), m(0, 2000, 100000)];
    invalid(
        check_pod("o.userns_options", &pod(two.clone(), two)),
        &["o.userns_options.uids", "2 mappings"],
    );
    let no_zero = vec![m(1, 1000, 100000)];
    invalid(
        check_pod("o", &pod(no_zero.clone(), no_zero)),
        &["o.uids[0]", "container id 0 is not mapped"],
    );
    invalid(
        check_pod("o", &pod(vec![m(0, 1000, 10)], vec![])),
        &["o.gids", "needs one mapping"],
    );
    invalid(
        check_pod("o", &pod(vec![m(0, 1000, 0)], vec![m(0, 1000, 1)])),
        &["o.uids[0]", "length"],
    );
    invalid(
        check_pod("o", &pod(vec![m(0, u32::MAX, 2)], vec![m(0, 1, 1)])),
        &["o.uids[0]", "32-bit"],
    );
}

#[test]
fn mount_mappings_need_both_sides_and_disjoint_ranges() {
    check_mount("mounts[0]", &[], &[]).expect("not ID-mapped");
    check_mount(
        "mounts[0]",
        &[m(0, 1000, 10), m(10, 5000, 5)],
        &[m(5, 1, 1)],
    )
    .expect("several ranges, no zero needed");
    invalid(
        check_mount("mounts[2]", &[m(0, 1000, 10)], &[]),
        &["mounts[2].gid_mappings", "both"],
    );
    invalid(
        check_mount(
            "mounts[0]",
            &[m(0, 1000, 10), m(5, 9000, 10)],
            &[m(0, 0, 1)],
        ),
        &["uid_mappings", "overlap"],
    );
    invalid(
        check_mount("mounts[0]", &[m(0, 1000, 10)], &[m(0, 0, 5), m(10, 3, 5)]),
        &["gid_mappings", "overlap"],
    );
    let many: Vec<IdMapping> = (0..=MAX_RANGES as u32).map(|i| m(i, i, 1)).collect();
    invalid(check_mount("mounts[0]", &many, &many), &["341 ranges"]);
}

#[test]
fn map_text_round_trips_and_reads_the_kernels_padding() {
    let map = vec![m(0, 65536, 65536), m(70000, 1, 2)];
    assert_eq!(map_text(&map), "0 65536 65536\n70000 1 2\n");
    assert_eq!(parse_map_text(&map_text(&map)), Some(map));
    assert_eq!(
        parse_map_text("         0          0 4294967295\n"),
        Some(vec![m(0, 0, u32::MAX)])
    );
    assert_eq!(parse_map_text("0 1\n"), None);
    assert_eq!(parse_map_text("0 1 2 3\n"), None);
}

#[test]
fn host_ids_of_container_ids() {
    let map = [m(0, 100000, 1000), m(5000, 7, 3)];
    assert_eq!(to_host(&map, 0), Some(100000));
    assert_eq!(to_host(&map, 999), Some(100999));
    assert_eq!(to_host(&map, 1000), None);
    assert_eq!(to_host(&map, 5002), Some(9));
    assert_eq!(to_host(&map, 5003), None);
    let oci = to_oci(&map).expect("oci");
    assert_eq!(
        (oci[1].container_id(), oci[1].host_id(), oci[1].size()),
        (5000, 7, 3)
    );
}
