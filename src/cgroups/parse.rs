//! Parsing of cgroup interface files: single values, `max`, and flat `key value` tables.

use std::collections::HashMap;
use std::path::Path;

/// The file's text, or `None` when it cannot be read.
pub fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

/// A file holding one unsigned number.
pub fn read_u64(path: &Path) -> Option<u64> {
    read(path)?.trim().parse().ok()
}

/// A file holding a number or `max`: `Some(None)` for `max`.
pub fn read_max(path: &Path) -> Option<Option<u64>> {
    let text = read(path)?;
    match text.trim() {
        "max" => Some(None),
        v => v.parse().ok().map(Some),
    }
}

/// A flat keyed file (`memory.stat`, `cpu.stat`, `cpuacct.stat`): `key value` lines; lines
/// that do not parse are skipped.
pub fn read_flat(path: &Path) -> Option<HashMap<String, u64>> {
    Some(flat(&read(path)?))
}

/// Parses `key value` lines.
pub fn flat(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|l| {
            let mut parts = l.split_whitespace();
            let key = parts.next()?;
            let value = parts.next()?.parse().ok()?;
            Some((key.to_string(), value))
        })
        .collect()
}

/// A pressure file (`some avg10=… avg60=… avg300=… total=…` and an optional `full` line).
pub fn read_psi(path: &Path) -> Option<super::Psi> {
    psi(&read(path)?)
}

/// Parses a pressure file's text; `None` without a `some` line.
pub fn psi(text: &str) -> Option<super::Psi> {
    let line = |kind: &str| {
        let rest = text.lines().find_map(|l| l.strip_prefix(kind))?;
        let mut d = super::PsiData::default();
        for field in rest.split_whitespace() {
            let (k, v) = field.split_once('=')?;
            match k {
                "avg10" => d.avg10 = v.parse().ok()?,
                "avg60" => d.avg60 = v.parse().ok()?,
                "avg300" => d.avg300 = v.parse().ok()?,
                "total" => d.total_us = v.parse().ok()?,
                _ => {}
            }
        }
        Some(d)
    };
    Some(super::Psi {
        some: line("some ")?,
        full: line("full "),
    })
}

/// The number of non-empty lines (`tasks`, `cgroup.threads`).
pub fn count_lines(path: &Path) -> Option<u64> {
    Some(read(path)?.lines().filter(|l| !l.trim().is_empty()).count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_files_skip_junk_lines() {
        let m = flat("cache 10\nrss 20\n\nbogus\nbad x\ntotal_rss 30 extra\n");
        assert_eq!(m.get("cache"), Some(&10));
        assert_eq!(m.get("rss"), Some(&20));
        assert_eq!(m.get("total_rss"), Some(&30));
        assert_eq!(m.len(), 3);
    }

    #[test]
    fn pressure_lines() {
        let p = psi("some avg10=1.50 avg60=0.25 avg300=0.00 total=12345\nfull avg10=0.10 avg60=0.00 avg300=0.00 total=99\n")
            .expect("psi");
        assert_eq!(
            (p.some.avg10, p.some.avg60, p.some.total_us),
            (1.5, 0.25, 12345)
        );
        assert_eq!(p.full.map(|f| f.total_us), Some(99));
        let cpu_old_kernel = psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=7\n").expect("psi");
        assert!(cpu_old_kernel.full.is_none());
        assert!(psi("garbage").is_none());
        assert!(psi("some avg10=x total=1").is_none());
    }

    #[test]
    fn max_and_numbers() {
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("f");
        std::fs::write(&p, "max\n").expect("write");
        assert_eq!(read_max(&p), Some(None));
        std::fs::write(&p, "42\n").expect("write");
        assert_eq!(read_max(&p), Some(Some(42)));
        assert_eq!(read_u64(&p), Some(42));
        std::fs::write(&p, "junk").expect("write");
        assert_eq!(read_u64(&p), None);
        assert_eq!(read_u64(&dir.path().join("missing")), None);
    }
}
