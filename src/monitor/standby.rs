//! A monitor started ahead of its container (`bosun monitor --standby`): it waits for its arguments on a pipe.
//!
//! The daemon keeps one such spare so that StartContainer does not wait for the monitor's
//! exec and start-up (~2 ms, issue 13). The spare is spawned as
//! `bosun monitor --standby <ROOM spaces>` with the argument pipe's read end as fd
//! [`ARGS_FD`] and the sync pipe as fd 3. It forks away and makes its own session at once
//! (the process the daemon spawned exits 0), so a start does not wait for that fork either.
//! Then it reads NUL-terminated arguments (those after `monitor`, as on a command line) until
//! EOF and goes on as a monitor started with them. EOF with no argument (the daemon dropped
//! the spare or died: nobody else holds the pipe's write end) is a quiet exit 0.
//!
//! Recovery and the exit watcher know a monitor by its command line (`monitor --id ID`),
//! so the spare rewrites its own: the arguments go over the reserved room (what
//! `/proc/PID/cmdline` shows, as setproctitle does), NUL-padded. Where that cannot be done
//! the spare execs itself with the real command line: slower, never wrong.
#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::{FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;

use super::error::{Error, Result};

/// The first argument after `monitor` that makes a spare.
pub const FLAG: &str = "--standby";
/// The descriptor the spare reads its arguments from.
pub const ARGS_FD: RawFd = 4;
/// Bytes of the spare's command line reserved for the real arguments.
pub const ROOM: usize = 2048;
/// The most argument bytes a spare reads (more is an error).
const ARGS_MAX: usize = 64 << 10;

/// The spare's arguments after `monitor`.
pub fn placeholder() -> Vec<OsString> {
    vec![FLAG.into(), " ".repeat(ROOM).into()]
}

/// Whether `args` (those after `monitor`) fit in a spare's command line.
pub fn fits(args: &[OsString]) -> bool {
    encoded_len(args) <= FLAG.len() + 1 + ROOM + 1
}

/// `args` as the spare reads them: each followed by a NUL.
pub fn encode(args: &[OsString]) -> Vec<u8> {
    let mut out = Vec::with_capacity(encoded_len(args));
    for a in args {
        out.extend_from_slice(a.as_bytes());
        out.push(0);
    }
    out
}

fn encoded_len(args: &[OsString]) -> usize {
    args.iter().map(|a| a.len() + 1).sum()
}

/// In the spare: waits for the arguments, makes them its command line and returns them;
/// `None` when the daemon closed the pipe without sending any.
pub fn wait_for_args() -> Result<Option<Vec<OsString>>> {
    // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
    if unsafe { libc::fcntl(ARGS_FD, libc::F_GETFD) } < 0 {
        return Err(Error::msg(format!(
            "--standby: fd {ARGS_FD} is not an open descriptor"
        )));
    }
    // SAFETY: the descriptor is open (checked) and nothing else in this process owns it: the
    // daemon passes it to the spare for this read alone.
    let mut pipe = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(ARGS_FD) });
    let mut bytes = Vec::new();
    (&mut pipe)
        .take(ARGS_MAX as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Error::msg(format!("--standby: read arguments: {e}")))?;
    drop(pipe);
    if bytes.is_empty() {
        return Ok(None);
    }
    let args = decode(&bytes)?;
    if let Err(e) = retitle(&args) {
        // Not identifiable by its command line as it is: become a monitor the slow way.
        let fail = |what: String| {
            Error::msg(format!(
                "--standby: command line not rewritten ({e}), and {what}"
            ))
        };
        let exe = std::env::current_exe()
            .map_err(|e2| fail(format!("no current executable to re-exec: {e2}")))?;
        let err = std::process::Command::new(&exe)
            .arg("monitor")
            .args(&args)
            .exec();
        return Err(fail(format!("re-exec of {} failed: {err}", exe.display())));
    }
    Ok(Some(args))
}

/// The arguments in `bytes` (each NUL-terminated; at most [`ARGS_MAX`] bytes).
fn decode(bytes: &[u8]) -> Result<Vec<OsString>> {
    if bytes.len() > ARGS_MAX {
        return Err(Error::msg(format!(
            "--standby: arguments longer than {ARGS_MAX} bytes"
        )));
    }
    let Some(body) = bytes.strip_suffix(&[0]) else {
        return Err(Error::msg("--standby: arguments not NUL-terminated"));
    };
    Ok(body
        .split(|b| *b == 0)
        .map(|a| OsString::from_vec(a.to_vec()))
        .collect())
}

/// Rewrites this process's command line to `<argv0> monitor <args…>` in place.
fn retitle(args: &[OsString]) -> std::io::Result<()> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let (start, end) = arg_area(&stat).ok_or_else(|| std::io::Error::other("no arg_start"))?;
    let len = usize::try_from(end.saturating_sub(start)).unwrap_or(0);
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/proc/self/mem")?;
    let mut area = vec![0u8; len];
    mem.read_exact_at(&mut area, start)?;
    let image = cmdline_image(&area, args)
        .ok_or_else(|| std::io::Error::other("arguments longer than the reserved room"))?;
    mem.write_all_at(&image, start)?;
    let shown = std::fs::read("/proc/self/cmdline")?;
    if !shown.starts_with(&image[..image.len() - trailing_nuls(&image) + 1]) {
        return Err(std::io::Error::other(
            "the kernel shows another command line",
        ));
    }
    Ok(())
}

fn trailing_nuls(b: &[u8]) -> usize {
    b.iter().rev().take_while(|&&c| c == 0).count()
}

/// `arg_start` and `arg_end` (fields 48 and 49) of a `/proc/PID/stat` line.
fn arg_area(stat: &str) -> Option<(u64, u64)> {
    // The command name (field 2) may hold spaces and parentheses: count from its last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(48 - 3);
    let start = fields.next()?.parse().ok()?;
    let end = fields.next()?.parse().ok()?;
    (start < end).then_some((start, end))
}

/// The new content of the argument area `area` (`argv0\0monitor\0…\0`): its first two
/// strings kept, then `args`, NUL-padded to the same length; `None` if they do not fit.
fn cmdline_image(area: &[u8], args: &[OsString]) -> Option<Vec<u8>> {
    let first = area.iter().position(|b| *b == 0)?;
    let second = first + 1 + area[first + 1..].iter().position(|b| *b == 0)?;
    let mut image = area[..=second].to_vec();
    image.extend_from_slice(&encode(args));
    // The last byte stays NUL: the kernel then shows exactly this area.
    if image.len() > area.len() {
        return None;
    }
    image.resize(area.len(), 0);
    Some(image)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn arguments_round_trip_through_the_pipe_encoding() {
        let args = os(&["--id", "c1", "--log-path", "/l/a b.log", "--tty"]);
        assert_eq!(decode(&encode(&args)).expect("decode"), args);
        assert!(decode(b"--id\0c1").is_err(), "unterminated");
        assert!(decode(&vec![b'x'; ARGS_MAX + 1]).is_err(), "too long");
    }

    #[test]
    fn the_image_keeps_program_and_verb_and_pads_the_room() {
        let mut area = b"/usr/bin/bosun\0monitor\0--standby\0".to_vec();
        area.extend_from_slice(&[b' '; 40]);
        area.push(0);
        let args = os(&["--id", "c1", "--tty"]);
        let image = cmdline_image(&area, &args).expect("fits");
        assert_eq!(image.len(), area.len());
        let want = b"/usr/bin/bosun\0monitor\0--id\0c1\0--tty\0";
        assert_eq!(&image[..want.len()], want);
        assert!(image[want.len()..].iter().all(|b| *b == 0));
        // What recovery looks for is there.
        assert!(image.windows(12).any(|w| w == b"\0monitor\0--i"));
        let long = os(&["--id", &"x".repeat(100)]);
        assert_eq!(cmdline_image(&area, &long), None);
    }

    #[test]
    fn fits_matches_the_room_the_placeholder_reserves() {
        let room = encoded_len(&placeholder());
        let exact = os(&["--id", &"y".repeat(room - 5 - 1)]);
        assert_eq!(encoded_len(&exact), room);
        assert!(fits(&exact));
        let over = os(&["--id", &"y".repeat(room - 5)]);
        assert!(!fits(&over));
    }

    #[test]
    fn arg_area_is_read_after_the_command_name() {
        let mut stat = String::from("42 (a) b) c) S");
        for n in 4..=47 {
            stat.push_str(&format!(" {n}"));
        }
        stat.push_str(" 1000 1100 1200 1300 0");
        assert_eq!(arg_area(&stat), Some((1000, 1100)));
        let own = std::fs::read_to_string("/proc/self/stat").expect("stat");
        let (start, end) = arg_area(&own).expect("own arg area");
        assert!(end > start);
    }
}
