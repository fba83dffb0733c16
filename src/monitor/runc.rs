//! `runc run --detach`: the command line, its error message (from runc's JSON log) and the init pid.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::args::MonitorArgs;
use super::error::{Context, Error, Result};

/// The container's stdio as runc should pass it to the init.
#[derive(Debug)]
pub struct RuncStdio {
    /// stdin of runc (and so of the container).
    pub stdin: Stdio,
    /// stdout of runc (and so of the container).
    pub stdout: Stdio,
    /// stderr of runc (and so of the container).
    pub stderr: Stdio,
}

/// Where runc writes its own log (`--log <bundle>/runc.log --log-format json`).
pub fn log_path(bundle: &Path) -> PathBuf {
    bundle.join("runc.log")
}

/// Where runc writes the init's pid.
pub fn pid_file(bundle: &Path) -> PathBuf {
    bundle.join("init.pid")
}

/// CRIU's images in a restore directory.
pub fn restore_images(dir: &Path) -> PathBuf {
    dir.join("checkpoint")
}

/// CRIU's work directory (its `restore.log`) in a restore directory.
pub fn restore_work(dir: &Path) -> PathBuf {
    dir.join("work")
}

/// The argument vector after the runtime binary (without the stdio).
pub fn run_args(config: &MonitorArgs, console_socket: Option<&str>) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = config.runtime_options.iter().map(Into::into).collect();
    args.extend([
        "--root".into(),
        config.runtime_root.clone().into(),
        "--log".into(),
        log_path(&config.bundle).into(),
        "--log-format".into(),
        "json".into(),
    ]);
    if config.systemd_cgroup {
        args.push("--systemd-cgroup".into());
    }
    match &config.restore {
        // `runc restore` (and crun's): CRIU restores the dumped processes into the bundle's
        // new container; the dumped stdio pipes are mapped onto runc's own stdio (ours).
        Some(dir) => args.extend([
            "restore".into(),
            "--detach".into(),
            "--image-path".into(),
            restore_images(dir).into(),
            "--work-path".into(),
            restore_work(dir).into(),
        ]),
        None => args.extend(["run".into(), "--detach".into()]),
    }
    args.extend([
        "--bundle".into(),
        config.bundle.clone().into(),
        "--pid-file".into(),
        pid_file(&config.bundle).into(),
    ]);
    if let Some(socket) = console_socket {
        args.push("--console-socket".into());
        args.push(socket.into());
    }
    args.push(config.id.clone().into());
    args
}

/// Runs `runc run --detach` to completion with `stdio` handed to the container's init: one
/// runc process creates and starts the container (StartContainer; CreateContainer runs no
/// runc, issue 13). runc runs in the bundle directory (it changes there anyway; the console
/// socket name is relative to it). It returns once the init is released to exec the
/// container's process; the init, reparented to us (child subreaper), is reaped by the
/// supervisor only. On failure the error is runc's own last `"level":"error"` message from
/// this run's log (runc has destroyed the container then).
pub fn run(config: &MonitorArgs, console_socket: Option<&str>, stdio: RuncStdio) -> Result<()> {
    let log = log_path(&config.bundle);
    let log_start = std::fs::metadata(&log).map(|m| m.len()).unwrap_or(0);
    let mut cmd = Command::new(&config.runtime);
    cmd.args(run_args(config, console_socket))
        .current_dir(&config.bundle)
        .stdin(stdio.stdin)
        .stdout(stdio.stdout)
        .stderr(stdio.stderr);
    super::signals::reset_in_child(&mut cmd);
    // `status` waits for this pid only: no other child is reaped behind the supervisor's back.
    let status = cmd
        .status()
        .with_context(|| format!("run {}", config.runtime.display()))?;
    // Dropping the command closes our copies of the container's pipe ends.
    drop(cmd);
    if status.success() {
        return Ok(());
    }
    let appended = read_from(&log, log_start).unwrap_or_default();
    let msg = match last_error(&appended) {
        Some(msg) => msg,
        None => format!("runc run: {status}"),
    };
    // A failed restore's reason is in CRIU's own log.
    let criu = config.restore.as_ref().and_then(|dir| {
        let text = std::fs::read_to_string(restore_work(dir).join("restore.log")).ok()?;
        let errors: Vec<&str> = text.lines().filter(|l| l.contains("Error")).collect();
        let tail = &errors[errors.len().saturating_sub(3)..];
        (!tail.is_empty()).then(|| tail.join(" | "))
    });
    Err(Error::msg(match criu {
        Some(criu) => format!("{msg}; CRIU: {criu}"),
        None => msg,
    }))
}

fn read_from(path: &Path, offset: u64) -> std::io::Result<String> {
    let mut file = File::open(path)?;
    file.seek(SeekFrom::Start(offset))?;
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// The `msg` of the last `"level":"error"` (or `fatal`) line of a runc JSON log.
pub fn last_error(log: &str) -> Option<String> {
    log.lines().rev().find_map(|line| {
        let entry: serde_json::Value = serde_json::from_str(line).ok()?;
        let level = entry["level"].as_str()?;
        if level == "error" || level == "fatal" {
            entry["msg"].as_str().map(str::to_string)
        } else {
            None
        }
    })
}

/// The init pid runc wrote (no trailing newline in runc's file, tolerated anyway).
pub fn read_pid(path: &Path) -> Result<i32> {
    let text = std::fs::read_to_string(path).with_context(|| format!("read {}", path.display()))?;
    match text.trim().parse::<i32>() {
        Ok(pid) if pid > 0 => Ok(pid),
        _ => Err(Error::msg(format!(
            "{}: {:?} is not a pid",
            path.display(),
            text.trim()
        ))),
    }
}

/// The parent pid of `pid`, from `/proc/<pid>/stat` (field 4, after the parenthesised name).
pub fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    after_name.split_whitespace().nth(1)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_error_line_wins() {
        let log = concat!(
            r#"{"level":"warning","msg":"cgroup v1 is deprecated","time":"2026-11-22T04:27:24Z"}"#,
            "\n",
            r#"{"level":"error","msg":"first","time":"2026-11-22T04:27:24Z"}"#,
            "\n",
            r#"{"level":"error","msg":"runc create failed: chdir /x: no such file or directory","time":"2026-11-22T04:27:24Z"}"#,
            "\n",
            "not json\n",
            r#"{"level":"info","msg":"later","time":"2026-11-22T04:27:24Z"}"#,
            "\n"
        );
        assert_eq!(
            last_error(log).as_deref(),
            Some("runc create failed: chdir /x: no such file or directory")
        );
        assert_eq!(last_error(r#"{"level":"info","msg":"x"}"#), None);
        assert_eq!(last_error(""), None);
    }

    #[test]
    fn the_command_line_puts_global_flags_before_run() {
        let config = MonitorArgs::parse(
            &"--id c1 --bundle /b --runtime /usr/sbin/runc --runtime-root /run/r \
              --log-path /l --exit-file /e --sync-fd 3"
                .split_whitespace()
                .map(Into::into)
                .collect::<Vec<_>>(),
        )
        .expect("parse");
        let args: Vec<String> = run_args(&config, Some("console.sock"))
            .into_iter()
            .map(|a| a.into_string().expect("utf8"))
            .collect();
        assert_eq!(
            args.join(" "),
            "--root /run/r --log /b/runc.log --log-format json run --detach --bundle /b \
             --pid-file /b/init.pid --console-socket console.sock c1"
        );
        let systemd = MonitorArgs {
            systemd_cgroup: true,
            ..config
        };
        let args: Vec<String> = run_args(&systemd, None)
            .into_iter()
            .map(|a| a.into_string().expect("utf8"))
            .collect();
        assert_eq!(
            args.join(" "),
            "--root /run/r --log /b/runc.log --log-format json --systemd-cgroup run \
             --detach --bundle /b --pid-file /b/init.pid c1"
        );
        let restore = MonitorArgs {
            restore: Some("/s/r".into()),
            ..systemd
        };
        let args: Vec<String> = run_args(&restore, None)
            .into_iter()
            .map(|a| a.into_string().expect("utf8"))
            .collect();
        assert_eq!(
            args.join(" "),
            "--root /run/r --log /b/runc.log --log-format json --systemd-cgroup restore \
             --detach --image-path /s/r/checkpoint --work-path /s/r/work --bundle /b \
             --pid-file /b/init.pid c1"
        );
    }

    #[test]
    fn pid_files_are_validated() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("init.pid");
        std::fs::write(&path, "5536").expect("write");
        assert_eq!(read_pid(&path).expect("pid"), 5536);
        std::fs::write(&path, "0\n").expect("write");
        assert!(read_pid(&path)
            .expect_err("must fail")
            .to_string()
            .ends_with("\"0\" is not a pid"));
        assert!(read_pid(&dir.path().join("none")).is_err());
    }

    #[test]
    fn parent_of_reads_proc_stat() {
        assert_eq!(
            parent_of(std::process::id() as i32),
            Some(rustix::process::getppid().map_or(0, |p| p.as_raw_nonzero().get()))
        );
    }
}
