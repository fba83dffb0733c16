//! CRI log files (parsed, split into lines, waited for) and the daemon's log added to a
//! failed step's error.

use std::collections::HashMap;
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};

use crate::support::Daemon;

/// What opens the daemon's log in an error.
const LOG_MARK: &str = "--- daemon log";

/// `r`, with the last lines of the daemon's log added to an error (what the daemon said about
/// the failed step), unless it carries them already (an inner step added them).
pub fn with_log<T>(d: &Daemon, r: Result<T>) -> Result<T> {
    r.map_err(|e| {
        if format!("{e:#}").contains(LOG_MARK) {
            return e;
        }
        let log = d.log();
        // The runtime's own lines, not the HTTP/2 transport's debug chatter.
        let lines: Vec<&str> = log
            .lines()
            .filter(|l| {
                !["h2::", "hyper", "tower::", "tonic::transport"]
                    .iter()
                    .any(|n| l.contains(n))
            })
            .collect();
        let tail = lines[lines.len().saturating_sub(40)..].join("\n");
        anyhow::anyhow!("{e:#}\n{LOG_MARK} (last 40 runtime lines):\n{tail}")
    })
}

/// One record of a CRI log file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    /// RFC3339Nano UTC timestamp.
    pub time: String,
    /// `stdout` or `stderr`.
    pub stream: String,
    /// `P` (partial) or `F` (full / last piece).
    pub tag: String,
    /// The content.
    pub msg: String,
}

/// Parses a CRI log file: every line `<RFC3339Nano> <stdout|stderr> <P|F> <msg>`; the
/// timestamps never go backwards.
pub fn read_log(path: &Path) -> Result<Vec<LogLine>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("read log {}", path.display()))?;
    parse_log(&text).with_context(|| format!("log {}", path.display()))
}

/// See [`read_log`].
pub fn parse_log(text: &str) -> Result<Vec<LogLine>> {
    let mut out: Vec<LogLine> = Vec::new();
    for line in text.split_terminator('\n') {
        let mut f = line.splitn(4, ' ');
        let (Some(time), Some(stream), Some(tag), Some(msg)) =
            (f.next(), f.next(), f.next(), f.next())
        else {
            bail!("bad record {line:?}");
        };
        ensure!(is_rfc3339_nano(time), "bad timestamp in {line:?}");
        ensure!(
            stream == "stdout" || stream == "stderr",
            "bad stream in {line:?}"
        );
        ensure!(tag == "P" || tag == "F", "bad tag in {line:?}");
        if let Some(prev) = out.last() {
            ensure!(
                canonical_time(&prev.time) <= canonical_time(time),
                "timestamps go backwards: {} then {time}",
                prev.time
            );
        }
        out.push(LogLine {
            time: time.into(),
            stream: stream.into(),
            tag: tag.into(),
            msg: msg.into(),
        });
    }
    Ok(out)
}

/// The whole lines of one stream (P pieces joined up to their F).
pub fn lines_of(log: &[LogLine], stream: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for l in log.iter().filter(|l| l.stream == stream) {
        cur.push_str(&l.msg);
        if l.tag == "F" {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Waits (at most `secs`) until the log at `path` parses and `pred` holds for its stdout
/// lines; returns the records.
pub async fn wait_log(
    path: &Path,
    secs: u64,
    pred: impl Fn(&[String]) -> bool,
) -> Result<Vec<LogLine>> {
    let deadline = Instant::now() + crate::support::scaled(Duration::from_secs(secs));
    loop {
        // The monitor may be writing a record right now: a reader (like the kubelet's) takes
        // only the lines that have ended, and sees the rest when they have.
        let log = match std::fs::read_to_string(path) {
            Ok(text) => {
                let whole = text.rfind('\n').map_or("", |end| &text[..=end]);
                parse_log(whole).with_context(|| format!("log {}", path.display()))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e).with_context(|| format!("read log {}", path.display())),
        };
        if pred(&lines_of(&log, "stdout")) {
            return Ok(log);
        }
        if Instant::now() > deadline {
            bail!(
                "log {} did not get the expected lines in {secs} s: {:?}",
                path.display(),
                lines_of(&log, "stdout")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `2006-01-02T15:04:05.999999999Z` (UTC, trailing zeros of the fraction dropped).
pub fn is_rfc3339_nano(ts: &str) -> bool {
    let Some(rest) = ts.strip_suffix('Z') else {
        return false;
    };
    if rest.len() < 19 || !rest.is_char_boundary(19) {
        return false;
    }
    let (secs, frac) = rest.split_at(19);
    let shape = secs.bytes().enumerate().all(|(i, c)| match i {
        4 | 7 => c == b'-',
        10 => c == b'T',
        13 | 16 => c == b':',
        _ => c.is_ascii_digit(),
    });
    let frac_ok = frac.is_empty()
        || frac.strip_prefix('.').is_some_and(|d| {
            (1..=9).contains(&d.len()) && d.bytes().all(|c| c.is_ascii_digit()) && !d.ends_with('0')
        });
    shape && frac_ok
}

/// A timestamp with its fraction padded to 9 digits, so strings compare in time order.
fn canonical_time(ts: &str) -> String {
    let rest = ts.trim_end_matches('Z');
    let (secs, frac) = rest.split_once('.').unwrap_or((rest, ""));
    format!("{secs}.{frac:0<9}")
}

/// `key=value` lines of a container's stdout (the first value of each key).
pub fn facts(lines: &[String]) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once('=') {
            out.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
    }
    out
}

/// Every value of key `key` in `key=value` lines.
pub fn all_of(lines: &[String], key: &str) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string))
        .collect()
}
