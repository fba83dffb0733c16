//! The monitor's command line, one type both ways: the daemon renders [`MonitorArgs`] (`to_argv`), `bosun monitor` parses it back by hand with an error naming the bad argument.

use std::ffi::OsString;
use std::os::unix::io::RawFd;
use std::path::PathBuf;

use super::error::{Error, Result};

/// The longest CRI log record content before a line is cut (containerd's default).
pub const DEFAULT_LOG_MAX_LINE: usize = 16 * 1024;
/// The descriptor the daemon's launcher puts the sync pipe on (the `--sync-fd` it passes).
pub const SYNC_FD: RawFd = 3;

/// What `bosun monitor` is asked to do: the arguments after `monitor`, written by the daemon
/// ([`MonitorArgs::to_argv`]) and read by the monitor ([`MonitorArgs::parse`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MonitorArgs {
    /// The container id given to runc.
    pub id: String,
    /// The OCI bundle directory (absolute).
    pub bundle: PathBuf,
    /// The OCI runtime binary (absolute path, or a bare name looked up in PATH).
    pub runtime: PathBuf,
    /// The runtime's `--root` state directory (absolute).
    pub runtime_root: PathBuf,
    /// The CRI log file (absolute; its directory must exist).
    pub log_path: PathBuf,
    /// Where the exit record is written (absolute; its directory must exist).
    pub exit_file: PathBuf,
    /// The inherited descriptor the daemon reads the start result from (its launcher puts the
    /// pipe on [`SYNC_FD`], what [`MonitorArgs::new`] sets).
    pub sync_fd: RawFd,
    /// Give the container a stdin pipe (its write end is kept for attach).
    pub stdin: bool,
    /// Close the container's stdin once the first attach client's stdin ends.
    pub stdin_once: bool,
    /// Run the container on a terminal (`process.terminal` must be true in the bundle).
    pub tty: bool,
    /// Cut log lines longer than this many bytes (0: never cut; [`DEFAULT_LOG_MAX_LINE`] when
    /// not given).
    pub log_max_line: usize,
    /// Pass `--systemd-cgroup` to runc: `linux.cgroupsPath` is `slice:prefix:name` and runc
    /// asks systemd for the container's scope.
    pub systemd_cgroup: bool,
    /// Global options given to the runtime before `run` (a runtime handler's `options`).
    pub runtime_options: Vec<String>,
    /// Restore the container from a checkpoint instead of running it: the directory holding
    /// CRIU's images (`checkpoint/`) and its work directory (`work/`) (`runc restore`).
    pub restore: Option<PathBuf>,
}

const USAGE: &str = "usage: bosun monitor --id ID --bundle DIR --runtime PATH --runtime-root DIR \
--log-path FILE --exit-file FILE --sync-fd N [--stdin] [--stdin-once] [--tty] \
[--systemd-cgroup] [--log-max-line BYTES] [--runtime-option OPT]... [--restore DIR]";

impl MonitorArgs {
    /// The arguments for container `id` with no stdin or tty, the sync pipe on [`SYNC_FD`] and
    /// the default log line limit.
    pub fn new(
        id: impl Into<String>,
        bundle: impl Into<PathBuf>,
        runtime: impl Into<PathBuf>,
        runtime_root: impl Into<PathBuf>,
        log_path: impl Into<PathBuf>,
        exit_file: impl Into<PathBuf>,
    ) -> Self {
        MonitorArgs {
            id: id.into(),
            bundle: bundle.into(),
            runtime: runtime.into(),
            runtime_root: runtime_root.into(),
            log_path: log_path.into(),
            exit_file: exit_file.into(),
            sync_fd: SYNC_FD,
            stdin: false,
            stdin_once: false,
            tty: false,
            log_max_line: DEFAULT_LOG_MAX_LINE,
            systemd_cgroup: false,
            runtime_options: Vec::new(),
            restore: None,
        }
    }

    /// The command line after `monitor`, which [`MonitorArgs::parse`] reads back. `--id ID`
    /// comes first: recovery and the exit watcher know a monitor by `monitor --id ID` in its
    /// `/proc/PID/cmdline`. `--log-max-line` is left out at its default.
    pub fn to_argv(&self) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec!["--id".into()];
        argv.push(self.id.clone().into());
        for (flag, path) in [
            ("--bundle", &self.bundle),
            ("--runtime", &self.runtime),
            ("--runtime-root", &self.runtime_root),
            ("--log-path", &self.log_path),
            ("--exit-file", &self.exit_file),
        ] {
            argv.extend([flag.into(), path.into()]);
        }
        argv.extend(["--sync-fd".into(), self.sync_fd.to_string().into()]);
        for (flag, on) in [
            ("--stdin", self.stdin),
            ("--stdin-once", self.stdin_once),
            ("--tty", self.tty),
            ("--systemd-cgroup", self.systemd_cgroup),
        ] {
            if on {
                argv.push(flag.into());
            }
        }
        if self.log_max_line != DEFAULT_LOG_MAX_LINE {
            argv.extend([
                "--log-max-line".into(),
                self.log_max_line.to_string().into(),
            ]);
        }
        for opt in &self.runtime_options {
            argv.push(format!("--runtime-option={opt}").into());
        }
        if let Some(dir) = &self.restore {
            argv.extend(["--restore".into(), dir.into()]);
        }
        argv
    }

    /// Parses the arguments after `monitor`; accepts `--flag value` and `--flag=value`.
    pub fn parse(args: &[OsString]) -> Result<MonitorArgs> {
        let mut values: [Option<OsString>; 9] = Default::default();
        let (mut stdin, mut stdin_once, mut tty, mut systemd_cgroup) = (false, false, false, false);
        let mut runtime_options = Vec::new();
        let mut it = args.iter();
        while let Some(arg) = it.next() {
            let text = arg
                .to_str()
                .ok_or_else(|| bad(format!("argument {arg:?} is not UTF-8")))?;
            let (name, inline) = match text.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n, Some(OsString::from(v))),
                _ => (text, None),
            };
            let flag = match name {
                "--stdin" => Some(&mut stdin),
                "--stdin-once" => Some(&mut stdin_once),
                "--tty" => Some(&mut tty),
                "--systemd-cgroup" => Some(&mut systemd_cgroup),
                _ => None,
            };
            if let Some(flag) = flag {
                if inline.is_some() {
                    return Err(bad(format!("{name} takes no value")));
                }
                *flag = true;
                continue;
            }
            let mut value_of = |inline: Option<OsString>| match inline {
                Some(v) => Ok(v),
                None => it
                    .next()
                    .cloned()
                    .ok_or_else(|| bad(format!("{name} needs a value"))),
            };
            if name == "--runtime-option" {
                let value = value_of(inline)?
                    .into_string()
                    .map_err(|_| bad(format!("{name} is not UTF-8")))?;
                runtime_options.push(value);
                continue;
            }
            let slot = VALUED
                .iter()
                .position(|v| *v == name)
                .ok_or_else(|| bad(format!("unknown argument {text:?}")))?;
            let value = value_of(inline)?;
            if values[slot].replace(value).is_some() {
                return Err(bad(format!("{name} given twice")));
            }
        }
        let [id, bundle, runtime, runtime_root, log_path, exit_file, sync_fd, max_line, restore] =
            values;
        let id = required("--id", id)?
            .into_string()
            .map_err(|_| bad("--id is not UTF-8".into()))?;
        if id.is_empty()
            || id.starts_with('-')
            || id.contains(['/', '\0'])
            || id == "."
            || id == ".."
        {
            return Err(bad(format!("--id {id:?} is not a valid container id")));
        }
        let bundle = absolute("--bundle", bundle)?;
        let runtime = PathBuf::from(required("--runtime", runtime)?);
        if runtime.as_os_str().is_empty()
            || (runtime.is_relative() && runtime.components().count() > 1)
        {
            return Err(bad(format!(
                "--runtime {} must be absolute or a bare name",
                runtime.display()
            )));
        }
        Ok(MonitorArgs {
            id,
            bundle,
            runtime,
            runtime_root: absolute("--runtime-root", runtime_root)?,
            log_path: absolute("--log-path", log_path)?,
            exit_file: absolute("--exit-file", exit_file)?,
            sync_fd: number::<RawFd>("--sync-fd", Some(required("--sync-fd", sync_fd)?))?
                .unwrap_or_default(),
            stdin,
            stdin_once,
            tty,
            log_max_line: number("--log-max-line", max_line)?.unwrap_or(DEFAULT_LOG_MAX_LINE),
            systemd_cgroup,
            runtime_options,
            restore: match restore {
                Some(r) => Some(absolute("--restore", Some(r))?),
                None => None,
            },
        })
    }
}

const VALUED: [&str; 9] = [
    "--id",
    "--bundle",
    "--runtime",
    "--runtime-root",
    "--log-path",
    "--exit-file",
    "--sync-fd",
    "--log-max-line",
    "--restore",
];

fn bad(message: String) -> Error {
    Error::msg(format!("{message}\n{USAGE}"))
}

fn required(name: &str, value: Option<OsString>) -> Result<OsString> {
    value.ok_or_else(|| bad(format!("{name} is required")))
}

fn absolute(name: &str, value: Option<OsString>) -> Result<PathBuf> {
    let path = PathBuf::from(required(name, value)?);
    if !path.is_absolute() {
        return Err(bad(format!("{name} {} must be absolute", path.display())));
    }
    Ok(path)
}

fn number<T: std::str::FromStr + PartialOrd + Default>(
    name: &str,
    value: Option<OsString>,
) -> Result<Option<T>> {
    let Some(value) = value else {
        return Ok(None);
    };
    match value.to_str().and_then(|s| s.parse::<T>().ok()) {
        Some(n) if n >= T::default() => Ok(Some(n)),
        _ => Err(bad(format!(
            "{name} {value:?} is not a non-negative integer"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn args(s: &str) -> Vec<OsString> {
        s.split_whitespace().map(OsString::from).collect()
    }

    const BASE: &str = "--id c1 --bundle /b --runtime /usr/sbin/runc --runtime-root /run/r \
                        --log-path /l/0.log --exit-file /e/exit --sync-fd 3";

    /// A value for every field, none of them the default: each must come back as it went.
    fn every_field() -> MonitorArgs {
        MonitorArgs {
            id: "c0ffee".into(),
            bundle: "/b/bundle".into(),
            runtime: "/usr/sbin/runc".into(),
            runtime_root: "/r/runc".into(),
            log_path: "/l/a b.log".into(),
            exit_file: "/e/exit.json".into(),
            sync_fd: 7,
            stdin: true,
            stdin_once: true,
            tty: true,
            log_max_line: 4096,
            systemd_cgroup: true,
            runtime_options: vec!["--debug".into(), "--cgroup-manager=disabled".into()],
            restore: Some("/s/restore".into()),
        }
    }

    /// The daemon renders the command line the monitor parses: the two must never drift.
    #[test]
    fn every_field_round_trips_through_the_argv() {
        let all = every_field();
        let back = MonitorArgs::parse(&all.to_argv()).expect("the monitor accepts the argv");
        assert_eq!(back, all);
        // Each switch alone, so that two cannot trade places unseen.
        let none = MonitorArgs {
            stdin: false,
            stdin_once: false,
            tty: false,
            systemd_cgroup: false,
            ..every_field()
        };
        let switches: [fn(&mut MonitorArgs); 4] = [
            |a| a.stdin = true,
            |a| a.stdin_once = true,
            |a| a.tty = true,
            |a| a.systemd_cgroup = true,
        ];
        for set in switches {
            let mut one = none.clone();
            set(&mut one);
            assert_eq!(MonitorArgs::parse(&one.to_argv()).expect("parse"), one);
        }
        // 0 (never cut) is a value of its own, not the default; a bare runtime name stays bare.
        for log_max_line in [0, DEFAULT_LOG_MAX_LINE] {
            let a = MonitorArgs {
                log_max_line,
                runtime: "runc".into(),
                ..every_field()
            };
            assert_eq!(MonitorArgs::parse(&a.to_argv()).expect("parse"), a);
        }
    }

    /// What the daemon passes for a plain container: `--id` first (recovery finds monitors by
    /// `monitor --id ID`), the sync pipe on fd 3, nothing for defaults.
    #[test]
    fn the_daemons_argv_for_a_plain_container() {
        let a = MonitorArgs::new("c1", "/b", "runc", "/r", "/l/0.log", "/e/exit");
        let want = "--id c1 --bundle /b --runtime runc --runtime-root /r --log-path /l/0.log \
                    --exit-file /e/exit --sync-fd 3";
        assert_eq!(a.to_argv(), args(want));
        assert_eq!(MonitorArgs::parse(&args(want)).expect("parse"), a);
    }

    fn err(s: &str) -> String {
        MonitorArgs::parse(&args(s))
            .expect_err("must fail")
            .to_string()
    }

    #[test]
    fn all_arguments_parse() {
        let c = MonitorArgs::parse(&args(&format!(
            "{BASE} --stdin --stdin-once --tty --log-max-line=100"
        )))
        .expect("parse");
        assert_eq!(c.id, "c1");
        assert_eq!(c.bundle, Path::new("/b"));
        assert_eq!(c.runtime, Path::new("/usr/sbin/runc"));
        assert_eq!(c.runtime_root, Path::new("/run/r"));
        assert_eq!(c.log_path, Path::new("/l/0.log"));
        assert_eq!(c.exit_file, Path::new("/e/exit"));
        assert_eq!(c.sync_fd, 3);
        assert!(c.stdin && c.stdin_once && c.tty);
        assert_eq!(c.log_max_line, 100);
    }

    #[test]
    fn defaults_apply() {
        let c = MonitorArgs::parse(&args(BASE)).expect("parse");
        assert!(!c.stdin && !c.stdin_once && !c.tty);
        assert_eq!(c.log_max_line, 16_384);
        let c =
            MonitorArgs::parse(&args(&BASE.replace("/usr/sbin/runc", "runc"))).expect("bare name");
        assert_eq!(c.runtime, Path::new("runc"));
    }

    #[test]
    fn errors_name_the_argument() {
        assert!(err("--id c1").starts_with("--bundle is required\nusage: bosun monitor"));
        assert!(err(&format!("{BASE} --bogus")).starts_with("unknown argument \"--bogus\""));
        assert!(err(&format!("{BASE} --id")).starts_with("--id needs a value"));
        assert!(err(&format!("{BASE} --id c2")).starts_with("--id given twice"));
        assert!(err(&format!("{BASE} --tty=yes")).starts_with("--tty takes no value"));
        assert!(err(&BASE.replace("--sync-fd 3", "--sync-fd x"))
            .starts_with("--sync-fd \"x\" is not a non-negative integer"));
        assert!(err(&BASE.replace("--sync-fd 3", "--sync-fd -1"))
            .starts_with("--sync-fd \"-1\" is not a non-negative integer"));
        assert!(err(&format!("{BASE} --log-max-line 1k"))
            .starts_with("--log-max-line \"1k\" is not a non-negative integer"));
        assert!(err(&BASE.replace("/b ", "b ")).starts_with("--bundle b must be absolute"));
        assert!(err(&BASE.replace("/usr/sbin/runc", "bin/runc"))
            .starts_with("--runtime bin/runc must be absolute or a bare name"));
        assert!(err(&BASE.replace("c1", "a/b")).starts_with("--id \"a/b\" is not a valid"));
        assert!(err(&BASE.replace("c1", "..")).starts_with("--id \"..\" is not a valid"));
    }
}
