//! The `bosun monitor` fixture: a bundle of the busybox image with a hand-written spec, the
//! monitor started on it with pipes for its sync fd and attach socket, its log and exit records
//! parsed, its process watched; everything removed on drop.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read};
use std::path::PathBuf;
use std::process::{ChildStdout, Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use serde_json::Value;

use super::cri::is_rfc3339_nano;
use super::{cgroup_dirs, remove_cgroups, runc_bin, scratch, wait_until};

/// The binary under test (`BOSUN_MONITOR_BIN` to measure e.g. a release build).
pub fn bosun() -> PathBuf {
    std::env::var_os("BOSUN_MONITOR_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_bosun")))
}

pub type Record = (String, String, String, String);

/// A record without its timestamp (stream, tag, content), for comparisons.
pub fn rec(stream: &str, tag: &str, content: &str) -> Record {
    (String::new(), stream.into(), tag.into(), content.into())
}

/// Parses CRI log lines, checking each timestamp is RFC3339Nano in UTC (and dropping it).
pub fn parse_records(text: &str) -> Result<Vec<Record>> {
    let mut out = Vec::new();
    for line in text.split_terminator('\n') {
        let mut f = line.splitn(4, ' ');
        let (ts, stream, tag, content) = (f.next(), f.next(), f.next(), f.next());
        let (Some(ts), Some(stream), Some(tag), Some(content)) = (ts, stream, tag, content) else {
            bail!("bad record {line:?}");
        };
        ensure!(is_rfc3339_nano(ts), "bad timestamp in {line:?}");
        out.push(rec(stream, tag, content));
    }
    Ok(out)
}

#[derive(Debug)]
pub struct Stat {
    /// The parent's pid.
    pub ppid: i32,
    /// The session id.
    pub sid: i32,
}

/// Parent and session of a live (not zombie) process.
pub fn proc_stat(pid: i32) -> Option<Stat> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let f: Vec<&str> = stat[stat.rfind(')')? + 2..].split(' ').collect();
    (f.first() != Some(&"Z")).then_some(())?;
    Some(Stat {
        ppid: f.get(1)?.parse().ok()?,
        sid: f.get(3)?.parse().ok()?,
    })
}

/// Live monitor processes for container `id`.
pub fn monitors_of(id: &str) -> Vec<i32> {
    let needle = format!("\0monitor\0--id\0{id}\0");
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(&needle) && proc_stat(*pid).is_some()
        })
        .collect()
}

pub fn signal(pid: i32, sig: rustix::process::Signal) -> Result<()> {
    let pid = rustix::process::Pid::from_raw(pid).context("pid")?;
    Ok(rustix::process::kill_process(pid, sig)?)
}

/// One container's scratch dir (bundle, runc root, log, exit file) and its monitor; dropping
/// it deletes the container, kills a leftover monitor and removes cgroups and files.
pub struct Fixture {
    dir: tempfile::TempDir,
    /// The container id (its runc id and cgroup name).
    pub id: String,
    runc: PathBuf,
    /// The monitor's pid, once started.
    pub monitor: Option<i32>,
}

impl Fixture {
    /// A bundle running `sh -c script`, its spec adjusted by `tweak`.
    pub fn new(name: &str, script: &str, tweak: impl FnOnce(&mut Value)) -> Result<Fixture> {
        let fx = Fixture {
            dir: scratch()?,
            id: format!("bosun-it-mon-{name}-{}", std::process::id()),
            runc: runc_bin().context("runc")?,
            monitor: None,
        };
        std::fs::create_dir_all(fx.bundle().join("rootfs"))?;
        std::fs::create_dir(fx.dir.path().join("logs"))?;
        let st = Command::new("tar")
            .arg("-xzf")
            .arg(crate::support::busybox_layer()?)
            .arg("-C")
            .arg(fx.bundle().join("rootfs"))
            .status()?;
        ensure!(st.success(), "untar busybox: {st}");
        let mut spec = crate::support::minimal_spec(&["sh", "-c", script], &fx.id);
        tweak(&mut spec);
        std::fs::write(
            fx.bundle().join("config.json"),
            serde_json::to_vec_pretty(&spec)?,
        )?;
        Ok(fx)
    }

    pub fn bundle(&self) -> PathBuf {
        self.dir.path().join("bundle")
    }

    pub fn log(&self) -> PathBuf {
        self.dir.path().join("logs/0.log")
    }

    pub fn exit_file(&self) -> PathBuf {
        self.dir.path().join("exit")
    }

    pub fn monitor_args(&self, extra: &[&str]) -> Vec<OsString> {
        let d = self.dir.path();
        let mut args: Vec<OsString> = vec!["monitor".into(), "--id".into(), self.id.clone().into()];
        for (flag, value) in [
            ("--bundle", self.bundle()),
            ("--runtime", self.runc.clone()),
            ("--runtime-root", d.join("runc-root")),
            ("--log-path", self.log()),
            ("--exit-file", self.exit_file()),
        ] {
            args.extend([flag.into(), value.into()]);
        }
        args.extend(["--sync-fd".into(), "1".into()]);
        args.extend(extra.iter().map(OsString::from));
        args
    }

    /// Spawns the monitor with its stdout as the sync pipe; the spawned process must exit 0 at
    /// once (the monitor forked away); returns the sync message.
    pub fn spawn_monitor(&mut self, extra: &[&str]) -> Result<Value> {
        let mut child = Command::new(bosun())
            .args(self.monitor_args(extra))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().context("stdout")?;
        let status = child.wait()?;
        let mut err = String::new();
        child
            .stderr
            .take()
            .context("stderr")?
            .read_to_string(&mut err)?;
        ensure!(status.success(), "bosun monitor: {status}: {err}");
        self.read_sync(stdout)
    }

    /// Reads the sync line (30 s at most) and remembers the monitor's pid.
    pub fn read_sync(&mut self, out: ChildStdout) -> Result<Value> {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = tx.send(BufReader::new(out).read_line(&mut line).map(|_| line));
        });
        let line = rx
            .recv_timeout(Duration::from_secs(30))
            .context("no sync message")??;
        let sync: Value = serde_json::from_str(&line).with_context(|| format!("{line:?}"))?;
        self.monitor = sync["monitor_pid"].as_i64().map(|p| p as i32);
        Ok(sync)
    }

    pub fn runc(&self, args: &[&str]) -> Result<Output> {
        let root = self.dir.path().join("runc-root");
        Ok(Command::new(&self.runc)
            .arg("--root")
            .arg(root)
            .args(args)
            .output()?)
    }

    pub fn runc_ok(&self, args: &[&str]) -> Result<Output> {
        let out = self.runc(args)?;
        let err = String::from_utf8_lossy(&out.stderr);
        ensure!(out.status.success(), "runc {args:?}: {}: {err}", out.status);
        Ok(out)
    }

    /// A fixture with its monitor spawned (it runs the container: `runc run --detach`).
    pub fn started(
        name: &str,
        script: &str,
        tweak: impl FnOnce(&mut Value),
        extra: &[&str],
    ) -> Result<Fixture> {
        let mut fx = Fixture::new(name, script, tweak)?;
        fx.spawn_monitor(extra)?;
        Ok(fx)
    }

    /// Waits for the exit file and checks its code, signal and OOM verdict.
    pub fn wait_exit(&self, code: i64, signal: Option<i64>, oom: bool) -> Result<Value> {
        ensure!(wait_until(30, || self.exit_file().exists()), "no exit file");
        let exit: Value = serde_json::from_slice(&std::fs::read(self.exit_file())?)?;
        let want = (Some(code), signal, Some(oom));
        let got = (
            exit["exit_code"].as_i64(),
            exit["signal"].as_i64(),
            exit["oom_killed"].as_bool(),
        );
        ensure!(got == want, "exit record {exit}, want {want:?}");
        Ok(exit)
    }

    pub fn wait_records(&self, n: usize) -> Result<()> {
        let enough = || self.records().is_ok_and(|r| r.len() >= n);
        ensure!(
            wait_until(10, enough),
            "fewer than {n} log records: {:?}",
            self.records()
        );
        Ok(())
    }

    pub fn records(&self) -> Result<Vec<Record>> {
        parse_records(&std::fs::read_to_string(self.log())?)
    }

    /// Deletes the container and checks nothing is left: monitor, processes, cgroups.
    pub fn finish(mut self) -> Result<()> {
        self.runc(&["delete", "--force", &self.id])?;
        ensure!(
            wait_until(10, || monitors_of(&self.id).is_empty()),
            "monitor still running"
        );
        self.monitor = None;
        let left = self.cgroups();
        ensure!(left.is_empty(), "cgroups left: {left:?}");
        Ok(())
    }

    pub fn cgroups(&self) -> Vec<PathBuf> {
        cgroup_dirs(&self.id)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let _ = self.runc(&["delete", "--force", &self.id]);
        for pid in monitors_of(&self.id) {
            let _ = signal(pid, rustix::process::Signal::KILL);
        }
        remove_cgroups(&self.id);
    }
}
