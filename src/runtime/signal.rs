//! Signal names as images and CRI spell them (`SIGUSR1`, `USR1`, `10`, `SIGRTMIN+3`) to numbers.

use crate::error::{Error, Result};

const NAMES: &[(&str, i32)] = &[
    ("HUP", libc::SIGHUP),
    ("INT", libc::SIGINT),
    ("QUIT", libc::SIGQUIT),
    ("ILL", libc::SIGILL),
    ("TRAP", libc::SIGTRAP),
    ("ABRT", libc::SIGABRT),
    ("IOT", libc::SIGIOT),
    ("BUS", libc::SIGBUS),
    ("FPE", libc::SIGFPE),
    ("KILL", libc::SIGKILL),
    ("USR1", libc::SIGUSR1),
    ("SEGV", libc::SIGSEGV),
    ("USR2", libc::SIGUSR2),
    ("PIPE", libc::SIGPIPE),
    ("ALRM", libc::SIGALRM),
    ("TERM", libc::SIGTERM),
    ("STKFLT", libc::SIGSTKFLT),
    ("CHLD", libc::SIGCHLD),
    ("CONT", libc::SIGCONT),
    ("STOP", libc::SIGSTOP),
    ("TSTP", libc::SIGTSTP),
    ("TTIN", libc::SIGTTIN),
    ("TTOU", libc::SIGTTOU),
    ("URG", libc::SIGURG),
    ("XCPU", libc::SIGXCPU),
    ("XFSZ", libc::SIGXFSZ),
    ("VTALRM", libc::SIGVTALRM),
    ("PROF", libc::SIGPROF),
    ("WINCH", libc::SIGWINCH),
    ("IO", libc::SIGIO),
    ("POLL", libc::SIGPOLL),
    ("PWR", libc::SIGPWR),
    ("SYS", libc::SIGSYS),
];

/// The kernel's SIGRTMIN (glibc reserves 32 and 33 for itself; images name the kernel's).
const RTMIN: i32 = 34;
/// The kernel's SIGRTMAX.
const RTMAX: i32 = 64;

/// Parses a signal name or number the way docker/containerd do for STOPSIGNAL.
pub fn parse(s: &str) -> Result<i32> {
    let bad = || Error::invalid(format!("signal {s:?} is not a valid signal"));
    let t = s.trim();
    if let Ok(n) = t.parse::<i32>() {
        return if (1..=RTMAX).contains(&n) {
            Ok(n)
        } else {
            Err(bad())
        };
    }
    let upper = t.to_ascii_uppercase();
    let name = upper.strip_prefix("SIG").unwrap_or(&upper);
    if let Some(n) = NAMES.iter().find(|(k, _)| *k == name).map(|(_, n)| *n) {
        return Ok(n);
    }
    let rt = |base: i32, off: &str, sign: i32| -> Result<i32> {
        let off: i32 = if off.is_empty() {
            0
        } else {
            off.parse().map_err(|_| bad())?
        };
        let n = base + sign * off;
        if (RTMIN..=RTMAX).contains(&n) {
            Ok(n)
        } else {
            Err(bad())
        }
    };
    if let Some(rest) = name.strip_prefix("RTMIN") {
        return rt(RTMIN, rest.strip_prefix('+').unwrap_or(rest), 1);
    }
    if let Some(rest) = name.strip_prefix("RTMAX") {
        return rt(RTMAX, rest.strip_prefix('-').unwrap_or(rest), -1);
    }
    Err(bad())
}

#[cfg(test)]
mod tests {
    use super::parse;

    #[test]
    fn names_numbers_and_realtime() {
        for (s, n) in [
            ("SIGTERM", 15),
            ("term", 15),
            ("USR1", 10),
            ("SIGUSR1", 10),
            ("9", 9),
            ("SIGRTMIN", 34),
            ("SIGRTMIN+3", 37),
            ("RTMAX-1", 63),
            ("SIGWINCH", 28),
        ] {
            assert_eq!(parse(s).ok(), Some(n), "{s}");
        }
        for s in ["", "0", "65", "SIGFOO", "RTMIN+40", "RTMAX-x"] {
            let e = parse(s).expect_err(s);
            assert!(e.message().contains("not a valid signal"), "{e}");
        }
    }
}
