//! ContainerConfig.stop_signal: the proto `Signal` enum ⇄ Linux signal numbers.

use super::bad_enum;
use crate::error::Result;
use crate::proto::runtime::v1 as pb;

/// Non-realtime signals; where Linux has aliases (ABRT/IOT, CHLD/CLD, IO/POLL) the first entry
/// for a number is the one reported back.
const TABLE: [(pb::Signal, i32); 34] = [
    (pb::Signal::Sigabrt, libc::SIGABRT),
    (pb::Signal::Sigalrm, libc::SIGALRM),
    (pb::Signal::Sigbus, libc::SIGBUS),
    (pb::Signal::Sigchld, libc::SIGCHLD),
    (pb::Signal::Sigcld, libc::SIGCHLD),
    (pb::Signal::Sigcont, libc::SIGCONT),
    (pb::Signal::Sigfpe, libc::SIGFPE),
    (pb::Signal::Sighup, libc::SIGHUP),
    (pb::Signal::Sigill, libc::SIGILL),
    (pb::Signal::Sigint, libc::SIGINT),
    (pb::Signal::Sigio, libc::SIGIO),
    (pb::Signal::Sigiot, libc::SIGIOT),
    (pb::Signal::Sigkill, libc::SIGKILL),
    (pb::Signal::Sigpipe, libc::SIGPIPE),
    (pb::Signal::Sigpoll, libc::SIGPOLL),
    (pb::Signal::Sigprof, libc::SIGPROF),
    (pb::Signal::Sigpwr, libc::SIGPWR),
    (pb::Signal::Sigquit, libc::SIGQUIT),
    (pb::Signal::Sigsegv, libc::SIGSEGV),
    (pb::Signal::Sigstkflt, libc::SIGSTKFLT),
    (pb::Signal::Sigstop, libc::SIGSTOP),
    (pb::Signal::Sigsys, libc::SIGSYS),
    (pb::Signal::Sigterm, libc::SIGTERM),
    (pb::Signal::Sigtrap, libc::SIGTRAP),
    (pb::Signal::Sigtstp, libc::SIGTSTP),
    (pb::Signal::Sigttin, libc::SIGTTIN),
    (pb::Signal::Sigttou, libc::SIGTTOU),
    (pb::Signal::Sigurg, libc::SIGURG),
    (pb::Signal::Sigusr1, libc::SIGUSR1),
    (pb::Signal::Sigusr2, libc::SIGUSR2),
    (pb::Signal::Sigvtalrm, libc::SIGVTALRM),
    (pb::Signal::Sigwinch, libc::SIGWINCH),
    (pb::Signal::Sigxcpu, libc::SIGXCPU),
    (pb::Signal::Sigxfsz, libc::SIGXFSZ),
];

/// SIGRTMIN as the kernel numbers it for processes (`kill -l`: 34), which images and the
/// runtime's STOPSIGNAL parser use too.
pub const SIGRTMIN: i32 = 34;
/// SIGRTMAX.
pub const SIGRTMAX: i32 = 64;

/// The proto value of SIGRTMIN; SIGRTMIN..=SIGRTMAX are contiguous in the enum
/// (SIGRTMINPLUS1..15 then SIGRTMAXMINUS14..1), one above the signal number.
const PROTO_RTMIN: i32 = pb::Signal::Sigrtmin as i32;

/// A proto `Signal` value → `None` for RUNTIME_DEFAULT, else the signal number.
pub fn stop_signal(value: i32) -> Result<Option<i32>> {
    let bad = || bad_enum("container config: stop_signal", value);
    let signal = pb::Signal::try_from(value).map_err(|_| bad())?;
    if signal == pb::Signal::RuntimeDefault {
        return Ok(None);
    }
    if value >= PROTO_RTMIN {
        return Ok(Some(value - PROTO_RTMIN + SIGRTMIN));
    }
    TABLE
        .iter()
        .find(|(s, _)| *s == signal)
        .map(|(_, n)| Some(*n))
        .ok_or_else(bad)
}

/// A signal number (`None`: none asked) → the proto enum; numbers without a name report
/// RUNTIME_DEFAULT.
pub fn stop_signal_to_proto(signal: Option<i32>) -> pb::Signal {
    let Some(n) = signal else {
        return pb::Signal::RuntimeDefault;
    };
    if (SIGRTMIN..=SIGRTMAX).contains(&n) {
        return pb::Signal::try_from(n - SIGRTMIN + PROTO_RTMIN)
            .unwrap_or(pb::Signal::RuntimeDefault);
    }
    TABLE
        .iter()
        .find(|(_, m)| *m == n)
        .map_or(pb::Signal::RuntimeDefault, |(s, _)| *s)
}
