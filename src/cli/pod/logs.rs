//! `bosun pod logs`: a container's CRI log file as plain text (partial lines joined), optionally followed across restarts.

use std::io::{BufRead, Seek, Write};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;

use super::{get_view, pod_of, Namespace};
use crate::proto::bosun::v1 as api;
use api::pods_client::PodsClient;

/// `bosun pod logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// Pod name.
    pub name: String,
    #[command(flatten)]
    pub ns: Namespace,
    /// Container (required when the pod has several).
    #[arg(short = 'c', long = "container")]
    pub container: Option<String>,
    /// Keep printing what the container writes (also across restarts).
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// The previous (dead) instance's log.
    #[arg(short = 'p', long)]
    pub previous: bool,
    /// Prefix each line with its time.
    #[arg(long)]
    pub timestamps: bool,
}

/// One CRI log line: `<RFC3339Nano> <stdout|stderr> <P|F> <message>`.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    pub partial: bool,
    pub message: &'a str,
}

/// Parses one CRI log line (without its newline).
pub fn parse(line: &str) -> Option<LogLine<'_>> {
    let mut it = line.splitn(4, ' ');
    let time = it.next()?;
    let stream = it.next()?;
    let tag = it.next()?;
    let message = it.next().unwrap_or("");
    Some(LogLine {
        time,
        stream,
        partial: tag.split(':').next() == Some("P"),
        message,
    })
}

/// Turns CRI log lines into the container's output, joining partial lines.
#[derive(Default)]
pub struct Joiner {
    pending: String,
    pending_time: Option<String>,
}

impl Joiner {
    /// Feeds one line; returns text to print (with the newline) when a line completes.
    pub fn push(&mut self, line: &str, timestamps: bool) -> Option<String> {
        let l = parse(line)?;
        if self.pending_time.is_none() {
            self.pending_time = Some(l.time.to_string());
        }
        self.pending.push_str(l.message);
        if l.partial {
            return None;
        }
        let text = std::mem::take(&mut self.pending);
        let time = self.pending_time.take().unwrap_or_default();
        Some(if timestamps {
            format!("{time} {text}\n")
        } else {
            format!("{text}\n")
        })
    }
}

fn pick<'a>(v: &'a api::PodView, a: &LogsArgs) -> anyhow::Result<&'a api::LogRef> {
    match &a.container {
        Some(c) => v
            .logs
            .iter()
            .find(|l| l.container == *c)
            .with_context(|| format!("container {c:?} is not valid for pod {:?}", a.name)),
        None => {
            let pod = pod_of(v)?;
            let apps = pod.spec.map(|s| s.containers).unwrap_or_default();
            if apps.len() != 1 {
                let names: Vec<String> = apps.iter().map(|c| c.name.clone()).collect();
                bail!(
                    "a container name must be specified for pod {}, choose one of: [{}]",
                    a.name,
                    names.join(" ")
                );
            }
            v.logs
                .iter()
                .find(|l| l.container == apps[0].name)
                .with_context(|| format!("pod {} has no log yet", a.name))
        }
    }
}

/// `bosun pod logs`.
pub async fn logs(
    c: &mut PodsClient<tonic::transport::Channel>,
    a: LogsArgs,
) -> anyhow::Result<()> {
    let v = get_view(c, &a.ns.namespace, &a.name).await?;
    let r = pick(&v, &a)?.clone();
    let path = if a.previous {
        if r.previous.is_empty() {
            bail!(
                "previous terminated container {:?} in pod {:?} not found",
                r.container,
                a.name
            );
        }
        r.previous.clone()
    } else {
        if r.current.is_empty() {
            bail!(
                "container {:?} in pod {:?} is waiting to start",
                r.container,
                a.name
            );
        }
        r.current.clone()
    };
    let mut out = std::io::stdout();
    let mut joiner = Joiner::default();
    let mut file = std::fs::File::open(&path).with_context(|| format!("open {path}"))?;
    let mut pos = copy(&mut file, 0, &mut joiner, a.timestamps, &mut out)?;
    if !a.follow || a.previous {
        return Ok(());
    }
    let mut current = path;
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        pos = copy(&mut file, pos, &mut joiner, a.timestamps, &mut out)?;
        let v = match c
            .get(api::GetPodRequest {
                namespace: a.ns.namespace.clone(),
                name: a.name.clone(),
            })
            .await
        {
            Ok(v) => v.into_inner(),
            Err(s) if s.code() == tonic::Code::NotFound => return Ok(()),
            Err(s) => return Err(s.into()),
        };
        let Some(r) = v.logs.iter().find(|l| l.container == r.container) else {
            return Ok(());
        };
        if !r.current.is_empty() && r.current != current {
            // The container restarted into a new file: finish the old one, then follow the new.
            copy(&mut file, pos, &mut joiner, a.timestamps, &mut out)?;
            current = r.current.clone();
            file = std::fs::File::open(&current).with_context(|| format!("open {current}"))?;
            pos = 0;
            continue;
        }
        if !running(&v, &r.container)? {
            copy(&mut file, pos, &mut joiner, a.timestamps, &mut out)?;
            return Ok(());
        }
    }
}

/// The container is running (or about to restart into a new log file).
fn running(v: &api::PodView, container: &str) -> anyhow::Result<bool> {
    let pod = pod_of(v)?;
    if pod.metadata.deletion_timestamp.is_some() {
        // Terminating pods keep writing until they are gone.
        return Ok(true);
    }
    let st = pod.status.unwrap_or_default();
    let all = st
        .container_statuses
        .into_iter()
        .flatten()
        .chain(st.init_container_statuses.into_iter().flatten());
    for s in all {
        if s.name == container {
            let state = s.state.unwrap_or_default();
            let will_restart = state.waiting.is_some();
            return Ok(state.running.is_some() || will_restart);
        }
    }
    Ok(false)
}

/// Prints complete lines from `pos` on; returns the position after the last complete line.
fn copy(
    file: &mut std::fs::File,
    pos: u64,
    joiner: &mut Joiner,
    timestamps: bool,
    out: &mut impl Write,
) -> anyhow::Result<u64> {
    file.seek(std::io::SeekFrom::Start(pos))?;
    let mut reader = std::io::BufReader::new(file);
    let mut pos = pos;
    let mut line = String::new();
    loop {
        line.clear();
        let n = reader.read_line(&mut line)?;
        if n == 0 || !line.ends_with('\n') {
            break;
        }
        pos += n as u64;
        if let Some(text) = joiner.push(line.trim_end_matches('\n'), timestamps) {
            out.write_all(text.as_bytes())?;
        }
    }
    out.flush()?;
    Ok(pos)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_joins_partial_lines() {
        let l = parse("2024-01-01T00:00:00.000000001Z stdout F hello world").expect("line");
        assert_eq!(l.stream, "stdout");
        assert!(!l.partial);
        assert_eq!(l.message, "hello world");
        let mut j = Joiner::default();
        assert_eq!(j.push("2024-01-01T00:00:00Z stdout P abc", false), None);
        assert_eq!(
            j.push("2024-01-01T00:00:01Z stdout F def", true).as_deref(),
            Some("2024-01-01T00:00:00Z abcdef\n")
        );
        assert_eq!(
            j.push("2024-01-01T00:00:02Z stderr F ", false).as_deref(),
            Some("\n"),
            "an empty line stays a line"
        );
    }

    #[test]
    fn copy_stops_at_an_incomplete_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("0.log");
        std::fs::write(&p, "t stdout F one\nt stdout F tw").expect("write");
        let mut f = std::fs::File::open(&p).expect("open");
        let mut out = Vec::new();
        let mut j = Joiner::default();
        let pos = copy(&mut f, 0, &mut j, false, &mut out).expect("copy");
        assert_eq!(out, b"one\n");
        assert_eq!(pos, 15);
        std::fs::write(&p, "t stdout F one\nt stdout F two\n").expect("write");
        let pos = copy(&mut f, pos, &mut j, false, &mut out).expect("copy");
        assert_eq!(out, b"one\ntwo\n");
        assert_eq!(pos, 30);
    }
}
