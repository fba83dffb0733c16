//! Failpoints: named step boundaries where a test makes the daemon die (SIGKILL), pause, sleep or fail the step.
//!
//! Compiled in only with the `failpoints` cargo feature. The crate's dev-dependency on itself
//! turns the feature on for every `cargo test` build (so the daemon binary the integration tests
//! run has them) and for nothing else: `cargo build [--release]` and `cargo install` build a
//! `bosun` without this module, and [`failpoint!`](crate::failpoint!) expands to nothing there.
//!
//! The daemon reads `BOSUN_FAILPOINTS` once at start ([`init`]):
//! `name=action[;name=action…]`, where action is `[N@](kill|pause|sleep(MS)|error|off)`:
//! - `kill`: SIGKILL to the daemon itself, as a `kill -9` from outside at exactly that point;
//! - `pause`: create `$BOSUN_FAILPOINT_DIR/<name>.paused` and wait until the test removes it;
//! - `sleep(MS)`: wait MS milliseconds;
//! - `error`: the step fails there (Internal, "injected error at failpoint <name>"), as a
//!   failing syscall or write would; only points marked with
//!   [`failpoint_check!`](crate::failpoint_check!) can fail (elsewhere it is ignored, with a
//!   warning and no `hits` line);
//! - `N@`: act on the N-th hit of the point only (default: the first).
//!
//! Every action taken is appended to `$BOSUN_FAILPOINT_DIR/hits` (`<name> <hit> <action>`)
//! before it is carried out, so a test can tell that the daemon died where it meant it to.

use std::collections::HashMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::Duration;

use crate::error::{Error, Result};

/// The variable holding the failpoint configuration.
pub const ENV: &str = "BOSUN_FAILPOINTS";
/// The variable naming the directory of the `hits` log and the pause files.
pub const DIR_ENV: &str = "BOSUN_FAILPOINT_DIR";

/// What a failpoint does when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// SIGKILL the whole daemon.
    Kill,
    /// Wait until the pause file is removed.
    Pause,
    /// Wait this long.
    Sleep(Duration),
    /// Fail the step (fallible points only).
    Error,
    /// Nothing (a point listed but disarmed).
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Point {
    /// The hit to act on (1-based).
    nth: u32,
    action: Action,
}

#[derive(Debug, Default)]
struct Registry {
    points: HashMap<String, Point>,
    dir: Option<PathBuf>,
    hits: Mutex<HashMap<String, u32>>,
}

static REGISTRY: OnceLock<Registry> = OnceLock::new();

/// Parses `spec` (the `BOSUN_FAILPOINTS` syntax) into points.
fn parse(spec: &str) -> Result<HashMap<String, Point>> {
    let mut points = HashMap::new();
    for item in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let bad = |why: &str| Error::invalid(format!("{ENV}: {item:?}: {why}"));
        let (name, action) = item
            .split_once('=')
            .ok_or_else(|| bad("want name=action"))?;
        let (nth, action) = match action.split_once('@') {
            Some((n, a)) => (
                n.parse::<u32>()
                    .ok()
                    .filter(|n| *n > 0)
                    .ok_or_else(|| bad("N@ wants a positive N"))?,
                a,
            ),
            None => (1, action),
        };
        let action = match action {
            "kill" => Action::Kill,
            "pause" => Action::Pause,
            "off" => Action::Off,
            "error" => Action::Error,
            a => {
                let ms = a
                    .strip_prefix("sleep(")
                    .and_then(|r| r.strip_suffix(')'))
                    .and_then(|ms| ms.parse::<u64>().ok())
                    .ok_or_else(|| bad("action is kill, pause, sleep(MS), error or off"))?;
                Action::Sleep(Duration::from_millis(ms))
            }
        };
        points.insert(name.trim().to_string(), Point { nth, action });
    }
    Ok(points)
}

/// Reads the configuration from the environment; call once before serving. Returns the
/// configured points (for the daemon's log); an unparsable value is an error.
pub fn init() -> Result<Vec<String>> {
    let spec = std::env::var(ENV).unwrap_or_default();
    let points = parse(&spec)?;
    let dir = std::env::var_os(DIR_ENV).map(PathBuf::from);
    if points.values().any(|p| p.action == Action::Pause) && dir.is_none() {
        return Err(Error::invalid(format!("{ENV}: pause needs {DIR_ENV}")));
    }
    let mut names: Vec<String> = points
        .iter()
        .map(|(n, p)| format!("{n}={}@{:?}", p.nth, p.action))
        .collect();
    names.sort();
    let _ = REGISTRY.set(Registry {
        points,
        dir,
        hits: Mutex::new(HashMap::new()),
    });
    Ok(names)
}

/// Counts a hit of `name`; the action when this hit is the armed one. `fallible`: the step
/// can fail here (an `error` elsewhere is not taken).
fn fire(name: &str, fallible: bool) -> Option<(Action, Option<PathBuf>)> {
    let reg = REGISTRY.get()?;
    let point = reg.points.get(name)?;
    let n = {
        let mut hits = reg.hits.lock().unwrap_or_else(PoisonError::into_inner);
        let n = hits.entry(name.to_string()).or_insert(0);
        *n += 1;
        *n
    };
    if n != point.nth || point.action == Action::Off {
        return None;
    }
    if point.action == Action::Error && !fallible {
        tracing::warn!(
            failpoint = name,
            "failpoint: this step cannot fail here; `error` ignored"
        );
        return None;
    }
    if let Some(dir) = &reg.dir {
        let line = format!("{name} {n} {:?}\n", point.action);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("hits"));
        if let Ok(mut f) = log {
            let _ = f.write_all(line.as_bytes());
        }
    }
    tracing::warn!(failpoint = name, hit = n, action = ?point.action, "failpoint fires");
    Some((
        point.action,
        reg.dir.as_ref().map(|d| d.join(format!("{name}.paused"))),
    ))
}

/// SIGKILL to this process; never returns.
fn kill_self() -> ! {
    let me = rustix::process::getpid();
    let _ = rustix::process::kill_process(me, rustix::process::Signal::KILL);
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// The failpoint `name` in synchronous code: pause and sleep block the thread.
pub fn hit(name: &str) {
    match fire(name, false) {
        None | Some((Action::Off | Action::Error, _)) => {}
        Some((Action::Kill, _)) => kill_self(),
        Some((Action::Sleep(d), _)) => std::thread::sleep(d),
        Some((Action::Pause, file)) => {
            let Some(file) = file else { return };
            let _ = std::fs::write(&file, b"");
            while file.exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

/// The failpoint `name` in async code: pause and sleep yield to the runtime.
pub async fn hit_async(name: &str) {
    match fire(name, false) {
        None | Some((Action::Off | Action::Error, _)) => {}
        Some((Action::Kill, _)) => kill_self(),
        Some((Action::Sleep(d), _)) => tokio::time::sleep(d).await,
        Some((Action::Pause, file)) => {
            let Some(file) = file else { return };
            let _ = tokio::fs::write(&file, b"").await;
            while tokio::fs::try_exists(&file).await.unwrap_or(false) {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

/// The error an `error` failpoint makes its step fail with.
fn injected(name: &str) -> Error {
    Error::internal(format!("injected error at failpoint {name}"))
}

/// The failpoint `name` at a step that can fail (synchronous code): as [`hit`], and `error`
/// makes it return the error the step then fails with.
pub fn check(name: &str) -> Result<()> {
    match fire(name, true) {
        Some((Action::Error, _)) => Err(injected(name)),
        Some((Action::Kill, _)) => kill_self(),
        Some((Action::Sleep(d), _)) => {
            std::thread::sleep(d);
            Ok(())
        }
        Some((Action::Pause, Some(file))) => {
            let _ = std::fs::write(&file, b"");
            while file.exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spec_names_points_actions_and_hits() {
        let p = parse("a=kill; b=3@pause;c=sleep(250);d=off;").expect("parse");
        assert_eq!(
            p.get("a"),
            Some(&Point {
                nth: 1,
                action: Action::Kill
            })
        );
        assert_eq!(
            p.get("b"),
            Some(&Point {
                nth: 3,
                action: Action::Pause
            })
        );
        assert_eq!(
            p.get("c").map(|p| p.action),
            Some(Action::Sleep(Duration::from_millis(250)))
        );
        assert_eq!(p.get("d").map(|p| p.action), Some(Action::Off));
        let p = parse("e=2@error").expect("parse");
        assert_eq!(
            p.get("e"),
            Some(&Point {
                nth: 2,
                action: Action::Error
            })
        );
        assert!(parse("").expect("empty").is_empty());
    }

    #[test]
    fn a_bad_spec_is_refused_naming_the_item() {
        for bad in ["a", "a=explode", "a=0@kill", "a=x@kill", "a=sleep(x)"] {
            let e = parse(bad).expect_err(bad);
            assert!(e.to_string().contains(bad), "{bad}: {e}");
        }
    }
}
