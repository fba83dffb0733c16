//! Keeps the crate's rooms layered: a room imports only rooms below it, and `runtime/state/` nothing of `runtime/` above it.
//!
//! The test reads the sources (comments and test-only files left out) and fails on an
//! import that goes up, naming the file, so a cycle between rooms cannot come back unseen.
//! The order is DESIGN's "main → daemon → api → pod → cri → stream → runtime → oci → …", as
//! the code has it: `sandbox` (pod files) builds on `config`, and `cgroups` (paths and the
//! driver) on nothing, so `config` may name the cgroup driver.

use std::path::{Path, PathBuf};

/// Rooms from the top down; a room may import the rooms after it.
const ORDER: &[&str] = &[
    "main",
    "cli",
    "daemon",
    "metrics",
    "api",
    "pod",
    "cri",
    "stream",
    "runtime",
    "oci",
    "image",
    "network",
    "sandbox",
    "config",
    "cgroups",
    "monitor",
    "store",
    "sys",
    "failpoint",
    "version",
    "proto",
    "error",
    "testutil",
];

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Files that only tests compile (their imports may reach anywhere).
fn test_only(rel: &str) -> bool {
    let name = rel.rsplit('/').next().unwrap_or(rel);
    rel.contains("/tests/")
        || name == "tests.rs"
        || name.ends_with("_tests.rs")
        || name.ends_with("_fuzz.rs")
        || name == "testutil.rs"
        || name == "fake.rs"
}

/// The code of a file without comments and without its trailing `#[cfg(test)] mod tests`.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level names a file's code reaches through `crate::` (paths and `crate::{a, b}`).
fn crate_refs(code: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, _) in code.match_indices("crate::") {
        let rest = &code[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let group = group.split('}').next().unwrap_or("");
            let mut depth = 0;
            let mut item = String::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(ident(&item));
                        item.clear();
                    }
                    _ => item.push(c),
                }
            }
            out.push(ident(&item));
        } else {
            let name = ident(rest);
            // `crate::failpoint!` and the like: macros are exported at the crate's root.
            if !rest[name.len()..].starts_with('!') {
                out.push(name);
            }
        }
    }
    out.retain(|r| !r.is_empty());
    out
}

/// The identifier a path starts with.
fn ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// Upward imports found in `src`, as `file: room -> target`.
fn violations(src: &Path) -> Vec<String> {
    let rank = |room: &str| ORDER.iter().position(|r| *r == room);
    let mut files = Vec::new();
    sources(src, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for f in files {
        let rel = f
            .strip_prefix(src)
            .unwrap_or(&f)
            .to_string_lossy()
            .to_string();
        if test_only(&rel) {
            continue;
        }
        let room = rel.split('/').next().unwrap_or("").trim_end_matches(".rs");
        let Some(own) = rank(room) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(&f) else {
            bad.push(format!("{rel}: unreadable"));
            continue;
        };
        let code = code(&text);
        for target in crate_refs(&code) {
            if target == room || target == "self" {
                continue;
            }
            match rank(&target) {
                Some(t) if t > own => {}
                Some(_) => bad.push(format!("{rel}: {room} -> {target}")),
                None if target.chars().next().is_some_and(|c| c.is_uppercase()) => {}
                None => bad.push(format!("{rel}: {room} -> {target} (a room not in ORDER)")),
            }
        }
        if rel.starts_with("runtime/state/") {
            for line in code.lines() {
                let up =
                    line.contains("crate::runtime::") && !line.contains("crate::runtime::state");
                if up || line.contains("super::super") {
                    bad.push(format!("{rel}: runtime/state -> runtime: {}", line.trim()));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

#[test]
fn rooms_import_only_rooms_below_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let bad = violations(&src);
    assert!(bad.is_empty(), "imports that go up:\n{}", bad.join("\n"));
}

#[test]
fn every_room_has_a_place_in_the_order() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for e in std::fs::read_dir(&src).into_iter().flatten().flatten() {
        let name = e
            .file_name()
            .to_string_lossy()
            .trim_end_matches(".rs")
            .to_string();
        if !ORDER.contains(&name.as_str()) && name != "lib" && !name.ends_with("_tests") {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "rooms without a layer: {missing:?}");
}

#[test]
fn an_upward_import_is_found() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = dir.path().join("store");
    std::fs::create_dir_all(&store).expect("mkdir");
    std::fs::write(
        store.join("x.rs"),
        "//! x\n// crate::runtime in a comment is fine\nuse crate::{error::Result, runtime::Runtime};\n",
    )
    .expect("write");
    let state = dir.path().join("runtime/state");
    std::fs::create_dir_all(&state).expect("mkdir");
    std::fs::write(state.join("y.rs"), "use crate::runtime::Runtime;\n").expect("write");
    let bad = violations(dir.path());
    assert_eq!(
        bad,
        vec![
            "runtime/state/y.rs: runtime/state -> runtime: use crate::runtime::Runtime;"
                .to_string(),
            "store/x.rs: store -> runtime".to_string(),
        ]
    );
}
