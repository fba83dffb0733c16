//! The CRI log file a container's output goes to: the record format, both streams, long
//! lines split into partial records.

use anyhow::{ensure, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::containers::log_file_in_cri_format_with_long_lines",
        NEEDS,
        logs,
    )]
}

/// The monitor's default longest log record (src/monitor/args.rs, containerd's default).
const MAX_LINE: usize = 16 * 1024;

fn logs() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "logs")).await?;
        let script = "echo out-1; echo err-1 >&2; \
        head -c 40000 /dev/zero | tr '\\0' a; echo; \
        head -c 20000 /dev/zero | tr '\\0' b >&2; echo >&2; \
        echo 'out 2  with  spaces'; echo err-2 >&2; printf tail-without-newline";
        let c = cri::sh_config(&pod, "logs", &busybox, script);
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        let s = cri::wait_exited(&mut rt, &id, 10).await?;
        cri::check_exit(&s, 0, "Completed")?;
        let path = pod.log_of(&c);
        ensure!(
            s.log_path == path.display().to_string(),
            "log_path {:?}, want {}",
            s.log_path,
            path.display()
        );
        let log = cri::read_log(&path)?;
        let out = cri::lines_of(&log, "stdout");
        let err = cri::lines_of(&log, "stderr");
        let a = "a".repeat(40000);
        let b = "b".repeat(20000);
        ensure!(
            out.len() == 4
                && out[0] == "out-1"
                && out[1] == a
                && out[2] == "out 2  with  spaces"
                && out[3] == "tail-without-newline",
            "stdout lines {:?}",
            out.iter().map(|l| l.len()).collect::<Vec<_>>()
        );
        ensure!(
            err.len() == 3 && err[0] == "err-1" && err[1] == b && err[2] == "err-2",
            "stderr lines {:?}",
            err.iter().map(|l| l.len()).collect::<Vec<_>>()
        );
        // The long lines: cut into P pieces of at most the buffer, the last piece F.
        for (stream, ch, len) in [("stdout", 'a', 40000usize), ("stderr", 'b', 20000)] {
            let pieces: Vec<&cri::LogLine> = log
                .iter()
                .filter(|l| l.stream == stream && l.msg.starts_with(ch))
                .collect();
            let shape: Vec<(String, usize)> = pieces
                .iter()
                .map(|l| (l.tag.clone(), l.msg.len()))
                .collect();
            eprintln!("{stream} long line pieces: {shape:?}");
            let Some((last, first)) = shape.split_last() else {
                anyhow::bail!("no {stream} pieces");
            };
            ensure!(
            pieces.len() >= len.div_ceil(MAX_LINE)
                && first.iter().all(|(t, n)| t == "P" && *n <= MAX_LINE)
                && last.0 == "F"
                && last.1 <= MAX_LINE,
            "{stream}: a {len}-byte line must be P pieces of at most {MAX_LINE} then F: {shape:?}"
        );
        }
        // A tty container: one stream, logged as stdout.
        let mut t = cri::sh_config(&pod, "tty", &busybox, "echo to-tty; echo err-tty >&2");
        t.tty = true;
        let id = cri::create_start(&mut rt, &pod, &t).await?;
        cri::check_exit(&cri::wait_exited(&mut rt, &id, 10).await?, 0, "Completed")?;
        let tty_log = cri::read_log(&pod.log_of(&t))?;
        let tty_out: Vec<String> = cri::lines_of(&tty_log, "stdout")
            .into_iter()
            .map(|l| l.trim_end_matches('\r').to_string())
            .collect();
        ensure!(
            tty_out == ["to-tty", "err-tty"] && cri::lines_of(&tty_log, "stderr").is_empty(),
            "tty log: {tty_log:?}"
        );
        // Short lines are single F records.
        for l in log
            .iter()
            .filter(|l| l.msg.len() < 100 && l.msg != "tail-without-newline")
        {
            ensure!(l.tag == "F", "short line not F: {l:?}");
        }
        cri::remove_pod(&mut rt, &pod.id).await?;
        ensure!(path.exists(), "the log must outlive the container");
        Ok(())
    })
}
