//! Unit tests for the seccomp profile: structure, resolution and Localhost loading.

use super::*;
use crate::error::ErrorKind;
use crate::oci::spec::caps::DEFAULT_CAPABILITIES;

fn default_caps() -> BTreeSet<&'static str> {
    DEFAULT_CAPABILITIES.iter().copied().collect()
}

fn resolve_default(arch: &str, caps: &BTreeSet<&'static str>) -> LinuxSeccomp {
    let t = Target {
        arch,
        kernel: (6, 1),
        caps,
    };
    default_profile()
        .expect("parse")
        .resolve("runtime/default", &t)
        .expect("resolve")
}

/// Names allowed without argument conditions.
fn plain_allowed(s: &LinuxSeccomp) -> BTreeSet<String> {
    s.syscalls()
        .iter()
        .flatten()
        .filter(|r| r.action() == LinuxSeccompAction::ScmpActAllow && r.args().is_none())
        .flat_map(|r| r.names().clone())
        .collect()
}

fn rules_for<'a>(s: &'a LinuxSeccomp, name: &str) -> Vec<&'a LinuxSyscall> {
    s.syscalls()
        .iter()
        .flatten()
        .filter(|r| r.names().iter().any(|n| n == name))
        .collect()
}

#[test]
fn default_profile_denies_with_eperm_and_covers_the_compat_arches() {
    let s = resolve_default("amd64", &default_caps());
    assert_eq!(s.default_action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(s.default_errno_ret(), Some(1));
    assert_eq!(
        s.architectures().clone().unwrap_or_default(),
        [Arch::ScmpArchX86_64, Arch::ScmpArchX86, Arch::ScmpArchX32]
    );
    let a = resolve_default("arm64", &default_caps());
    assert_eq!(
        a.architectures().clone().unwrap_or_default(),
        [Arch::ScmpArchAarch64, Arch::ScmpArchArm]
    );
    let other = resolve_default("mips64", &default_caps());
    assert!(other.architectures().is_none());
}

#[test]
fn everyday_syscalls_pass_and_dangerous_ones_do_not() {
    let s = resolve_default("amd64", &default_caps());
    let allowed = plain_allowed(&s);
    for ok in [
        "read",
        "write",
        "openat",
        "execve",
        "mmap",
        "futex",
        "epoll_wait",
        "clock_gettime",
        "getrandom",
        "rseq",
        "arch_prctl",
        "chroot",
        "ptrace",
        "statx",
        "io_submit",
    ] {
        assert!(allowed.contains(ok), "{ok} should be allowed");
    }
    for denied in [
        "mount",
        "umount2",
        "unshare",
        "setns",
        "bpf",
        "keyctl",
        "add_key",
        "kexec_load",
        "init_module",
        "reboot",
        "swapon",
        "pivot_root",
        "userfaultfd",
        "io_uring_setup",
        "open_by_handle_at",
        "settimeofday",
        "perf_event_open",
        "syslog",
        "acct",
        "iopl",
        "clone",
        "clone3",
        "socket",
        "personality",
        "cacheflush",
    ] {
        assert!(
            !allowed.contains(denied),
            "{denied} must not be allowed unconditionally"
        );
    }
    assert!(allowed.len() > 300, "{}", allowed.len());
}

#[test]
fn argument_filters_for_clone_socket_and_personality() {
    let s = resolve_default("amd64", &default_caps());
    let clone = rules_for(&s, "clone");
    assert_eq!(clone.len(), 1);
    let arg = &clone[0].args().clone().expect("args")[0];
    assert_eq!(
        (arg.index(), arg.value(), arg.value_two()),
        (0, 0x7e02_0000, Some(0))
    );
    assert_eq!(
        arg.op(),
        oci_spec::runtime::LinuxSeccompOperator::ScmpCmpMaskedEq
    );

    let clone3 = rules_for(&s, "clone3");
    assert_eq!(clone3.len(), 1);
    assert_eq!(clone3[0].action(), LinuxSeccompAction::ScmpActErrno);
    assert_eq!(clone3[0].errno_ret(), Some(38));

    let socket = rules_for(&s, "socket");
    assert_eq!(socket.len(), 3);
    assert!(socket
        .iter()
        .all(|r| r.args().as_ref().is_some_and(|a| a.len() == 1)));
    let personality: Vec<u64> = rules_for(&s, "personality")
        .iter()
        .map(|r| r.args().clone().expect("args")[0].value())
        .collect();
    assert_eq!(personality, [0, 8, 0x20000, 0x20008, 0xffff_ffff]);
}

#[test]
fn capabilities_unlock_their_groups() {
    let mut caps = default_caps();
    caps.insert("CAP_SYS_ADMIN");
    caps.insert("CAP_SYS_PTRACE");
    caps.insert("CAP_SYS_TIME");
    let s = resolve_default("amd64", &caps);
    let allowed = plain_allowed(&s);
    for name in [
        "mount",
        "unshare",
        "setns",
        "clone",
        "clone3",
        "kcmp",
        "settimeofday",
    ] {
        assert!(allowed.contains(name), "{name}");
    }
    assert!(rules_for(&s, "clone3")
        .iter()
        .all(|r| r.action() == LinuxSeccompAction::ScmpActAllow));
    assert!(rules_for(&s, "clone").iter().all(|r| r.args().is_none()));

    let mut no_chroot = default_caps();
    no_chroot.remove("CAP_SYS_CHROOT");
    assert!(!plain_allowed(&resolve_default("amd64", &no_chroot)).contains("chroot"));
}

#[test]
fn arch_and_kernel_conditions() {
    let a = plain_allowed(&resolve_default("arm64", &default_caps()));
    assert!(a.contains("cacheflush") && !a.contains("arch_prctl"));
    let old = Target {
        arch: "amd64",
        kernel: (4, 4),
        caps: &default_caps(),
    };
    let s = default_profile()
        .expect("parse")
        .resolve("d", &old)
        .expect("resolve");
    assert!(!plain_allowed(&s).contains("ptrace"));
    assert_eq!(parse_kernel("6.18.44-fc-v657"), (6, 18));
    assert_eq!(parse_kernel("4.8"), (4, 8));
    assert_eq!(parse_kernel("garbage"), (0, 0));
}

#[test]
fn resolved_profile_serialises_in_oci_spelling() {
    let s = resolve_default("amd64", &default_caps());
    let json = serde_json::to_string(&s).expect("json");
    for needle in [
        "\"defaultAction\":\"SCMP_ACT_ERRNO\"",
        "\"defaultErrnoRet\":1",
        "SCMP_ARCH_X86_64",
        "SCMP_CMP_MASKED_EQ",
        "\"valueTwo\":0",
    ] {
        assert!(json.contains(needle), "{needle} missing");
    }
}

/// Names from `#define __NR_<name>` lines (skipping the table-size and placeholder macros).
fn header_names(path: &str) -> Option<BTreeSet<String>> {
    let text = std::fs::read_to_string(path).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.strip_prefix("#define __NR_"))
            .filter_map(|l| l.split_whitespace().next())
            .filter(|n| !["syscalls", "arch_specific_syscall"].contains(n))
            // asm-generic's 32-bit name for what libseccomp (and i386) call `_llseek`.
            .map(|n| if n == "llseek" { "_llseek" } else { n })
            .map(String::from)
            .collect(),
    )
}

#[test]
fn every_syscall_in_the_kernel_tables_is_classified() {
    let raw: serde_json::Value = serde_json::from_str(DEFAULT_PROFILE_JSON).expect("json");
    let mut classified = BTreeSet::new();
    for section in ["syscalls", "denied"] {
        for rule in raw[section].as_array().expect(section) {
            for n in rule["names"].as_array().expect("names") {
                classified.insert(n.as_str().expect("name").to_string());
            }
        }
    }
    let headers = [
        "/usr/include/x86_64-linux-gnu/asm/unistd_64.h",
        "/usr/include/x86_64-linux-gnu/asm/unistd_32.h",
        "/usr/include/aarch64-linux-gnu/asm/unistd.h",
        "/usr/include/asm/unistd_64.h",
        "/usr/include/asm/unistd_32.h",
        "/usr/include/asm-generic/unistd.h",
    ];
    let mut checked = 0;
    for h in headers {
        let Some(names) = header_names(h) else {
            continue;
        };
        checked += 1;
        let missing: Vec<&String> = names.difference(&classified).collect();
        assert!(missing.is_empty(), "{h}: unclassified syscalls {missing:?}");
    }
    // libc6-dev (needed to link at all) pulls the kernel headers in: their absence is a broken
    // build machine, not a reason to pass silently.
    assert!(
        checked > 0,
        "no kernel syscall headers found (install linux-libc-dev)"
    );
}

#[test]
fn localhost_profiles_load_or_fail_naming_the_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let oci = dir.path().join("oci.json");
    std::fs::write(
        &oci,
        r#"{"defaultAction":"SCMP_ACT_LOG","architectures":["SCMP_ARCH_X86_64"],
            "syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13}]}"#,
    )
    .expect("write");
    let p = load_localhost(&format!("localhost/{}", oci.display())).expect("oci profile");
    let t = Target {
        arch: "amd64",
        kernel: (6, 1),
        caps: &default_caps(),
    };
    let s = p.resolve("oci", &t).expect("resolve");
    assert_eq!(s.default_action(), LinuxSeccompAction::ScmpActLog);
    assert_eq!(rules_for(&s, "mkdir")[0].errno_ret(), Some(13));

    let missing = dir.path().join("nope.json").display().to_string();
    let err = load_localhost(&missing).expect_err("missing");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument);
    assert!(err.message().contains(&missing), "{err}");
    let err = load_localhost("profiles/x.json").expect_err("relative");
    assert!(err.message().contains("absolute"), "{err}");

    for (name, body) in [
        ("garbage.json", "{not json"),
        ("action.json", r#"{"defaultAction":"SCMP_ACT_DANCE"}"#),
        (
            "both.json",
            r#"{"defaultAction":"SCMP_ACT_ALLOW",
                "syscalls":[{"name":"a","names":["b"],"action":"SCMP_ACT_ERRNO"}]}"#,
        ),
        (
            "empty.json",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"action":"SCMP_ACT_ERRNO"}]}"#,
        ),
        (
            "arch.json",
            r#"{"defaultAction":"SCMP_ACT_ALLOW","architectures":["SCMP_ARCH_X86"],"archMap":[]}"#,
        ),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, body).expect("write");
        let err = load_localhost(&path.display().to_string())
            .and_then(|p| p.resolve(name, &t))
            .expect_err(name);
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{name}: {err}");
        assert!(err.message().contains(name), "{name}: {err}");
    }
}
