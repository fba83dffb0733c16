//! `[node]` eviction keys as the kubelet parses them: signals, hard and soft thresholds, grace periods, minimum reclaim.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::node::NodeKeys;
use crate::config::quantity;
use crate::error::{Error, Result};

/// What the node watches (the kubelet's eviction signals).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Signal {
    /// Node memory: capacity less the working set of everything.
    MemoryAvailable,
    /// The pods' memory: allocatable less the `kubepods` cgroup's working set (the kubelet's
    /// `allocatableMemory.available`: derived from the hard `memory.available`, or set).
    AllocatableMemoryAvailable,
    /// Free space of the filesystem holding bosun's root.
    NodeFsAvailable,
    /// Free inodes there.
    NodeFsInodesFree,
    /// Free space of the filesystem holding images.
    ImageFsAvailable,
    /// Free inodes there.
    ImageFsInodesFree,
    /// Process ids left (`pid_max` less the tasks that exist).
    PidAvailable,
}

impl Signal {
    /// The signals a user may configure, by their kubelet names.
    pub const CONFIGURABLE: [Signal; 7] = [
        Signal::MemoryAvailable,
        Signal::AllocatableMemoryAvailable,
        Signal::NodeFsAvailable,
        Signal::NodeFsInodesFree,
        Signal::ImageFsAvailable,
        Signal::ImageFsInodesFree,
        Signal::PidAvailable,
    ];

    /// The kubelet's name of the signal.
    pub fn as_str(self) -> &'static str {
        match self {
            Signal::MemoryAvailable => "memory.available",
            Signal::AllocatableMemoryAvailable => "allocatableMemory.available",
            Signal::NodeFsAvailable => "nodefs.available",
            Signal::NodeFsInodesFree => "nodefs.inodesFree",
            Signal::ImageFsAvailable => "imagefs.available",
            Signal::ImageFsInodesFree => "imagefs.inodesFree",
            Signal::PidAvailable => "pid.available",
        }
    }

    /// The configurable signal named `name`.
    pub fn parse(name: &str) -> Option<Signal> {
        Self::CONFIGURABLE.into_iter().find(|s| s.as_str() == name)
    }
}

/// A threshold's amount: absolute, or a share of the signal's capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value {
    /// Bytes, inodes or pids.
    Quantity(f64),
    /// A fraction (0..1) of capacity.
    Percentage(f64),
}

impl Value {
    /// The amount against a capacity of `capacity`.
    pub fn of(self, capacity: f64) -> f64 {
        match self {
            Value::Quantity(q) => q,
            Value::Percentage(p) => (p * capacity).round(),
        }
    }
}

/// One threshold: met when the signal's available amount falls below `value`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Threshold {
    pub signal: Signal,
    pub value: Value,
    /// Zero for a hard threshold; how long a soft one must hold.
    pub grace: Duration,
    /// Extra to reclaim once met (the threshold counts as met until available exceeds value
    /// plus this).
    pub min_reclaim: Option<Value>,
}

impl Threshold {
    /// Hard thresholds evict at once.
    pub fn is_hard(&self) -> bool {
        self.grace.is_zero()
    }

    /// Whether `available` of `capacity` meets it (with its minimum reclaim added when
    /// `with_reclaim`).
    pub fn met(&self, available: f64, capacity: f64, with_reclaim: bool) -> bool {
        let mut q = self.value.of(capacity);
        if with_reclaim {
            q += self.min_reclaim.map_or(0.0, |r| r.of(capacity));
        }
        q > available
    }

    /// Identity for tracking (signal, hard or soft).
    pub fn key(&self) -> (Signal, bool) {
        (self.signal, self.is_hard())
    }
}

/// The kubelet's Linux defaults for `evictionHard`.
pub const DEFAULT_HARD: [(&str, &str); 5] = [
    ("memory.available", "100Mi"),
    ("nodefs.available", "10%"),
    ("nodefs.inodesFree", "5%"),
    ("imagefs.available", "15%"),
    ("imagefs.inodesFree", "5%"),
];

fn value(field: &str, signal: &str, text: &str, allow_zero: bool) -> Result<Option<Value>> {
    let bad = |why: &str| {
        Error::invalid(format!(
            "[node] {field}.{signal:?}: {:?} {why}",
            crate::error::echo(text)
        ))
    };
    if let Some(p) = text.strip_suffix('%') {
        // The kubelet ignores 0% and 100% thresholds.
        if !allow_zero && (text == "0%" || text == "100%") {
            return Ok(None);
        }
        let v: f64 = p.trim().parse().map_err(|_| bad("is not a percentage"))?;
        if !(0.0..=100.0).contains(&v) || (allow_zero && v <= 0.0) {
            return Err(bad("must be within 0%..100%"));
        }
        return Ok(Some(Value::Percentage(v / 100.0)));
    }
    let q = quantity::parse(text).ok_or_else(|| bad("is not a quantity"))?;
    if q < 0.0 || (!allow_zero && q == 0.0) {
        return Err(bad("must be positive"));
    }
    Ok(Some(Value::Quantity(q)))
}

/// Parses a Go duration (`"1m30s"`, `"500ms"`, `"2h"`, `"0"`).
pub fn parse_duration(text: &str) -> Option<Duration> {
    let t = text.trim();
    if t == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = t;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..n_end].parse().ok()?;
        rest = &rest[n_end..];
        let u_end = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..u_end] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            _ => return None,
        };
        rest = &rest[u_end..];
        total += n * scale;
    }
    (total.is_finite() && total >= 0.0).then(|| Duration::from_secs_f64(total))
}

fn signal_of(field: &str, name: &str) -> Result<Signal> {
    Signal::parse(name).ok_or_else(|| {
        Error::invalid(format!(
            "[node] {field}: unsupported eviction signal {:?} (one of memory.available, \
             allocatableMemory.available, nodefs.available, nodefs.inodesFree, imagefs.available, imagefs.inodesFree, \
             pid.available)",
            crate::error::echo(name)
        ))
    })
}

/// A named duration of `[node]`.
pub fn duration(field: &str, text: &str) -> Result<Duration> {
    parse_duration(text).ok_or_else(|| {
        Error::invalid(format!(
            "[node] {field}: {:?} is not a duration such as \"10s\" or \"1m30s\"",
            crate::error::echo(text)
        ))
    })
}

/// Every threshold of `cfg`: the hard ones (the kubelet's defaults unless set), the soft ones
/// with their grace periods, minimum reclaims, and with allocatable enforced on pods, an
/// `allocatableMemory.available` copy of the hard `memory.available`.
pub fn parse(cfg: &NodeKeys) -> Result<Vec<Threshold>> {
    let defaults: BTreeMap<String, String> = DEFAULT_HARD
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let hard = cfg.eviction_hard.as_ref().unwrap_or(&defaults);
    let mut out = Vec::new();
    for (name, text) in hard {
        let signal = signal_of("eviction_hard", name)?;
        if let Some(v) = value("eviction_hard", name, text, false)? {
            out.push(Threshold {
                signal,
                value: v,
                grace: Duration::ZERO,
                min_reclaim: None,
            });
        }
    }
    for (name, text) in &cfg.eviction_soft {
        let signal = signal_of("eviction_soft", name)?;
        let grace_text = cfg.eviction_soft_grace_period.get(name).ok_or_else(|| {
            Error::invalid(format!(
                "[node] eviction_soft: grace period must be specified for the soft eviction \
                 threshold {name} (eviction_soft_grace_period)"
            ))
        })?;
        let grace = duration(&format!("eviction_soft_grace_period.{name}"), grace_text)?;
        if grace.is_zero() {
            return Err(Error::invalid(format!(
                "[node] eviction_soft_grace_period.{name}: must be positive (a soft threshold \
                 with no grace is a hard one)"
            )));
        }
        if let Some(v) = value("eviction_soft", name, text, false)? {
            out.push(Threshold {
                signal,
                value: v,
                grace,
                min_reclaim: None,
            });
        }
    }
    for name in cfg.eviction_soft_grace_period.keys() {
        signal_of("eviction_soft_grace_period", name)?;
    }
    for (name, text) in &cfg.eviction_minimum_reclaim {
        let signal = signal_of("eviction_minimum_reclaim", name)?;
        let v = value("eviction_minimum_reclaim", name, text, true)?;
        for t in out.iter_mut().filter(|t| t.signal == signal) {
            t.min_reclaim = v;
        }
    }
    let set_hard = out
        .iter()
        .any(|t| t.signal == Signal::AllocatableMemoryAvailable && t.is_hard());
    if cfg.enforces_pods_allocatable() && !set_hard {
        let copies: Vec<Threshold> = out
            .iter()
            .filter(|t| t.signal == Signal::MemoryAvailable && t.is_hard())
            .map(|t| Threshold {
                signal: Signal::AllocatableMemoryAvailable,
                ..*t
            })
            .collect();
        out.extend(copies);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(f: impl FnOnce(&mut NodeKeys)) -> NodeKeys {
        let mut c = NodeKeys::default();
        f(&mut c);
        c
    }

    #[test]
    fn allocatable_memory_may_be_set_and_then_is_not_copied() {
        let t = parse(&cfg(|c| {
            c.eviction_hard = Some(BTreeMap::from([
                ("memory.available".to_string(), "100Mi".to_string()),
                (
                    "allocatableMemory.available".to_string(),
                    "300Mi".to_string(),
                ),
            ]));
        }))
        .expect("parse");
        let alloc: Vec<_> = t
            .iter()
            .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
            .collect();
        assert_eq!(alloc.len(), 1, "{t:?}");
        assert_eq!(alloc[0].value, Value::Quantity(300.0 * 1024.0 * 1024.0));
    }

    #[test]
    fn defaults_are_the_kubelets_and_allocatable_copies_memory() {
        let t = parse(&NodeKeys::default()).expect("parse");
        let find = |s: Signal| t.iter().find(|t| t.signal == s).map(|t| t.value);
        assert_eq!(
            find(Signal::MemoryAvailable),
            Some(Value::Quantity(100.0 * 1024.0 * 1024.0))
        );
        assert_eq!(find(Signal::NodeFsAvailable), Some(Value::Percentage(0.1)));
        assert_eq!(
            find(Signal::ImageFsAvailable),
            Some(Value::Percentage(0.15))
        );
        assert_eq!(
            find(Signal::NodeFsInodesFree),
            Some(Value::Percentage(0.05))
        );
        assert_eq!(
            find(Signal::AllocatableMemoryAvailable),
            find(Signal::MemoryAvailable)
        );
        assert_eq!(find(Signal::PidAvailable), None, "no default for pids");
        assert!(t.iter().all(Threshold::is_hard));
        let none = parse(&cfg(|c| {
            c.eviction_hard = Some(BTreeMap::new());
            c.enforce_node_allocatable.clear();
        }))
        .expect("parse");
        assert!(none.is_empty());
    }

    #[test]
    fn soft_thresholds_need_a_grace_and_reclaim_applies() {
        let c = cfg(|c| {
            c.eviction_soft
                .insert("memory.available".into(), "1Gi".into());
            let e = parse(c).expect_err("no grace");
            assert!(
                e.to_string().contains("grace period must be specified"),
                "{e}"
            );
            c.eviction_soft_grace_period
                .insert("memory.available".into(), "1m30s".into());
            c.eviction_minimum_reclaim
                .insert("memory.available".into(), "500Mi".into());
        });
        let t = parse(&c).expect("parse");
        let soft = t.iter().find(|t| !t.is_hard()).expect("soft");
        assert_eq!(soft.grace, Duration::from_secs(90));
        assert_eq!(soft.min_reclaim, Some(Value::Quantity(500.0 * 1048576.0)));
        // Met below the value; with reclaim, until value + reclaim is free again.
        let gib = 1073741824.0;
        assert!(soft.met(gib - 1.0, 0.0, false));
        assert!(!soft.met(gib + 1.0, 0.0, false));
        assert!(soft.met(gib + 1.0, 0.0, true));
        // The allocatable copy is of hard thresholds only.
        assert_eq!(
            t.iter()
                .filter(|t| t.signal == Signal::AllocatableMemoryAvailable)
                .count(),
            1
        );
    }

    #[test]
    fn bad_statements_name_the_field() {
        for (k, v, want) in [
            ("memory.avail", "1Gi", "unsupported eviction signal"),
            ("memory.available", "-1Gi", "must be positive"),
            ("memory.available", "lots", "is not a quantity"),
            ("nodefs.available", "120%", "0%..100%"),
        ] {
            let c =
                cfg(|c| c.eviction_hard = Some(BTreeMap::from([(k.to_string(), v.to_string())])));
            let e = parse(&c).expect_err(k);
            assert!(e.to_string().contains(want), "{k}={v}: {e}");
            assert!(e.to_string().contains("[node] eviction_hard"), "{e}");
        }
        let ignored = cfg(|c| {
            c.eviction_hard = Some(BTreeMap::from([("nodefs.available".into(), "0%".into())]))
        });
        assert_eq!(
            parse(&ignored)
                .expect("0% is ignored")
                .iter()
                .filter(|t| t.signal == Signal::NodeFsAvailable)
                .count(),
            0
        );
    }

    #[test]
    fn go_durations() {
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("1.5h"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        for bad in ["", "10", "1x", "s", "-1s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
