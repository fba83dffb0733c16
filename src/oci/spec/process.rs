//! The process section's plain parts: argv, environment, working directory, OOM score.

use crate::error::{Error, Result};
use crate::image::manifest::RunConfig;
use crate::oci::spec::request::ContainerRequest;

/// The PATH a container gets when neither the image nor the request sets one (containerd's
/// `defaultUnixEnv`, pkg/oci/spec.go).
pub const DEFAULT_PATH: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// argv from CRI command/args and the image ENTRYPOINT/CMD, with Docker's rules as containerd
/// applies them (internal/cri/opts/spec_opts.go WithProcessArgs): a CRI command replaces the
/// entrypoint and drops CMD; CRI args alone replace CMD; an entrypoint of `[""]` means none.
pub fn args(req: &ContainerRequest, image: &RunConfig) -> Result<Vec<String>> {
    let mut command = req.command.clone();
    let mut args = req.args.clone();
    if command.is_empty() {
        if args.is_empty() {
            args = image.cmd.clone().unwrap_or_default();
        }
        let entrypoint = image.entrypoint.clone().unwrap_or_default();
        if entrypoint.as_slice() != [String::new()] {
            command = entrypoint;
        }
    }
    command.extend(args);
    if command.is_empty() {
        return Err(Error::invalid(format!(
            "container {}: no command specified",
            req.name
        )));
    }
    if let Some(a) = command.iter().find(|a| a.contains('\0')) {
        return Err(Error::invalid(format!(
            "container {}: argument {a:?} contains a NUL byte",
            req.name
        )));
    }
    Ok(command)
}

/// Sets or unsets `entries` over `base` by key, keeping first positions (containerd's
/// `replaceOrAppendEnvValues`): `K=V` replaces K in place or appends; a bare `K` removes K.
fn replace_or_append(base: &mut Vec<String>, entries: impl IntoIterator<Item = String>) {
    for e in entries {
        let (key, set) = match e.split_once('=') {
            Some((k, _)) => (k.to_string(), true),
            None => (e.clone(), false),
        };
        let pos = base
            .iter()
            .position(|b| b.split_once('=').map_or(b.as_str(), |(k, _)| k) == key);
        match (pos, set) {
            (Some(i), true) => base[i] = e,
            (None, true) => base.push(e),
            (Some(i), false) => {
                base.remove(i);
            }
            (None, false) => {}
        }
    }
}

/// The environment, in containerd's order: the default PATH, `TERM=xterm` with a tty
/// (WithTTY), `HOSTNAME`, then the image's variables, then the request's, each later one
/// replacing an earlier one with the same key.
pub fn env(req: &ContainerRequest, image: &RunConfig, hostname: &str) -> Result<Vec<String>> {
    let mut env = vec![DEFAULT_PATH.to_string()];
    if req.tty {
        env.push("TERM=xterm".to_string());
    }
    replace_or_append(&mut env, [format!("HOSTNAME={hostname}")]);
    replace_or_append(&mut env, image.env.clone().unwrap_or_default());
    let mut cri = Vec::with_capacity(req.envs.len());
    for (key, value) in &req.envs {
        if key.is_empty() || key.contains('=') || key.contains('\0') {
            return Err(Error::invalid(format!(
                "container {}: invalid environment variable name {key:?}",
                req.name
            )));
        }
        let value = String::from_utf8(value.clone()).map_err(|_| {
            Error::invalid(format!(
                "container {}: environment variable {key}: value is not UTF-8",
                req.name
            ))
        })?;
        if value.contains('\0') {
            return Err(Error::invalid(format!(
                "container {}: environment variable {key}: value contains a NUL byte",
                req.name
            )));
        }
        cri.push(format!("{key}={value}"));
    }
    replace_or_append(&mut env, cri);
    Ok(env)
}

/// The working directory: CRI working_dir, else the image WORKDIR, else `/`. runc needs it
/// absolute: a relative CRI value is refused, a relative image value is taken from `/`.
pub fn cwd(req: &ContainerRequest, image: &RunConfig) -> Result<String> {
    if let Some(dir) = req.working_dir.as_deref().filter(|d| !d.is_empty()) {
        if !dir.starts_with('/') {
            return Err(Error::invalid(format!(
                "container {}: working_dir {dir:?} is not absolute",
                req.name
            )));
        }
        return Ok(dir.to_string());
    }
    match image.working_dir.as_deref().filter(|d| !d.is_empty()) {
        Some(dir) if dir.starts_with('/') => Ok(dir.to_string()),
        Some(dir) => Ok(format!("/{dir}")),
        None => Ok("/".to_string()),
    }
}

/// The OOM score adjustment for the process: the request's, but never below the daemon's own.
///
/// Lowering oom_score_adj below the caller's needs CAP_SYS_RESOURCE, which this daemon may not
/// hold (this VM's root lacks it), and runc fails the whole create when the write is refused.
/// containerd clamps the same way when `restrict_oom_score_adj` is on
/// (internal/cri/opts/spec_linux_opts.go restrictOOMScoreAdj).
pub fn oom_score_adj(container: &str, requested: Option<i64>, daemon: i32) -> Result<Option<i32>> {
    let Some(req) = requested else {
        return Ok(None);
    };
    if !(-1000..=1000).contains(&req) {
        return Err(Error::invalid(format!(
            "container {container}: oom_score_adj {req} is outside -1000..=1000"
        )));
    }
    let req = req as i32;
    if req < daemon {
        tracing::debug!(
            container,
            requested = req,
            daemon,
            "oom_score_adj raised to the daemon's own: lowering it needs CAP_SYS_RESOURCE and \
             runc would fail the create"
        );
        return Ok(Some(daemon));
    }
    Ok(Some(req))
}

/// This process's oom_score_adj (what `oom_score_adj` clamps to).
pub fn daemon_oom_score_adj() -> Result<i32> {
    let text = std::fs::read_to_string("/proc/self/oom_score_adj")
        .map_err(|e| Error::internal(format!("read /proc/self/oom_score_adj: {e}")))?;
    text.trim()
        .parse()
        .map_err(|e| Error::internal(format!("/proc/self/oom_score_adj {text:?}: {e}")))
}

#[cfg(test)]
#[path = "process_tests.rs"]
mod tests;
