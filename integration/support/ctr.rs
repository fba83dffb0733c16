//! `ctr` as scripts run it: the bosun binary under test through a link named `ctr`, against one test daemon's socket.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::{bail, ensure, Context, Result};

use super::daemon::BOSUN;
use super::Daemon;

/// `ctr` for one daemon: the bosun binary under a link named `ctr`, talking to `socket`.
pub struct Ctr {
    bin: PathBuf,
    socket: PathBuf,
}

impl Ctr {
    pub fn new(d: &Daemon) -> Result<Ctr> {
        Self::at(d, d.socket())
    }

    pub fn at(d: &Daemon, socket: PathBuf) -> Result<Ctr> {
        let bin = d.dir().join("bin/ctr");
        if !bin.exists() {
            std::fs::create_dir_all(d.dir().join("bin"))?;
            std::os::unix::fs::symlink(BOSUN, &bin).context("link ctr to bosun")?;
        }
        Ok(Ctr { bin, socket })
    }

    /// `ctr -a <socket> ARGS` (ARGS split at spaces), stdin from `input` when given.
    pub fn run(&self, args: &str, input: Option<&Path>) -> Result<Output> {
        let mut cmd = Command::new(&self.bin);
        cmd.arg("-a")
            .arg(&self.socket)
            .args(args.split_whitespace())
            .env_remove("CONTAINERD_NAMESPACE")
            .env_remove("CONTAINERD_ADDRESS");
        match input {
            Some(path) => {
                cmd.stdin(std::fs::File::open(path).with_context(|| path.display().to_string())?)
            }
            None => cmd.stdin(Stdio::null()),
        };
        cmd.output().with_context(|| format!("run ctr {args}"))
    }

    /// [`Ctr::run`] that must succeed; its stdout.
    pub fn ok(&self, args: &str, input: Option<&Path>) -> Result<String> {
        let out = self.run(args, input)?;
        if !out.status.success() {
            bail!(
                "ctr {args}: {}: {}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// [`Ctr::run`] that must fail; its stderr.
    pub fn refused(&self, args: &str) -> Result<String> {
        let out = self.run(args, None)?;
        ensure!(
            !out.status.success(),
            "ctr {args} succeeded: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// `ctr -n k8s.io images ls -q`, as lines.
    pub fn names(&self) -> Result<Vec<String>> {
        Ok(self
            .ok("-n k8s.io images ls -q", None)?
            .lines()
            .map(str::to_string)
            .collect())
    }
}
