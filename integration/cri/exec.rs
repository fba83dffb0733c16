//! ExecSync with real runc: output and exit codes, timeouts, the 16 MiB cap, no zombies.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};

use crate::support::cri::{self, NEEDS};
use crate::support::Scenario;
use crate::support::{trial, wait_until};

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![
        trial(
            "cri::exec::output_exit_codes_timeout_and_no_zombies",
            NEEDS,
            output_and_timeout,
        ),
        trial(
            "cri::exec::stdout_and_stderr_are_capped_at_16_mib",
            NEEDS,
            capped,
        ),
    ]
}

const CAP: usize = 16 << 20;

fn output_and_timeout() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "exec")).await?;
        let c = cri::sh_config(&pod, "target", &busybox, "echo ready; exec sleep 1000");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;

        let r = cri::exec(
            &mut rt,
            &id,
            &["sh", "-c", "echo out; echo err >&2; exit 5"],
            10,
        )
        .await
        .context("a non-zero exit is not a gRPC error")?;
        ensure!(
            r.exit_code == 5 && r.stdout == b"out\n" && r.stderr == b"err\n",
            "exec: {} {:?} {:?}",
            r.exit_code,
            String::from_utf8_lossy(&r.stdout),
            String::from_utf8_lossy(&r.stderr)
        );
        // The exec runs in the container: its hostname, its env, its cwd.
        let r = cri::exec(&mut rt, &id, &["sh", "-c", "hostname; echo $PATH; pwd"], 0).await?;
        let want = format!(
            "{}\n/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\n/\n",
            pod.config.hostname
        );
        ensure!(
            r.exit_code == 0 && String::from_utf8_lossy(&r.stdout) == want,
            "exec env: {:?}",
            String::from_utf8_lossy(&r.stdout)
        );
        let r = cri::exec(&mut rt, &id, &["/no-such-binary"], 10).await;
        eprintln!("exec of a missing binary: {r:?}");
        ensure!(
            r.as_ref().map_or(true, |o| o.exit_code != 0),
            "exec of a missing binary succeeded"
        );

        // Timeout: DeadlineExceeded, the process killed.
        let secs = format!("{}", 800_000 + std::process::id() % 90_000);
        let t = Instant::now();
        let err = cri::exec(&mut rt, &id, &["sleep", &secs], 1)
            .await
            .err()
            .context("exec past its timeout succeeded")?;
        let took = t.elapsed();
        eprintln!(
            "ExecSync timeout 1 s: {:?} after {took:?}: {}",
            err.code(),
            err.message()
        );
        ensure!(
            err.code() == tonic::Code::DeadlineExceeded,
            "want DeadlineExceeded: {err:?}"
        );
        ensure!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(5),
            "timeout 1 s returned after {took:?}"
        );
        let argv = ["sleep", secs.as_str()];
        ensure!(
            wait_until(5, || cri::processes_with_argv(&argv).is_empty()),
            "timed-out exec still running: {:?}",
            cri::processes_with_argv(&argv)
        );

        // Many short execs, concurrently: every one answered, no zombie left.
        let mut tasks = Vec::new();
        for i in 0..12 {
            let mut c = rt.clone();
            let id = id.clone();
            tasks.push(tokio::spawn(async move {
                cri::exec(
                    &mut c,
                    &id,
                    &["sh", "-c", &format!("echo {i}; exit {}", i % 3)],
                    // Twelve runc execs at once: a slow lane needs longer.
                    10 * i64::from(crate::support::time_scale()),
                )
                .await
            }));
        }
        for (i, t) in tasks.into_iter().enumerate() {
            let r = t.await?.with_context(|| format!("exec {i}"))?;
            ensure!(
                r.exit_code == (i % 3) as i32 && r.stdout == format!("{i}\n").as_bytes(),
                "exec {i}: {} {:?}",
                r.exit_code,
                r.stdout
            );
        }
        let daemon = d.pid().context("daemon pid")? as i32;
        ensure!(
            wait_until(5, || cri::zombies_of(daemon).is_empty()),
            "zombies of the daemon: {:?}",
            cri::zombies_of(daemon)
                .iter()
                .map(|p| cri::cmdline(*p))
                .collect::<Vec<_>>()
        );
        // Exec in a stopped container is refused.
        cri::stop(&mut rt, &id, 0).await?;
        let r = cri::exec(&mut rt, &id, &["true"], 10).await;
        ensure!(r.is_err(), "exec in an exited container: {r:?}");
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}

fn capped() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        let pod = cri::run_pod(&mut rt, cri::pod_config(d, "exec-cap")).await?;
        let c = cri::sh_config(&pod, "target", &busybox, "echo ready; exec sleep 1000");
        let id = cri::create_start(&mut rt, &pod, &c).await?;
        cri::wait_log(&pod.log_of(&c), 10, |l| l.iter().any(|x| x == "ready")).await?;
        let t = Instant::now();
        let r = cri::exec(
            &mut rt,
            &id,
            &["sh", "-c", "head -c 20971520 /dev/zero; echo small >&2"],
            30,
        )
        .await
        .context("20 MiB of stdout")?;
        eprintln!("ExecSync of 20 MiB: {:?}", t.elapsed());
        ensure!(
            r.exit_code == 0 && r.stdout.len() == CAP && r.stdout.iter().all(|b| *b == 0),
            "stdout: exit {} {} bytes (want {CAP})",
            r.exit_code,
            r.stdout.len()
        );
        ensure!(
            r.stderr == b"small\n",
            "stderr {:?}",
            String::from_utf8_lossy(&r.stderr)
        );
        let r = cri::exec(
            &mut rt,
            &id,
            &[
                "sh",
                "-c",
                "head -c 20971520 /dev/zero | tr '\\0' e >&2; echo small",
            ],
            30,
        )
        .await
        .context("20 MiB of stderr")?;
        ensure!(
            r.exit_code == 0 && r.stderr.len() == CAP && r.stderr.iter().all(|b| *b == b'e'),
            "stderr: exit {} {} bytes (want {CAP})",
            r.exit_code,
            r.stderr.len()
        );
        ensure!(
            r.stdout == b"small\n",
            "stdout {:?}",
            String::from_utf8_lossy(&r.stdout)
        );
        cri::remove_pod(&mut rt, &pod.id).await?;
        Ok(())
    })
}
