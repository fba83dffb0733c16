//! Tests of the stop signal enum ⇄ signal number mapping.

use super::assert_invalid;
use super::signal::*;
use crate::proto::runtime::v1 as pb;

#[test]
fn named_signals_map_to_linux_numbers() {
    let table = [
        (pb::Signal::RuntimeDefault, None),
        (pb::Signal::Sigterm, Some(15)),
        (pb::Signal::Sigkill, Some(9)),
        (pb::Signal::Sigusr1, Some(10)),
        (pb::Signal::Sigusr2, Some(12)),
        (pb::Signal::Sighup, Some(1)),
        (pb::Signal::Sigint, Some(2)),
        (pb::Signal::Sigquit, Some(3)),
        (pb::Signal::Sigwinch, Some(28)),
        (pb::Signal::Sigstkflt, Some(16)),
        (pb::Signal::Sigpwr, Some(30)),
        (pb::Signal::Sigsys, Some(31)),
        (pb::Signal::Sigiot, Some(6)),
        (pb::Signal::Sigcld, Some(17)),
        (pb::Signal::Sigpoll, Some(29)),
        (pb::Signal::Sigrtmin, Some(34)),
        (pb::Signal::Sigrtminplus1, Some(35)),
        (pb::Signal::Sigrtminplus15, Some(49)),
        (pb::Signal::Sigrtmaxminus14, Some(50)),
        (pb::Signal::Sigrtmaxminus1, Some(63)),
        (pb::Signal::Sigrtmax, Some(64)),
    ];
    for (wire, want) in table {
        assert_eq!(stop_signal(wire as i32).ok(), Some(want), "{wire:?}");
    }
}

#[test]
fn every_enum_value_round_trips_up_to_aliases() {
    let aliases = [
        (pb::Signal::Sigiot, pb::Signal::Sigabrt),
        (pb::Signal::Sigcld, pb::Signal::Sigchld),
        (pb::Signal::Sigpoll, pb::Signal::Sigio),
    ];
    let mut seen = std::collections::BTreeSet::new();
    for v in 0..=65 {
        let wire = pb::Signal::try_from(v).expect("the enum is dense 0..=65");
        let n = stop_signal(v).expect("every value converts");
        let back = stop_signal_to_proto(n);
        let want = aliases
            .iter()
            .find(|(a, _)| *a == wire)
            .map_or(wire, |(_, canonical)| *canonical);
        assert_eq!(back, want, "{wire:?} → {n:?}");
        if let Some(n) = n {
            assert!((1..=64).contains(&n), "{wire:?} → {n}");
            seen.insert(n);
        }
    }
    // 1..=31 except 32/33 (glibc-internal, no CRI name) and the realtime range 34..=64.
    assert_eq!(
        seen.len(),
        31 + 31,
        "every Linux signal bosun can send is reachable"
    );
}

#[test]
fn unknown_values_are_invalid_and_unnamed_numbers_report_default() {
    assert_invalid(stop_signal(66), &["stop_signal", "66"]);
    assert_invalid(stop_signal(-1), &["stop_signal", "-1"]);
    assert_eq!(stop_signal_to_proto(None), pb::Signal::RuntimeDefault);
    assert_eq!(stop_signal_to_proto(Some(32)), pb::Signal::RuntimeDefault);
    assert_eq!(stop_signal_to_proto(Some(0)), pb::Signal::RuntimeDefault);
    assert_eq!(stop_signal_to_proto(Some(65)), pb::Signal::RuntimeDefault);
    assert_eq!(stop_signal_to_proto(Some(15)), pb::Signal::Sigterm);
}
