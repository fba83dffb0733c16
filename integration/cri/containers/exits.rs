//! Exit codes and reasons: normal exits, signals, the OOM killer, and start failures.

use anyhow::{ensure, Context, Result};
use bosun::proto::runtime::v1 as pb;

use crate::support::cri::{self, NEEDS};
use crate::support::trial;
use crate::support::Scenario;

pub fn trials() -> Vec<libtest_mimic::Trial> {
    vec![trial(
        "cri::containers::exit_codes_and_reasons_signal_oom_start_failure",
        NEEDS,
        exit_codes,
    )]
}

fn exit_codes() -> Result<()> {
    Scenario::new().run(async |s| {
        let d = &s.daemon;
        let busybox = s.image("busybox");
        let mut rt = s.rt.clone();
        // A shared pid namespace: the container's sh is not PID 1, so a signal with its
        // default action kills it.
        let mut cfg = cri::pod_config(d, "exits");
        cri::share_pid(&mut cfg);
        let pod = cri::run_pod(&mut rt, cfg).await?;
        let mut cases: Vec<(String, String, i32, &str)> = [
            ("exit-3", "exit 3", 3, "Error"),
            ("exit-0", "echo done; exit 0", 0, "Completed"),
            ("usr1", "kill -USR1 $$; sleep 5", 128 + 10, "Error"),
        ]
        .map(|(n, s, c, r)| (n.to_string(), s.to_string(), c, r))
        .into();
        // Instant exits race the daemon's bookkeeping of the start: try several.
        for code in [0, 1, 2, 42, 127, 255] {
            let reason = if code == 0 { "Completed" } else { "Error" };
            cases.push((
                format!("instant-{code}"),
                format!("exit {code}"),
                code,
                reason,
            ));
        }
        let mut ids = Vec::new();
        for (name, script, _, _) in &cases {
            let c = cri::sh_config(&pod, name, &busybox, script);
            ids.push(cri::create_start(&mut rt, &pod, &c).await?);
        }
        // Timestamp order is checked last, so one report shows every other problem too.
        let mut disorder = Vec::new();
        for ((name, _, code, reason), id) in cases.iter().zip(&ids) {
            let s = cri::wait_exited(&mut rt, id, 10).await?;
            cri::check_exit(&s, *code, reason).with_context(|| name.to_string())?;
            if !(s.created_at <= s.started_at && s.started_at <= s.finished_at && s.started_at > 0)
            {
                disorder.push(format!(
                    "{name}: created {} started {} finished {} (finished - started = {} ns)",
                    s.created_at,
                    s.started_at,
                    s.finished_at,
                    s.finished_at - s.started_at
                ));
            }
        }

        // OOM: 16 MiB and a shell whose string doubles until the kernel kills it, within
        // milliseconds of its start: four at once, each must be OOMKilled. (They may die
        // before their monitor's OOM watch is set up, the race a88eb2b fixed; this does not
        // force it: the lane passed with that fix reverted, 4 of 4.)
        let mut ids = Vec::new();
        for i in 0..4 {
            let name = format!("oom-{i}");
            let mut c = cri::sh_config(&pod, &name, &busybox, "x=a; while true; do x=$x$x; done");
            cri::resources(&mut c).memory_limit_in_bytes = 16 << 20;
            ids.push((name, cri::create(&mut rt, &pod, &c).await?));
        }
        for (_, id) in &ids {
            cri::start(&mut rt, id).await?;
        }
        for (name, id) in &ids {
            let s = cri::wait_exited(&mut rt, id, 20).await?;
            cri::check_exit(&s, 137, "OOMKilled").with_context(|| name.clone())?;
        }

        // Start failure: the command does not exist. CreateContainer runs nothing, so it
        // succeeds (as containerd's); StartContainer fails naming the container and the
        // binary, and leaves it EXITED (128, StartError) with no monitor or runc state.
        let mut c = cri::container_config(&pod, "no-such-binary", &busybox);
        c.command = vec!["/no-such-binary".into()];
        let id = cri::create(&mut rt, &pod, &c).await?;
        let err = cri::start(&mut rt, &id)
            .await
            .err()
            .context("StartContainer of a missing binary succeeded")?;
        eprintln!("StartContainer of a missing binary: {err:#}");
        let code = err
            .downcast_ref::<tonic::Status>()
            .map(|s| s.code())
            .context("StartContainer's error is no gRPC status")?;
        ensure!(
            code == tonic::Code::FailedPrecondition
                && format!("{err:#}").contains("no-such-binary")
                && format!("{err:#}").contains(&id),
            "{err:#}"
        );
        let s = cri::status(&mut rt, &id).await?;
        ensure!(
            cri::state_of(&s) == pb::ContainerState::ContainerExited
                && s.exit_code == 128
                && s.reason == "StartError"
                && s.message.contains("no-such-binary"),
            "a failed start: {s:?}"
        );
        ensure!(
            cri::monitors_of(&id).is_empty() && !cri::runc_containers(&d.state()).contains(&id),
            "a failed start left its monitor or runc state"
        );
        let again = rt
            .start_container(pb::StartContainerRequest {
                container_id: id.clone(),
            })
            .await;
        cri::refused(
            "StartContainer after a failed start",
            again,
            tonic::Code::FailedPrecondition,
            &[&id],
        )?;
        cri::remove_pod(&mut rt, &pod.id).await?;
        ensure!(
            disorder.is_empty(),
            "timestamps out of order (created <= started <= finished):\n  {}",
            disorder.join("\n  ")
        );
        Ok(())
    })
}
